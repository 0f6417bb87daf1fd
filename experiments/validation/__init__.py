"""Validation: the same workload served by the real backend and by the simulator (with a
calibrated profile) under the same scheduler, and how far apart the two runs are.

compare.py     the metrics table (latency statistics, throughput) and the error targets
steps.py       step compositions, step-by-step matching, per-step duration error
divergence.py  why the runs differ: step counts, first divergence, preemptions, overhead
overhead.py    time outside forward passes, measured in the real run
variants.py    the simulated variants' cost models (headline: the profile alone)
pair.py        running both worlds on one request list
validate.py    one validation: real run, simulated variants, the comparison
text.py, plot.py, output.py   what `batchlab validate` prints, plots and writes
study.py, study_report.py     the validation study (benchmarks/validation_study.py)
"""
