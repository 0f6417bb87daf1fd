"""The profile a fit from request timings writes: the prior's, with the cost form at the
values given (the fit's, or the prior's own where the prior is kept: verdict.py), the
server's engine settings and front end, the fit quality judged, and notes saying how."""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from batchlab.calibration.fit.profile_parts import cost_params, effective
from batchlab.calibration.from_replay.fit import FRONT, REQUEST_OVERHEAD, SERIAL, FitResult
from batchlab.calibration.from_replay.judge import Errors
from batchlab.calibration.from_replay.settings import EngineSettings
from batchlab.calibration.from_replay.space import ParamSpace
from batchlab.core.cost.cpu_form import CpuFormModel
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.cost.profile import (DeviceInfo, FitQuality, FrontEndParams, LoopTime, Profile,
                                        PROFILE_VERSION, RegionError)


def refitted_form(prior: Profile, model) -> dict:
    """The profile fields of the refitted form: the GPU form's constants where it priced
    the prior (the fitted form's `cost` kept as the prior had it), else the fitted form's."""
    if isinstance(model, CpuFormModel):
        assert prior.gpu_form is not None  # a CpuFormModel prices only a profile carrying it
        return {"gpu_form": prior.gpu_form.refined(model), "form": "gpu"}
    return {"cost": cost_params(model), "effective": effective(model, {}), "gpu_form": None, "form": "fitted"}


def form_note(model) -> str:
    """What was refitted, for the profile's notes: the GPU form (core/cost/cpu_form.py) or
    the fitted form (core/cost/fitted.py)."""
    if isinstance(model, CpuFormModel):
        return "the GPU form refitted (the fitted form's cost: the prior's, not refitted)"
    return "the fitted form refitted"


def quality(judged: Errors, train: Errors, floor: Errors | None) -> FitQuality:
    """The fit quality a profile stores: judged (held out, else train) and train errors."""
    def region(ape: float, n: int) -> RegionError:
        return RegionError(n=n, median_ape=round(ape, 2), max_ape=None)
    return FitQuality(heldout=region((judged.ttft_median_pct + judged.tpot_median_pct) / 2, judged.n),
                      train=region((train.ttft_median_pct + train.tpot_median_pct) / 2, train.n),
                      regions={"ttft": region(judged.ttft_median_pct, judged.n),
                               "tpot": region(judged.tpot_median_pct, judged.n)},
                      spread_median_pct=None if floor is None else
                      round((floor.ttft_median_pct + floor.tpot_median_pct) / 2, 2))


@dataclass(frozen=True)
class Made:
    prior: Profile
    space: ParamSpace
    settings: EngineSettings
    fitted_on: list[str]
    served_at: str | None = None  # the one endpoint the fitted replays were sent to
    loop: Overhead | None = None  # the serving loop's time the server's tables measured (else the prior's)

    def device(self) -> DeviceInfo:
        """The fitted profile's device: a GPU prior names the GPU the user stated; a CPU prior
        names the CPU it was measured on, not the server's (a client cannot see it), so the
        fit is named after the endpoint it was fitted to, where there is one."""
        d = self.prior.device
        if d.kind != "cpu" or not self.served_at:
            return d
        return d.model_copy(update={"name": f"served at {self.served_at}", "threads": None})

    def profile(self, values: dict[str, float], fit: FitQuality, notes: str, front_source: str,
                runs: list[str] | None = None, as_prior: bool = False) -> Profile:
        """The prior with its cost form at `values` (the front end's among them); as_prior:
        the prior itself written (not fitted), on its own device."""
        ro, serial = values[REQUEST_OVERHEAD], values[SERIAL]
        return self.prior.model_copy(update={
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **refitted_form(self.prior, self.space.fitted(values)), "fit": fit,
            "num_kv_blocks": int(self.settings.num_kv_blocks.value),
            "block_size": int(self.settings.block_size.value), "measurements": None, "measurements_path": None,
            "serving": None, "grid": None, "sweep_s": None, "total_s": None,
            "runs": self.fitted_on if runs is None else runs, "version": PROFILE_VERSION,
            "front_end": FrontEndParams(delay_s=ro, serial_s=serial, source=front_source),
            "device": self.prior.device if as_prior else self.device(), "notes": notes,
            **({"loop": LoopTime.fitted(self.loop)} if self.loop is not None else {})})

    def fitted_front(self, server: str | None = None) -> str:
        if server:  # measured_terms.py
            return (f"measured: the client's TTFT of {', '.join(self.fitted_on)} less the engine's in {server}; "
                    f"a delay a request from send to the engine, and a handling time a request of a burst")
        return (f"fitted from client timings of {', '.join(self.fitted_on)}: a delay a request from send to "
                f"the engine, and a handling time a request of a burst")

    def fitted_notes(self, result: FitResult, prior_where: str, judged_on: list[str]) -> str:
        told = [t.name for t in result.terms if t.told and t.name not in FRONT]
        together = [t.name for t in result.terms if t.status == "together"]
        measured = [t.name for t in result.terms if t.status == "measured"]
        ro, serial = result.values[REQUEST_OVERHEAD], result.values[SERIAL]
        return (f"fitted from request timings (calibrate --from-replay: {result.residuals} TTFT/TPOT "
                f"observations of {', '.join(self.fitted_on)}); judged on {', '.join(judged_on) or 'none'}; "
                f"prior {prior_where}; {form_note(self.space.fitted(result.values))}; told by the data: "
                f"{', '.join(told) or 'none'}; told only in combination (split as the prior): "
                f"{', '.join(together) or 'none'}; held at the prior: "
                f"{', '.join(result.untold + result.held) or 'none'}; measured from the server's own tables: "
                f"{', '.join(measured) or 'none'}; the server's front end "
                f"(front_end, simulated before the engine): {ro * 1e3:.1f} ms a request from send "
                f"to the engine, {serial * 1e3:.2f} ms more for each request of a burst; engine: "
                f"{'; '.join(self.settings.lines())}")

    def prior_notes(self, prior_where: str, why: str) -> str:
        return (f"the prior {prior_where}, kept by calibrate --from-replay: {why}; its front end the fit's "
                f"prior (not fitted); engine: {'; '.join(self.settings.lines())}; the prior's notes: "
                f"{self.prior.notes or 'none'}")
