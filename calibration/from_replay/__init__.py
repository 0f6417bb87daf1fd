"""Calibrating from request timings alone (`batchlab calibrate --from-replay`, `--endpoint`):
what a client of any OpenAI-compatible server sees, fitted by simulating the observed
request list under candidate costs.

observed.py   one replay's requests as observed, and what could not be used (counted)
read*.py      the readers: batchlab replay, vllm bench serve, SGLang bench_serving
settings.py   the engine's settings: from the server's /metrics, the user, or defaults
space.py      a cost form as named parameters with a prior (generic over forms)
predict.py    the observed request list simulated under a candidate cost
fit.py        the fit (scipy least_squares) and what the data can tell (identifiability)
judge.py      per-request error on held-out replays, beside the server's own spread
run.py        the whole fit: readers -> settings -> fit -> judged profile
probes.py     the designed probe workloads of --endpoint (sent by experiments/calibrate/endpoint.py)
The command line (options, the prior chosen, what is printed) is experiments/calibrate/'s."""
