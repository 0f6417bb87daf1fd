"""Served-engine benchmark results (mean TTFT and TPOT of a closed loop at a fixed
concurrency, as ../shared/served-benchmarks/ holds for vLLM): read.py reads and checks
them, client.py makes the workload a row stands for under a stated client model, judge.py
sets predictions beside measurements (`batchlab validate --served-benchmarks FILE`)."""
