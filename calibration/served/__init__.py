"""Served runs' step tables (`batchlab calibrate --from-run`): read back from what
`batchlab run` / `validate --out` wrote, fitted or used to refine a profile
(calibration/fit/served_steps.py), judged on the runs held out.

runs.py       the reader: every real run under a folder, with its step table
from_run.py   the fit: split, fit or refine, judge, the profile it makes"""
