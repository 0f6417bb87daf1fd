"""The fit every step-timing source shares (the backend sweep, its serving phase, served
runs), and the report of what it made.

fitted_form.py    the fitted form (core/cost/fitted.py FittedCostModel) on measured steps
gpu_form.py       the GPU form on the CPU (core/cost/cpu_form.py) on the same measurements
both_forms.py     both forms on a sweep's measurements; which one prices a profile
served_steps.py   a fitted model refined to served steps, and judged per step kind
profile_parts.py  a fitted model's parts of a Profile (parameters, rates, device)
report.py         plain-text summaries of a profile: fit quality, rates, per-point errors
served_report.py  served-step terms in words and per-step-kind errors (serving phase, --from-run)
calibrated.py     Calibrated: what every source ends in (profile, report, JSON summary)
posterior.py      what a least-squares fit's data tell of each log-parameter (Laplace)"""
