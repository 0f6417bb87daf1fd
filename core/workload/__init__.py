"""Workloads: the requests to serve, from synthetic generators or real traces.

    build_workload(WorkloadConfig(...))   a preset or trace file, transformed, described
    load_trace(path, format="auto")       one trace file as it is (formats.py)
    write_trace(workload, path)           the batchlab format, CSV or JSON lines
    workload_stats(workload)              count, span, rate, burstiness, length percentiles
"""
from batchlab.core.workload.config import PRESETS, WorkloadConfig, build_workload
from batchlab.core.workload.errors import WorkloadError
from batchlab.core.workload.formats import FORMAT_NAMES, detect_format, load_trace
from batchlab.core.workload.lengths import LengthSpec
from batchlab.core.workload.native import write_trace
from batchlab.core.workload.sources import TRACES, traces_dir
from batchlab.core.workload.stats import format_stats, workload_stats
from batchlab.core.workload.synthetic import gamma_arrivals
from batchlab.core.workload.workload import Workload

__all__ = ["FORMAT_NAMES", "PRESETS", "TRACES", "LengthSpec", "Workload", "WorkloadConfig",
           "WorkloadError", "build_workload", "detect_format", "format_stats", "gamma_arrivals",
           "load_trace", "traces_dir", "workload_stats", "write_trace"]
