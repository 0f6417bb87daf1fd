"""The backend runs a small mixture-of-experts model (batchlab-tiny-moe, Mixtral-shaped)
and a small sliding-window model (batchlab-tiny-swa, Qwen2-shaped, a window of 32 on
every other layer), built from their shipped config.json with seeded weights, under the
shared scheduler with the paged KV cache: greedy tokens equal transformers' reference
implementation of the same config, through batching, chunked prefills and preemption,
and the steps it records carry the windowed features."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from tests.test_backend_oracle import _reference, _serve, _workload, preempted_as_reference
from batchlab.backend.models import build_preset
from batchlab.backend.runtime import Runtime
from batchlab.core.model.presets import MODELS

# Contexts well past the 32-token window, some prompts longer than it.
W = _workload([5, 45, 12, 70, 1, 33], [30, 12, 40, 9, 50, 20])


@pytest.fixture(scope="module", params=["batchlab-tiny-moe", "batchlab-tiny-swa"])
def model(request):
    torch.set_num_threads(1)
    return build_preset(request.param, seed=0)


@pytest.fixture(scope="module")
def runtime(model):
    return Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1)


@pytest.fixture(scope="module")
def reference(model):
    return _reference(model.hf, model.spec.vocab_size, W)


def test_the_shape_is_the_simulators(model):
    assert model.spec == MODELS[model.name]
    assert model.spec.is_moe or model.spec.layer_windows


def test_continuous(runtime, reference):
    out, res = _serve(runtime, W, policy="continuous", block_size=4)
    assert out == reference
    assert res.steps["num_seqs"].max() > 1


def test_chunked_with_preemption(runtime, reference):
    preempted_as_reference(runtime, W, reference, policy="chunked", block_size=4, num_kv_blocks=30,
                           max_num_batched_tokens=16)


def test_recorded_steps_count_the_window(model, runtime):
    _, res = _serve(runtime, W, policy="continuous", block_size=4)
    s = res.steps
    if model.spec.layer_windows:
        assert (s["window_kv_tokens_read"] <= s["kv_tokens_read"]).all()
        assert (s["window_kv_tokens_read"] < s["kv_tokens_read"]).any()
        assert (s["window_kv_tokens_read"] <= s["num_seqs"] * 32 + s["prefill_tokens"]).all()
    else:
        assert np.array_equal(s["window_kv_tokens_read"], s["kv_tokens_read"])


def test_a_moe_checkpoint_too_large_counts_every_expert(tmp_path):
    from batchlab.backend.models import load_model
    from batchlab.core.model.presets import PRESET_CONFIGS
    (tmp_path / "config.json").write_text((PRESET_CONFIGS / "mixtral-8x22b.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"140,6\d\d,\d{3},\d{3} parameters"):
        load_model(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["batchlab-tiny-moe", "batchlab-tiny-swa"])
def test_calibrate_fits_and_validate_judges_the_new_models(name, tmp_path):
    """End to end: the sweep records the windowed features, the profile's shape carries the
    experts or the windows, and validate serves the model and judges the profile on it."""
    import json

    from tests.helpers import SMALL_VALIDATE, cli
    from batchlab.calibration import calibrate
    from batchlab.calibration.sweep.grid import tiny_grid
    from batchlab.core.cost.fitted import Shape
    from batchlab.core.cost.profile import load_profile

    path = tmp_path / "p.json"
    calibrate(name, "cpu", threads=1, out=path, grid=tiny_grid(), progress=False, log=lambda _m: None)
    profile = load_profile(path)
    shape = Shape.of(profile.model)
    assert shape.expert_weight_bytes > 0 or shape.window_kv_bytes_per_token > 0
    raw = [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]
    windowed = [r["features"] for r in raw if "features" in r]
    assert all("window_kv_tokens_read" in f for f in windowed)
    code, text, err = cli(["validate", *SMALL_VALIDATE, "--max-prompt-len", "80", "--profile", str(path),
                           "--format", "json"])
    assert code == 0, err
    assert json.loads(text)


def test_a_config_only_directory_runs_with_seeded_weights(tmp_path):
    import json

    from batchlab.backend.models import load_model
    from batchlab.core.model.presets import PRESET_CONFIGS
    cfg = json.loads((PRESET_CONFIGS / "batchlab-tiny-moe.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 2}))
    a, b = load_model(str(tmp_path), seed=3), load_model(str(tmp_path), seed=3)
    assert a.source == "config" and a.spec.is_moe and a.spec.num_layers == 2
    assert all(torch.equal(x, y) for x, y in zip(a.hf.parameters(), b.hf.parameters()))
    rt = Runtime(loaded=a, keep_hf=True, kv_memory="16MiB", threads=1)
    w = _workload([7, 20], [6, 9])
    out, _ = _serve(rt, w, policy="continuous", block_size=4)
    assert out == _reference(a.hf, a.spec.vocab_size, w)
