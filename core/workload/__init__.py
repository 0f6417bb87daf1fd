"""Workloads: the requests to serve, from synthetic generators or real traces."""
from core.workload.config import PRESETS, WorkloadConfig, build_workload
from core.workload.lengths import LengthSpec
from core.workload.workload import Workload

__all__ = ["PRESETS", "LengthSpec", "Workload", "WorkloadConfig", "build_workload"]
