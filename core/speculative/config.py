"""A deployment's speculative decoding, as a TOML [speculative] table (and the simulate
and run flags) validates it: one-line errors naming the field."""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from batchlab.core.checks import Count, number

MAX_DRAFTS = 64  # drafts a step: engines use 1 to ~10 (vLLM's examples: 2 to 7)


def _probability(v: float) -> float:
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError("expected an acceptance probability from 0 to 1")
    return v


Probability = Annotated[float, number(float), AfterValidator(_probability)]
METHODS = ("off", "draft_model", "eagle", "mtp")


class SpeculativeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: Literal["off", "draft_model", "eagle", "mtp"] = Field(
        "off", description="off | draft_model (a small model of the same vocabulary) | eagle (a "
        "one-layer head on the target's hidden states) | mtp (the target's own multi-token-"
        "prediction layers)")
    num_speculative_tokens: Count = Field(3, le=MAX_DRAFTS, description="k: drafts a step per "
                                          "decoding sequence (vLLM's num_speculative_tokens)")
    acceptance: list[Probability] | None = Field(
        None, description="simulator: probability a draft is accepted given the ones before it "
        "were; one for every position, or one per position")
    acceptance_file: str | None = Field(
        None, description="simulator: measured acceptance lengths (CSV num_speculative_tokens,"
        "emitted,count, as `batchlab run --speculative-out` writes)")
    draft_model: str | None = Field(
        None, description="draft_model: the draft (a model preset or config.json dir); none: "
        "the target's own first draft_layers layers (a self-speculative draft sharing its weights)")
    draft_layers: Count | None = Field(None, le=10_000, description="layers of the draft: eagle 1, "
                                       "mtp the model's MTP layers (1); draft_model without a "
                                       "draft_model: the target's first layers used")

    @field_validator("acceptance", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.method == "off":
            return self
        if self.acceptance is not None and self.acceptance_file is not None:
            raise ValueError("acceptance and acceptance_file: give one")
        if self.acceptance is not None and len(self.acceptance) not in (1, self.num_speculative_tokens):
            raise ValueError(f"acceptance: {len(self.acceptance)} rates for "
                             f"num_speculative_tokens={self.num_speculative_tokens}; give one, or one "
                             f"per position")
        if self.draft_model is not None and self.method != "draft_model":
            raise ValueError(f"draft_model applies to method draft_model, not {self.method}")
        if self.method == "draft_model" and self.draft_model is None and self.draft_layers is None:
            raise ValueError("method draft_model needs draft_model (a model) "
                             "or draft_layers (the target's first layers)")
        if self.draft_model is not None and self.draft_layers is not None:
            raise ValueError("draft_model and draft_layers: give one")
        return self

    @property
    def on(self) -> bool:
        return self.method != "off"
