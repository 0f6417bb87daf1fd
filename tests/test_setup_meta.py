"""SetupMeta: what a simulation rests on, typed, and carried into the run's meta in the
order the setup gave it (a run's meta.json is read by key order-sensitive tools and
compared byte for byte across versions)."""
from __future__ import annotations

import pytest

from batchlab.core.workload import Workload
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import assumption_lines, sim_setup
from batchlab.experiments.setup.meta import SetupMeta
from batchlab.sim import simulate

SIMULATOR_KEYS = ["world", "policy", "replicas", "router", "num_kv_blocks", "workload",
                  "interrupted", "simulated_s"]


def config(**tables) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"run": {"policies": ["continuous", "static"]}, **tables})


def test_roofline_setup_records_its_assumptions_in_order():
    setup = sim_setup(config(model={"name": "llama-3-8b", "kv_cache_dtype": "fp8"},
                             hardware={"name": "h100-sxm", "tensor_parallel": 2, "cost": "roofline"}))
    meta = setup.meta
    assert isinstance(meta, SetupMeta)
    assert (meta.cost_model, meta.tensor_parallel, meta.num_kv_blocks) == ("roofline", 2, setup.blocks)
    assert meta.served_dtypes == (meta.weights_dtype, "fp8") and meta.weights_dtype != "fp8"
    assert set(meta.max_num_seqs) == {"continuous", "static"}
    assert not meta.recorded("profile") and meta.profile is None  # not written where not given
    given = list(meta.as_dict())
    assert given[:5] == ["model", "hardware", "tensor_parallel", "cost_model", "max_context"]
    assert given[-4:] == ["scheduler_defaults", "max_num_seqs", "block_size", "num_kv_blocks"]
    assert "TP 2: " in assumption_lines(meta)[1] and "all-reduces a step" in assumption_lines(meta)[1]


def test_the_run_meta_keeps_the_setup_keys_after_the_simulators():
    setup = sim_setup(config(model={"name": "llama-3-8b"}, hardware={"name": "a100-80gb"}))
    w = Workload(arrival=[0.0, 0.1], prompt_len=[30, 40], output_len=[5, 6])
    result = simulate(w, setup.schedulers["continuous"], setup.cost, setup.blocks, meta=setup.meta)
    keys = list(result.meta.as_dict())
    setup_keys = [k for k in setup.meta.as_dict() if k not in SIMULATOR_KEYS]
    assert keys == SIMULATOR_KEYS + setup_keys
    assert result.meta.num_kv_blocks == setup.blocks
    assert result.meta.as_dict()["max_num_seqs"] == setup.meta.max_num_seqs


def test_a_profile_setup_records_the_profile_not_the_roofline():
    setup = sim_setup(config(profile={"path": "default"}))
    meta = setup.meta
    assert meta.cost_model.startswith("profile (") and meta.profile == "default"
    assert meta.served_dtypes == (meta.dtype, meta.dtype) and meta.dtype
    assert not meta.recorded("weights_dtype") and not meta.recorded("mem_efficiency")
    assert assumption_lines(meta)[0].startswith(f"assumptions: {meta.cost_model} from default")


def test_a_field_of_the_wrong_type_is_refused():
    with pytest.raises(ValueError, match="tensor_parallel"):
        SetupMeta(model="m", hardware="h", cost_model="roofline", max_context=8, tensor_parallel="two")
