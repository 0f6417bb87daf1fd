"""The CPU's model name, as /proc/cpuinfo gives it: what a CPU profile records as its
device, and what a real run is compared against (profiles of one CPU model price another's
steps only with that said)."""
from __future__ import annotations

import platform
import re
from pathlib import Path


def cpu_name() -> str:
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        found = None
    return found.group(1).strip() if found else (platform.processor() or platform.machine())
