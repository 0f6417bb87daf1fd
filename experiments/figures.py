"""Figures as data: what a plot shows (panels, and in each the marks drawn on it, its
axes and labels), with no drawing code. A study builds these objects; one renderer
(experiments/plots.py, `draw`) turns them into PNG files, so matplotlib is imported only
when a figure is drawn, and a figure can be checked or re-drawn without re-running the
study.

A Figure is a grid of Panels. A Panel lists its marks in drawing order, then the settings
applied after them (scales, ticks, limits, title, labels, grid, legend), in that order."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

# One colour per policy, the same in every plot batchlab draws.
POLICY_COLORS = {"static": "#d62728", "continuous": "#1f77b4", "chunked": "#2ca02c"}


def color(policy: str, default: str = "#555555") -> str:
    return POLICY_COLORS.get(policy, default)


def cycle_color(i: int) -> str:
    """The i-th colour of matplotlib's default cycle ('C0', 'C1', ...)."""
    return f"C{i}"


@dataclass(frozen=True)
class Line:
    """A line and/or markers through (x, y). None leaves matplotlib's default."""
    x: Sequence[float]
    y: Sequence[float]
    label: str | None = None
    color: str | None = None
    marker: str | None = None
    ls: str | None = None
    lw: float | None = None
    ms: float | None = None
    mfc: str | None = None


@dataclass(frozen=True)
class VLine:
    """A vertical line across the panel at x."""
    x: float
    color: str
    ls: str
    lw: float
    label: str | None = None


@dataclass(frozen=True)
class MarkX:
    """A dashed vertical line at x with a rotated label near the top (y in axes units)."""
    x: float
    text: str
    color: str = "#444444"
    y: float = 0.97


@dataclass(frozen=True)
class MarkY:
    """A dotted horizontal line at y with a label at the left."""
    y: float
    text: str
    color: str = "#444444"


@dataclass(frozen=True)
class Cdf:
    """The empirical CDF of values (fraction of requests); log: a log x axis; ls: its
    line style (None: solid). Nothing is drawn for no values."""
    values: Sequence[float]
    label: str
    color: str | None = None
    log: bool = True
    ls: str | None = None


@dataclass(frozen=True)
class Band:
    """The band between two curves x = low(level), x = high(level) over the levels (y),
    drawn in steps: e.g. the lowest and highest of several runs' quantiles."""
    levels: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]
    label: str
    color: str = "#999999"
    alpha: float = 0.45


@dataclass(frozen=True)
class Bars:
    """One bar per label (a policy, coloured as such), its value written on top; the
    bars set the panel's title and y label."""
    labels: Sequence[str]
    values: Sequence[float]
    title: str
    ylabel: str
    value_fmt: str = "{:.0f}"


@dataclass(frozen=True)
class GroupedBars:
    """Per label (a policy), one bar per series side by side, told apart by hatching."""
    labels: Sequence[str]
    series: dict[str, Sequence[float]]
    title: str
    ylabel: str
    value_fmt: str = "{:.0f}"


@dataclass(frozen=True)
class SeatGrid:
    """Which request holds each seat at each step: holders [steps, seats] request ids
    (-1: empty), computed [steps, seats] (False: held but paused); long_ids drawn dark
    red. x_edges: steps + 1 column edges (e.g. step start times); None: one per step."""
    holders: np.ndarray
    computed: np.ndarray
    long_ids: frozenset[int]
    title: str
    x_edges: np.ndarray | None = None


Mark = Union[Line, VLine, MarkX, MarkY, Cdf, Band, Bars, GroupedBars, SeatGrid]


@dataclass(frozen=True)
class Grid:
    which: str | None = None  # "both": minor ticks too
    alpha: float = 0.3


@dataclass(frozen=True)
class Legend:
    fontsize: float | None = None
    loc: str | None = None


@dataclass(frozen=True)
class SeatLegend:
    """The seat timeline's key (short, long, paused, empty), below the panel."""


@dataclass
class Panel:
    marks: list[Mark] = field(default_factory=list)
    title: str | None = None
    title_size: float = 10
    xlabel: str | None = None
    ylabel: str | None = None
    xscale: str | None = None
    xscale_base: float | None = None
    yscale: str | None = None
    xticks: Sequence[int] | None = None  # labelled with the numbers themselves
    plain_x: bool = False  # x tick labels as plain numbers (100, 1000: not 10^2), no minor labels
    plain_y: bool = False  # the same for y
    xlim: tuple[float | None, float | None] | None = None
    ylim: tuple[float | None, float | None] | None = None
    grid: Grid | None = None
    legend: Legend | SeatLegend | None = None
    twin: Panel | None = None  # a second y axis on the right, sharing x (marks, ylabel)


@dataclass
class Figure:
    filename: str
    panels: list[Panel]
    rows: int = 1
    cols: int = 1
    title: str | None = None
    width: float = 6.0  # per panel, inches
    height: float = 4.0
    sharex: bool = False


def filenames(figures: Sequence[Figure]) -> list[str]:
    return [f.filename for f in figures]
