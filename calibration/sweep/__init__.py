"""The backend timing sweep (`batchlab calibrate`, needs torch): a grid of step shapes
timed on the backend, then a short serving phase, fitted into a profile (calibration/fit/).

grid.py            which step shapes to time, and the synthetic Batch of each
runner.py          the sweep itself: every point timed in shuffled rounds, logged as JSONL
timing.py          robust statistics, the reference kernel, the device's measured roofline
aggregate.py       raw timings to one robust figure per point, drift normalised
serve_phase.py     serving a synthetic workload after the sweep, refitting to its steps
contention.py      a contended machine's timings detected and refused
on_contention.py   what to do when the serving phase is contended twice (no heavy import)
fresh_process.py   running a function in a freshly spawned process
run.py             calibrate(): load the backend, sweep, fit, serve, save the profile"""
