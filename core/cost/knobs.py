"""Knobs: the constants a price rests on, with how sure we are of each.

A cost setup (a roofline from assumed efficiencies, a GPU profile fitted on measured
operators) names every fitted or assumed constant it uses as a Knob: its value, the
range its uncertainty allows, and where the value came from. `capacity --sensitivity`
reruns the search with each knob at its low and its high end and reports the range of
the answer; the output prints the knobs beside the answer. The setup that made the
knobs rebuilds the price from changed values (experiments/setup), so a knob is only a
name and numbers here."""
from __future__ import annotations

from typing import NamedTuple


class Knob(NamedTuple):
    name: str  # the setup's own name for it, e.g. "mem_efficiency", "allreduce_latency_s"
    value: float
    low: float  # the low end of what its uncertainty allows
    high: float
    source: str  # where the value came from: "assumed", "fitted on vidur a100 (held-out 4%)", ...

    def ends(self) -> tuple[float, float]:
        return self.low, self.high
