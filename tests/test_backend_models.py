"""Which models the backend runs: embedded presets, local checkpoints of supported
architectures (checked against transformers on the saved weights), clear refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.device import parse_memory, resolve_device, resolve_dtype
from batchlab.backend.driver import run_workload
from batchlab.backend.engine import synthetic_prompt
from batchlab.backend.models import build_preset, load_model, preset_names
from batchlab.backend.runtime import Runtime
from batchlab.core.config import SchedulerConfig
from batchlab.core.model.presets import MODELS
from batchlab.core.workload import Workload
from tests.checkpoints import small_config


def test_presets_are_priced_by_the_simulator():
    assert {"batchlab-tiny", "batchlab-small"} <= set(preset_names())
    assert 15e6 < MODELS["batchlab-tiny"].params < 30e6
    assert 100e6 < MODELS["batchlab-small"].params < 150e6
    m = build_preset("batchlab-tiny")
    assert sum(p.numel() for p in m.hf.parameters()) == m.spec.params == MODELS["batchlab-tiny"].params
    assert m.spec.dtype_bytes == MODELS["batchlab-tiny"].dtype_bytes == 4


def test_preset_weights_are_seeded():
    a, b, c = (build_preset("batchlab-tiny", seed=s).hf.lm_head.weight for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_cpu_weights_are_drawn_as_they_always_were():
    """The CPU path draws float32 weights with the global generator seeded, then casts:
    the weights every CPU profile and run so far was measured on."""
    from transformers import LlamaForCausalLM

    from batchlab.backend.models import preset_config
    config = preset_config(MODELS["batchlab-tiny"])
    config._attn_implementation = "sdpa"
    torch.manual_seed(3)
    expected = LlamaForCausalLM(config).to(torch.bfloat16).lm_head.weight
    got = build_preset("batchlab-tiny", torch.bfloat16, seed=3).hf.lm_head.weight
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)


def test_building_leaves_the_callers_generator_alone():
    torch.manual_seed(11)
    expected = torch.rand(4)
    torch.manual_seed(11)
    build_preset("batchlab-tiny", seed=5)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_weights_are_drawn_there_seeded_in_the_dtype():
    a, b, c = (build_preset("batchlab-tiny", torch.bfloat16, "cuda", seed=s).hf.lm_head.weight
               for s in (1, 1, 2))
    assert a.is_cuda and a.dtype == torch.bfloat16
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("name, msg", [
    ("no-such-model", "unknown backend model 'no-such-model'"),
    ("llama-2-7b", "simulator-only preset"),
])
def test_unknown_models_refused(name, msg):
    with pytest.raises(ValueError, match=msg):
        load_model(name)


def test_bad_directories_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="no config.json"):
        load_model(str(tmp_path))
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}
    (tmp_path / "config.json").write_text(json.dumps(gpt2))
    with pytest.raises(ValueError, match="unsupported architecture 'gpt2'"):
        load_model(str(tmp_path))


def test_settings_refused_with_one_line():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int3")
    with pytest.raises(ValueError, match="memory budget"):
        parse_memory("lots")
    assert parse_memory("0.3") == ("fraction", 0.3)
    assert parse_memory("2GiB") == ("bytes", 2 * 2**30)
    assert parse_memory(5e8) == ("bytes", 5e8)


def _save_checkpoint(kind: str, path) -> None:
    from transformers import AutoModelForCausalLM
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(small_config(kind))
    with torch.no_grad():  # larger random biases so a bias mistake would show
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    model.save_pretrained(path)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_checkpoint_directory_matches_transformers(kind, tmp_path):
    _save_checkpoint(kind, tmp_path)
    assert any(tmp_path.glob("*.safetensors"))
    rt = Runtime(model=str(tmp_path), kv_memory="16MiB", keep_hf=True, threads=1)
    assert rt.meta().model_source == "checkpoint"
    w = Workload(arrival=np.zeros(4), prompt_len=[3, 20, 9, 14], output_len=[12, 6, 15, 9])
    outputs: dict[int, list[int]] = {}
    run_workload(rt, w, SchedulerConfig(policy="chunked", block_size=4, max_num_batched_tokens=8),
                 time_scale=0.0, progress=False, outputs=outputs)
    hf = rt.model.hf
    for i in range(len(w)):
        ids = torch.from_numpy(synthetic_prompt(i, int(w.prompt_len[i]), 300))[None]
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=int(w.output_len[i]), pad_token_id=0)
        assert outputs[i] == ref[0, ids.shape[1]:].tolist(), f"request {i}"


def test_checkpoint_with_unsupported_features_refused(tmp_path):
    _save_checkpoint("llama", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["hidden_act"] = "gelu"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported activation 'gelu'"):
        load_model(str(tmp_path))


def test_params_label():
    from batchlab.backend.models import params_label
    assert [params_label(n) for n in (512, 139_584, 1_500_000, 21_012_480, 125_000_000, 7.24e9)] == \
        ["512", "140k", "1.5M", "21M", "125M", "7.2B"]


def test_context_limit_of_presets_and_checkpoints(tmp_path):
    rt = Runtime("batchlab-tiny", kv_memory="16MiB")
    assert rt.spec.max_context == 8192
    _save_checkpoint("qwen2", tmp_path)  # max_position_embeddings=256
    assert load_model(str(tmp_path)).spec.max_context == 256


def test_a_checkpoint_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    """A profile records the name; typed relative at calibration, it must still name the
    checkpoint when used from another folder."""
    _save_checkpoint("qwen2", tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    assert load_model("./ckpt").name == str((tmp_path / "ckpt").resolve())
