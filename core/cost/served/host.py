"""The engine's host time a step (scheduling, input preparation, output processing: terms.py
`step_s` + `seq_s` a sequence) and how much of it the GPU's step hides.

vLLM V1 with async scheduling (`--async-scheduling`, vllm/v1/core/sched/async_scheduler.py)
schedules step n + 1 while the GPU runs step n: the host time is hidden up to the step's GPU
time, a step costing max(GPU, host) rather than their sum. `host_overlap` is the share of
min(host, GPU) hidden: 0 is synchronous scheduling, 1 async. Off by default in the engine the
shared rows ran (vllm-project/vllm @ 01230b4 vllm/config/scheduler.py, the 0.11-0.12 line:
`async_scheduling: bool = False`); later the engine decides and turns it on where supported
(@ 1f8758d: `async_scheduling = None`; vllm-project/vllm PR #27614). The rows cannot tell it
from step_s, so it is held at its prior; `[hardware] knobs = {served_host_overlap = 1}`
prices an async engine."""
from __future__ import annotations

from batchlab.core.cost.served.formats import Prior

HOST_OVERLAP = Prior(
    "host_overlap", "of the host time hidden", 0.0, 0.0, 1.0,
    "off, vLLM's default to the 0.12 line (vllm/config/scheduler.py @ 01230b4; on by default later, "
    "@ 1f8758d: [hardware] knobs = {served_host_overlap = 1})")


def overlapped(total: float, host: float, overlap: float) -> float:
    """A step of `total` seconds, `host` of them the engine's own, with `overlap` of the
    smaller of host and GPU time hidden behind the other."""
    return total - overlap * min(host, total - host)


# The release from which vLLM schedules asynchronously unless told not to: PR #27614 made
# `async_scheduling = None` mean on where supported (@ 1f8758d above), first released in
# v0.14.0 (torch-spyre/sendnn-inference PR #636, adding 0.14.0: "Disables async scheduling
# which is now enabled by default"). The shared rows: 0.12.0 off, 0.18.0 on (InferenceX's
# gpt-oss runs also set `async-scheduling: true`: docs/results/2026-12-07-served-engine.md).
ASYNC_BY_DEFAULT_FROM = (0, 14)


def async_by_default(version: str) -> bool:
    """Whether vLLM `version` ("0.18.0", "0.11.2", ...) schedules asynchronously by default;
    an empty or unreadable version is taken as the synchronous engine."""
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= ASYNC_BY_DEFAULT_FROM
