"""Where and how the backend computes: device, dtype, threads and memory budgets.

Every function here turns a user setting into a torch object or a number, and raises
ValueError with a one-line message when the setting cannot be honoured (a cuda device
on a machine without one, an unknown dtype, a budget that is not a size)."""
from __future__ import annotations

import os

import torch

from batchlab.core.checks import parse_memory  # noqa: F401  (re-exported: the backend's budgets)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}

def resolve_device(name: str = "cpu") -> torch.device:
    """'cpu', 'cuda' or 'cuda:N'; refuses a GPU that is not there."""
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"unknown device {name!r}: expected cpu, cuda or cuda:N") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but no CUDA GPU is available "
                             f"(torch {torch.__version__})")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} GPU(s) present")
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {name!r}: expected cpu, cuda or cuda:N")
    return dev


def resolve_dtype(name: str | torch.dtype = "float32") -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: expected one of float32, bfloat16, float16")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (None: leave torch's default). Returns the count
    in force. One thread is the steady choice for measurement on small shared CPUs."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def free_memory_bytes(device: torch.device) -> int:
    """Memory that can still be allocated: free GPU memory, or MemAvailable on the host."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def budget_bytes(value: str | int | float, device: torch.device) -> int:
    kind, num = parse_memory(value)
    return int(num * free_memory_bytes(device)) if kind == "fraction" else int(num)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so a step's wall time is the work's time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
