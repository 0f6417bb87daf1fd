"""A profile fitted on request timings (--from-replay, --endpoint): what was read, the
engine's settings, each term against its prior and whether the data told it, the
per-request error against the prior's and the server's own spread, and which profile was
written (verdict.py), with a line where the fit did worse than the prior or the fitted
and judged parts ran in different load regimes."""
from __future__ import annotations

from batchlab.calibration.fit.calibrated import Calibrated
from batchlab.calibration.from_replay.fit import APART
from batchlab.calibration.from_replay.judge import UNSTEADY_PCT
from batchlab.calibration.from_replay.run import ReplayFit

TOLD = {"told": "yes", "untold": "no: held at the prior", "weak": "weakly (see +-)",
        "measured": "measured: the server's own tables"}


def _terms(res: ReplayFit) -> list[str]:
    f = res.fit
    lines = [f"{'term':<18} {'prior':>11} {'fitted':>11} {'x prior':>8} {'+-':>6}  told by the data?"]
    for t in f.terms:
        told = TOLD.get(t.status) or f"only with {', '.join(t.partners) or 'others'}"
        lines.append(f"{t.name:<18} {t.prior:>11.4g} {t.value:>11.4g} {t.value / t.prior:>8.3f} "
                     f"{'x' + format(t.sd_factor, '.2f'):>6}  {told}")
    lines += [f"  {a} and {b}: told only together (correlation {c:+.2f}); their split follows the prior"
              for a, b, c in f.together]
    lines += [f"  {t.name}: held at the prior's {t.prior:.4g}: the timings tell it only together with "
              f"{', '.join(t.partners)}" for t in f.terms if t.status == "untold" and t.name in APART and t.partners]
    if res.measured is not None:
        lines.append(f"  the server's tables ({res.measured.requests} requests found, {res.measured.steps} steps):")
        lines += [f"    {line}" for line in res.measured.lines]
    if f.held:
        lines.append(f"  not fitted (the prior prices them at 0): {', '.join(f.held)}")
    return lines


def _errors(res: ReplayFit) -> list[str]:
    f = res.fit
    lines = [f"\nfit: {f.residuals} timings, rms log error {f.rms:.3f}, {f.nfev} simulations of the "
             f"replays, scipy least_squares (trf, soft_l1)", f"train:   {res.train.line()}"]
    if res.heldout:
        lines.append(f"held out: {res.heldout.line()}\n  prior:  {res.heldout_prior.line()}")
    if len(res.per_replay) > 1:
        lines += [f"  {name}: {fitted.line()}\n    prior: {before.line()}" for name, fitted, before in res.per_replay]
    lines.append(f"server's own spread: {res.floor.line() if res.floor else res.floor_from}")
    if res.floor and res.floor.unsteady:
        lines.append(f"WARNING: the same requests sent twice differed by more than {UNSTEADY_PCT:.0f}%: the "
                     f"server's speed moved during the replays, so the errors above measure that as much as "
                     f"the fit; replay again on a quiet server")
    v = res.verdict
    return lines + v.warnings() + [f"written: the {'fitted profile' if v.written == 'fit' else 'prior'}: {v.why}"]


def replayed(res: ReplayFit, prior_where: str, settings_why: str) -> Calibrated:
    """settings_why: where the engine settings no option gave came from (or why not)."""
    f, settings = res.fit, res.settings
    lines = [f"read {r.where} ({r.fmt}): {len(r.requests)} requests used; dropped: {r.describe_dropped()}"
             for r in res.replays]
    lines.append(f"engine settings: {'; '.join(settings.lines())}" + (f"\n  ({settings_why})" if settings_why else ""))
    lines.append(f"prior: {prior_where}\nfitted on: {', '.join(res.fitted_on)}\njudged on: "
                 f"{', '.join(res.judged_on) or 'none (--holdout-every 0)'}\n")
    summary = {"fitted_on": res.fitted_on, "judged_on": res.judged_on, "settings": settings.as_dict(),
               "dropped": {r.where: r.dropped for r in res.replays},
               "terms": [t.__dict__ for t in f.terms], "held": f.held,
               "together": f.together, "measured": res.measured and res.measured.lines, "heldout": res.heldout and res.heldout.as_dict(),
               "heldout_prior": res.heldout_prior and res.heldout_prior.as_dict(),
               "train": res.train.as_dict(), "floor": res.floor and res.floor.as_dict(),
               "heldout_by_replay": [{"replay": w, "fit": a.as_dict(), "prior": b.as_dict()}
                                     for w, a, b in res.per_replay],
               "fit_s": f.seconds, "evaluations": f.nfev, "written": res.verdict.as_dict(),
               "warnings": res.verdict.warnings()}
    return Calibrated(res.profile, lines + _terms(res) + _errors(res), summary)
