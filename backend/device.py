"""Where and how the backend computes: device, dtype, threads and memory budgets.

Every function here turns a user setting into a torch object or a number, and raises
ValueError with a one-line message when the setting cannot be honoured (a cuda device
on a machine without one, an unknown dtype, a budget that is not a size)."""
from __future__ import annotations

import os
import re

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "t": 1e12, "tb": 1e12}


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


def parse_memory(value: str | int | float) -> tuple[str, float]:
    """A KV budget: a fraction of free memory ('0.3', 0.3) or a size ('2GiB', '512MB',
    2e9). Returns ('fraction', f) or ('bytes', n)."""
    if isinstance(value, (int, float)):
        num, unit = float(value), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"memory budget {value!r}: expected a fraction (0.3) or a size (2GiB, 512MB)")
        num, unit = float(m.group(1)), m.group(2).lower()
    if num <= 0:
        raise ValueError(f"memory budget must be > 0, got {value!r}")
    if unit == "" and num <= 1:
        return "fraction", num
    return "bytes", num * _UNITS[unit]


def budget_bytes(value: str | int | float, device: torch.device) -> int:
    kind, num = parse_memory(value)
    return int(num * free_memory_bytes(device)) if kind == "fraction" else int(num)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so a step's wall time is the work's time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
