"""Where a workload comes from: a named synthetic preset, a named shared trace, or a file.

Shared traces live in ../shared/traces next to the repository (override with the
BATCHLAB_TRACES environment variable). A preset name wins over a file of the same name;
write ./chat to mean the file.
"""
from __future__ import annotations

import os
from pathlib import Path

from batchlab.core.workload.lengths import LengthSpec


def traces_dir() -> Path:
    env = os.environ.get("BATCHLAB_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "traces"


# Named real traces (files in traces_dir()).
TRACES: dict[str, str] = {
    "azure_code": "azure2023_code.csv",
    "azure_conv": "azure2023_conv.csv",
    "mooncake": "mooncake_synthetic.jsonl",
}


def _mix(*parts: tuple[float, dict]) -> LengthSpec:
    return LengthSpec(dist="mixture", components=[LengthSpec(weight=w, **d) for w, d in parts])


def _from_file(name: str) -> dict[str, LengthSpec]:
    path = str(traces_dir() / "lengths" / name)
    return dict(prompt=LengthSpec(dist="file", path=path, column="prompt"),
                output=LengthSpec(dist="file", path=path, column="output"))


# Named synthetic workloads. "chat": the seed's case for continuous batching, replies of
# widely varying length: most short, a few very long. "sharegpt" and "arxiv": (prompt,
# output) pairs drawn from the shared length files (Llama-2 tokenizer).
PRESETS: dict[str, dict] = {
    "chat": dict(
        num_requests=1000, rate=12.0,
        prompt=LengthSpec(dist="lognormal", mean=300, sigma=0.8, max=4096),
        output=_mix((0.80, dict(dist="uniform", low=12, high=40)),
                    (0.15, dict(dist="uniform", low=100, high=300)),
                    (0.05, dict(dist="uniform", low=500, high=1000))),
    ),
    # Multi-turn chat (core/workload/conversations.py): `rate` conversations/s; each
    # prompt is a 512-token system prompt, the conversation so far and a new message.
    "multiturn": dict(
        num_requests=1000, rate=0.5, turns=5, turn_gap_s=20.0, system_prompt_len=512,
        prompt=LengthSpec(dist="lognormal", mean=150, sigma=0.8, max=2048),
        output=_mix((0.80, dict(dist="uniform", low=12, high=40)),
                    (0.15, dict(dist="uniform", low=100, high=300)),
                    (0.05, dict(dist="uniform", low=500, high=1000))),
    ),
    "uniform": dict(
        num_requests=1000, rate=10.0,
        prompt=LengthSpec(dist="fixed", value=512), output=LengthSpec(dist="fixed", value=128),
    ),
    "sharegpt": dict(num_requests=1000, rate=10.0, **_from_file("sharegpt_8k_llama2tok.csv")),
    "arxiv": dict(num_requests=1000, rate=2.0,
                  **_from_file("arxiv_summarization_llama2tok.csv")),
}


def resolve(source: str) -> Path | None:
    """The file a source names, or None for a synthetic preset."""
    if source in PRESETS:
        return None
    if source in TRACES:
        return traces_dir() / TRACES[source]
    return Path(source)
