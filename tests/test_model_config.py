"""Any Hugging Face config.json is a model: the shipped presets parse into the sizes their
model cards publish; a directory or a file works wherever a model is named; a config
batchlab cannot price is one line naming the field, exit 2."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from tests.helpers import cli, one_line_error
from batchlab.core.model.config_json import spec_from_config, spec_from_file
from batchlab.core.model.spec import MXFP4_BYTES
from batchlab.core.model.presets import lookup_model, MODELS, PRESET_CONFIGS

# Model cards' figures: (total parameters, active parameters) in billions, as published
# (the language model only, for multimodal ones). Cards count active parameters with the
# input embedding (Qwen, Mixtral) or without it (DeepSeek): either is accepted.
CARDS = {
    "qwen3-8b": (8.2, None), "qwen3-32b": (32.8, None), "qwen3-30b-a3b": (30.5, 3.3),
    "qwen3-235b-a22b": (235, 22), "qwen1.5-moe-a2.7b": (14.3, 2.7), "gemma-2-9b": (9.24, None),
    "gemma-2-27b": (27.2, None), "mixtral-8x7b": (46.7, 12.9), "mixtral-8x22b": (141, 39),
    "gpt-oss-20b": (20.9, 3.6), "gpt-oss-120b": (116.8, 5.1), "deepseek-v2": (236, 21),
    "deepseek-v2-lite": (15.7, 2.4), "deepseek-v3": (671, 37), "deepseek-r1": (671, 37),
    "llama-4-scout": (109, 17), "llama-4-maverick": (400, 17),
}


def _active_range(spec) -> tuple[float, float]:
    embed = 0 if spec.tied_embeddings else spec.vocab_size * spec.hidden_size
    return spec.active_params / 1e9, (spec.active_params + embed) / 1e9


@pytest.mark.parametrize("name", sorted(CARDS))
def test_presets_match_their_model_cards(name):
    spec = MODELS[name]
    total, active = CARDS[name]
    assert spec.params / 1e9 == pytest.approx(total, rel=0.03)
    if active is not None:
        lo, hi = _active_range(spec)
        assert lo * 0.95 <= active <= hi * 1.05, (lo, hi)
        assert spec.flops_per_token == 2 * spec.active_params


def test_every_shipped_config_has_a_source_and_a_licence():
    sources = tomllib.loads((PRESET_CONFIGS / "SOURCES.toml").read_text())
    files = {f.stem for f in PRESET_CONFIGS.glob("*.json")}
    assert files == set(sources)
    for name, s in sources.items():
        assert "/" in s["repo"] and s["licence"], name
        assert name in MODELS


def test_moe_mla_window_and_quantisation_fields():
    q = MODELS["qwen3-30b-a3b"]
    assert (q.num_experts, q.experts_per_token, q.expert_intermediate_size, q.moe_layers) == (128, 8, 768, 48)
    ds = MODELS["deepseek-v3"]
    assert ds.is_mla and ds.moe_layers == 58 and ds.shared_expert_intermediate_size == 2048
    # MLA stores one 512-wide latent plus a 64-wide rope key per token and layer, 16-bit.
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert ds.dtype_bytes == 1 and ds.quantization == "fp8"
    gpt = MODELS["gpt-oss-120b"]
    assert gpt.layer_windows == (128, 0) * 18 and gpt.attention_sinks
    assert gpt.expert_weight_bytes == MXFP4_BYTES and gpt.dtype_bytes == 2
    g3 = MODELS["gemma-3-27b"]
    assert g3.windowed_layers == 52 and g3.layer_windows[5] == 0 and g3.layer_windows[4] == 1024
    assert g3.tied_embeddings  # Gemma's default
    scout, maverick = MODELS["llama-4-scout"], MODELS["llama-4-maverick"]
    assert scout.moe_layers == 48 and maverick.moe_layers == 24
    assert scout.layer_windows[:4] == (8192, 8192, 8192, 0)


def test_a_dense_llama_config_gives_the_dense_preset():
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "max_position_embeddings": 8192}
    spec = spec_from_config(cfg, "llama-3-8b")
    assert spec.model_dump(exclude={"architecture"}) == MODELS["llama-3-8b"].model_dump(exclude={"architecture"})


def test_qwen2_windows_from_max_window_layers():
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "use_sliding_window": True,
           "sliding_window": 32, "max_window_layers": 2}
    assert spec_from_config(cfg, "q").layer_windows == (0, 0, 32, 32)
    assert not spec_from_config({**cfg, "use_sliding_window": False}, "q").layer_windows


def test_a_directory_and_its_config_file_are_the_same_model(tmp_path):
    d = tmp_path / "Qwen3-30B-A3B"
    d.mkdir()
    (d / "config.json").write_text((PRESET_CONFIGS / "qwen3-30b-a3b.json").read_text())
    by_dir, by_file = lookup_model(str(d)), lookup_model(str(d / "config.json"))
    assert by_dir.name == "Qwen3-30B-A3B"
    assert by_dir == by_file == MODELS["qwen3-30b-a3b"].model_copy(update={"name": "Qwen3-30B-A3B"})


def test_simulate_takes_a_model_directory(tmp_path):
    d = tmp_path / "gpt-oss"
    d.mkdir()
    (d / "config.json").write_text((PRESET_CONFIGS / "gpt-oss-20b.json").read_text())
    code, out, err = cli(["simulate", "--model", str(d), "--hardware", "h100-sxm", "--num-requests", "20",
                          "--format", "json"])
    assert code == 0, err
    assert json.loads(out)


BASE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
        "num_local_experts": 4, "num_experts_per_tok": 2}
BAD = [
    ("unknown-architecture", {"model_type": "mamba", "architectures": ["MambaForCausalLM"]}, "model_type"),
    ("top-k-above-experts", {"num_experts_per_tok": 5}, "num_experts_per_tok"),
    ("kv-heads-do-not-divide", {"num_key_value_heads": 3}, "num_key_value_heads"),
    ("heads-do-not-divide-hidden", {"num_attention_heads": 5}, "num_attention_heads"),
    ("missing-hidden", {"hidden_size": None}, "hidden_size"),
    ("layers-bool", {"num_hidden_layers": True}, "num_hidden_layers"),
    ("quant-awq", {"quantization_config": {"quant_method": "awq"}}, "quant_method"),
    ("layer-types-short", {"layer_types": ["full_attention"]}, "layer_types"),
    ("window-missing", {"layer_types": ["sliding_attention", "full_attention"]}, "sliding_window"),
    # Sizes that cannot be simulated: refused naming the bound before memory is spent
    # (10^9 layers built a per-layer list until a MemoryError).
    ("layers-1e9", {"num_hidden_layers": 10**9}, "num_hidden_layers: 1,000,000,000 is beyond what "
     "batchlab simulates (at most 10,000"),
    ("experts-1e9", {"num_local_experts": 10**9}, "num_local_experts: 1,000,000,000 is beyond what "
     "batchlab simulates (at most 100,000"),
    ("vocab-1e12", {"vocab_size": 10**12}, "(at most 100,000,000"),
    ("hidden-1e12", {"hidden_size": 10**12}, "hidden_size: 1,000,000,000,000 is beyond"),
    ("window-1e12", {"sliding_window": 10**12, "model_type": "mistral"}, "sliding_window: 1,000,000,000,000"),
]


@pytest.mark.parametrize("patch, field", [pytest.param(p, f, id=i) for i, p, f in BAD])
def test_a_config_that_cannot_be_priced_names_the_field(patch, field, tmp_path):
    cfg = {k: v for k, v in {**BASE, **patch}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=re.escape(field)):
        spec_from_file(tmp_path)
    code, _, err = cli(["simulate", "--model", str(tmp_path), "--num-requests", "4"])
    one_line_error(code, err, field, "config.json")


def test_a_missing_model_path_is_one_line(tmp_path):
    code, _, err = cli(["simulate", "--model", str(tmp_path / "nowhere"), "--num-requests", "4"])
    one_line_error(code, err, "nowhere")


def test_a_hub_id_says_the_hub_is_not_read():
    code, _, err = cli(["simulate", "--model", "Qwen/Qwen3-30B-A3B-nowhere", "--num-requests", "4"])
    one_line_error(code, err, "never the model hub")


def test_a_quantised_checkpoint_keeps_a_16_bit_kv_cache(tmp_path):
    fp8 = tmp_path / "fp8"
    code, _, err = cli(["simulate", "--model", "deepseek-v3", "--hardware", "h200", "--tp", "8",
                        "--num-requests", "4", "--out", str(fp8)])
    assert code == 0, err
    meta = next(iter(json.loads((fp8 / "meta.json").read_text()).values()))  # by policy
    assert (meta["weights_dtype"], meta["kv_cache_dtype"]) == ("fp8", "bf16")
