"""The [deployment] table: a prefill pool and a decode pool, each its replicas and TP
over [hardware]'s GPU, and the link the KV crosses between them.

    [deployment]
    prefill_replicas = 1
    decode_replicas = 1
    prefill_tp = 1
    decode_tp = 1
    link = "ib-ndr"            # core/model/presets/links.toml: nvlink3..5, ib-hdr/ndr/xdr,
                               # roce-200/400, pcie4/5
    # link_gbs = 40            # the link's bandwidth one way per GPU, replacing the catalogue's
    # link_latency_us = 10     # and its fixed cost per transfer
    # prefill_router = "least_loaded"   # default: [run] router
    # decode_router = "least_loaded"
    # overlap = "layers"       # each layer's KV sent as it finishes (default "none": NIXL's) """
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from batchlab.core.checks import Count, NonNegative, Positive
from batchlab.core.model.links import LINKS, LinkSpec, get_link
from batchlab.sim.router import ROUTERS


class DeploymentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefill_replicas: Count = 1
    decode_replicas: Count = 1
    prefill_tp: Count = Field(1, le=4096, description="tensor-parallel GPUs a prefill replica")
    decode_tp: Count = Field(1, le=4096, description="tensor-parallel GPUs a decode replica")
    link: str = Field("ib-ndr", description="the link the KV crosses (core/model/presets/links.toml)")
    link_gbs: Positive | None = Field(None, le=1e7, description="GB/s one way per GPU (default: the link's)")
    link_latency_us: NonNegative | None = Field(None, le=1e8, description="fixed cost of a transfer (default: the link's)")
    prefill_router: str | None = None
    decode_router: str | None = None
    overlap: Literal["none", "layers"] = Field(
        "none", description="none: the KV is sent whole after the prefill (vLLM's NIXL connector); "
        "layers: each layer's as it finishes (LMCache's layer-wise mode, Splitwise)")

    @field_validator("link")
    @classmethod
    def _known_link(cls, v: str) -> str:
        if v not in LINKS:
            raise ValueError(f"unknown link; expected one of {', '.join(LINKS)}")
        return v

    @field_validator("prefill_router", "decode_router")
    @classmethod
    def _known_router(cls, v: str | None) -> str | None:
        if v is not None and v not in ROUTERS:
            raise ValueError(f"unknown router; expected one of {', '.join(ROUTERS)}")
        return v

    def link_spec(self) -> LinkSpec:
        """The catalogue's link with the figures given here in its place."""
        base = get_link(self.link)
        update: dict[str, float | str] = {}
        if self.link_gbs is not None:
            update["bandwidth"] = self.link_gbs * 1e9
        if self.link_latency_us is not None:
            update["latency_s"] = self.link_latency_us * 1e-6
        if update:
            update["source"] = f"{base.source}; figures given in [deployment]"
        return base.model_copy(update=update)

    @property
    def lanes(self) -> int:
        """Links a transfer uses at once: each TP rank sends its KV heads' share."""
        return min(self.prefill_tp, self.decode_tp)
