"""Links a KV transfer crosses (NVLink, InfiniBand, RoCE, PCIe): the catalogue of line
rates and fixed costs (core/model/presets/links.toml, each entry with its source) and
the time one transfer takes. The disaggregated simulator prices a prefill-to-decode
hand-off with it; a KV tier's host link may too.

    seconds = latency + bytes / (bandwidth * lanes)

lanes: GPUs that send their share at once (each TP rank holds its KV heads' share and
has its own NIC or NVLink ports)."""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchlab.core.checks import NonNegative, Positive

LINK_CATALOGUE = Path(__file__).parent / "presets" / "links.toml"
LINK_KINDS = ("NVLink", "InfiniBand", "RoCE", "PCIe")


class LinkSpec(BaseModel):
    """One link: its line rate one way per GPU and the fixed cost of one transfer."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: str = Field(description="NVLink, InfiniBand, RoCE or PCIe")
    bandwidth: Positive = Field(description="bytes/s one way per GPU")
    latency_s: NonNegative = Field(0.0, description="fixed cost of one transfer")
    source: str = ""

    def transfer_seconds(self, nbytes: float, lanes: int = 1) -> float:
        """Seconds to move `nbytes` over `lanes` such links in parallel."""
        return self.latency_s + nbytes / (self.bandwidth * lanes)


class LinkFigures(BaseModel):
    """A link as the catalogue and a config give it: GB/s one way per GPU, microseconds."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    bandwidth_gbs: Positive
    latency_us: NonNegative = 0.0
    source: str = ""

    def spec(self, name: str) -> LinkSpec:
        return LinkSpec(name=name, kind=self.kind, bandwidth=self.bandwidth_gbs * 1e9,
                        latency_s=self.latency_us * 1e-6, source=self.source)


def link_figures(entry: dict, where: str) -> LinkFigures:
    """Validated figures of one link; a bad one is a one-line error naming the field."""
    try:
        figures = LinkFigures.model_validate(entry)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "entry"
        raise ValueError(f"{where}{field}: {err['msg']}") from None
    if figures.kind not in LINK_KINDS:
        raise ValueError(f"{where}kind: {figures.kind!r} is not a link kind; expected one of "
                         f"{', '.join(LINK_KINDS)}")
    return figures


def read_links(path: Path = LINK_CATALOGUE) -> dict[str, LinkSpec]:
    with open(path, "rb") as f:
        entries = tomllib.load(f)
    return {name: link_figures(e, f"{path.name} [{name}] ").spec(name) for name, e in entries.items()}


LINKS: dict[str, LinkSpec] = read_links()


def get_link(name: str, where: str = "link") -> LinkSpec:
    """The catalogue's link `name`; an unknown one is an error naming `where`."""
    if name not in LINKS:
        raise ValueError(f"{where}: unknown link {name!r}; expected one of {', '.join(LINKS)}")
    return LINKS[name]
