"""Calibration on a contended machine: detected, not absorbed. A neighbour that takes the
core mid-sweep or mid-serving leaves timings that no cost model of this machine explains;
fitted anyway they give non-physical prices (a step priced at or below 0 s: the serving
phase then crashed sizing its traffic, `ValueError: scale < 0`) or a profile 1.6-2.7x off.
These checks refuse such a fit with the reason, before anything is written; the serving
phase is retried once (calibration/sweep/run.py), since a neighbour's burst often passes.

A step is contended when it took over CONTENDED x the price the sweep's fit gives it
(core/step_table.py, as machine_speed and the serving refit count them)."""
from __future__ import annotations

import math
import os

import numpy as np

from batchlab.core.features import StepFeatures
from batchlab.core.step_table import CONTENDED

MAX_CONTENDED_SHARE = 0.25  # of the served steps: more, and the serving phase is refused


class ContendedCalibration(RuntimeError):
    """A calibration refused: its timings are contaminated (the message says how)."""


def load_note() -> str:
    if not hasattr(os, "getloadavg"):
        return ""
    return f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs now)"


def host_idle() -> bool:
    """The load average leaves half the CPUs or more unused: no other work is running
    here (a hypervisor's neighbours do not show in it)."""
    return hasattr(os, "getloadavg") and os.getloadavg()[0] < (os.cpu_count() or 1) / 2


def check_prices(cost, feats: list[StepFeatures], what: str) -> None:
    """Refuse a model that prices any of these steps at or below 0 s, or not at all."""
    prices = np.array([cost.step_time(f) for f in feats], dtype=float)
    bad = ~np.isfinite(prices) | (prices <= 0)
    if bad.any():
        worst = float(np.nanmin(np.where(np.isfinite(prices), prices, np.nan))) if np.isfinite(prices).any() \
            else math.nan
        raise ContendedCalibration(
            f"{what} prices {int(bad.sum())} of {len(prices)} steps at or below 0 s (lowest {worst * 1e3:.3g} "
            f"ms): a non-physical fit, its timings contaminated by other work on the machine{load_note()}; "
            f"nothing was written: rerun on a quiet machine")


def contended_share(sweep_cost, feats: list[StepFeatures], measured: np.ndarray) -> float:
    """Share of served steps over CONTENDED x the sweep's price."""
    price = np.array([sweep_cost.step_time(f) for f in feats], dtype=float)
    ok = price > 0
    return float(np.mean(measured[ok] > CONTENDED * price[ok])) if ok.any() else 1.0


def check_served(sweep_cost, feats: list[StepFeatures], measured: np.ndarray, refuse: bool = True) -> float:
    """Refuse (with `refuse`) a serving phase whose steps were mostly timed while something
    else ran; returns its contended share."""
    share = contended_share(sweep_cost, feats, measured)
    if refuse and share > MAX_CONTENDED_SHARE:
        why = ("; no other work shows in the load average, so the steps' own times vary (an engine "
               "bound by its host, as on a GPU, or a VM's neighbours)") if host_idle() else ""
        raise ContendedCalibration(
            f"the serving phase was contended: {share:.0%} of its {len(measured)} steps took over "
            f"{CONTENDED:g}x the sweep's price (at most {MAX_CONTENDED_SHARE:.0%} allowed){load_note()}"
            f"{why}; --on-contention keep keeps such a phase")
    return share
