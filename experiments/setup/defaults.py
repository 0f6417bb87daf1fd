"""The embedded default experiments: what a command runs when no --config is given.
Each is a config file's tables as a dict (command-line options override it field by
field, experiments/options.py)."""
from __future__ import annotations

from typing import Any

Experiment = dict[str, Any]

# `batchlab simulate`: the seed's point, a chat mix whose replies vary widely (most
# short, a few very long) served by static, continuous and chunked batching.
SIMULATE_EXPERIMENT: Experiment = {
    "workload": {"source": "chat", "num_requests": 1000, "rate": 14.0},
    "scheduler": {"max_num_seqs": 32},
    "model": {"name": "llama-3-8b"},
    "hardware": {"name": "a100-80gb"},
    "run": {"policies": ["static", "continuous", "chunked"], "slo": {"ttft_ms": 2000, "tpot_ms": 100}},
}

# `batchlab run` and `batchlab validate`: small enough to finish in well under a minute
# on two CPU cores with the tiny model.
RUN_EXPERIMENT: Experiment = {
    "workload": {"source": "chat", "num_requests": 40, "rate": 8.0},
    "scheduler": {"max_num_seqs": 32},
    "model": {"name": "batchlab-tiny"},
    "run": {"policies": ["continuous"]},
}

# `batchlab replay`: the workload of `batchlab run`.
REPLAY_EXPERIMENT: Experiment = {"workload": RUN_EXPERIMENT["workload"]}

# `batchlab serve`: requests come over HTTP; only the model is chosen here.
SERVE_EXPERIMENT: Experiment = {"model": {"name": "batchlab-tiny"}}

# `batchlab capacity`: the simulate demo's workload and pairing, under chunked prefill.
CAPACITY_EXPERIMENT: Experiment = {
    "workload": {"source": "chat", "num_requests": 1000, "rate": 14.0},
    "model": {"name": "llama-3-8b"},
    "hardware": {"name": "a100-80gb"},
    "scheduler": {"policy": "chunked"},
}
