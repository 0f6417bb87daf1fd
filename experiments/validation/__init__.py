"""Validation: a calibrated profile judged on real runs of a workload, whatever their
source, by simulating the identical request list under the same scheduler settings.

sources.py          a source yields the real runs of one request list (RealSide): served
                    here (serve_here, with pair.py), endpoint.py (one replay), stored.py
                    (runs an earlier validation wrote)
judge.py            the one judgement: the headline and normalised simulations, every
                    judged number, the diagnostics the source allows
records.py          the judgement, typed (what comparison.json and rejudged.json hold)
render.py           the one renderer of what `batchlab validate` prints
metrics.py, verdicts.py, stat_tests.py, distributions.py    the judged numbers, their
                    errors and verdicts, spread, KS and TOST
steps.py, divergence.py, per_step.py, step_kinds.py, normalised.py    step matching, why
                    schedules part, the per-step test against the runs' own spread,
                    the mispriced step kinds, the profile at a run's machine speed
output.py, figures.py     --out: run folders, comparison.json, CDF figures as data
profile_source.py   where the judged profile comes from (--profile, or a calibration)
"""
