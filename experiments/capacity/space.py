"""The deployment space `capacity deploy` searches: every model x GPU x TP degree x
PP degree x EP (for MoE models) x weights dtype x seats x token budget (x router,
speculation, KV tier where asked), each one a configuration whose fewest replicas the search finds. A deployment that
cannot run (a layout that does not divide the heads, layers or experts, fp8 on a GPU
without fp8, a model that leaves no KV memory) is listed with why, not searched."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from batchlab.core.model.layout import Layout
from batchlab.core.model.presets import lookup_hardware, lookup_model
from batchlab.experiments.capacity.tier_options import tier_config, tier_label
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError


# The --dtype-options value that serves a quantised checkpoint as published: fp8 (every
# linear weight one byte), mxfp4 (the experts in 4 bits, the rest in bf16).
CHECKPOINT_DTYPE = {"fp8": "fp8", "mxfp4": "bf16"}


class Deployment(NamedTuple):
    model: str
    hardware: str
    tp: int
    dtype: str  # weights (the KV cache follows: kv_cache_dtype "auto")
    seats: int  # max_num_seqs
    budget: int  # max_num_batched_tokens
    pp: int = 1  # pipeline stages (issue 30)
    ep: int = 1  # expert parallel degree (issue 30)
    router: str = ""  # the load balancer in front of the replicas ('': the config's)
    speculative: str = ""  # 'off', or 'METHOD:K' drafts a step ('': the config's [speculative])
    kv_tier: str = ""  # 'off', or 'cpu:GIB' per GPU (tier_options.py; '': the config's [kv_tier])

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    def label(self) -> str:
        par = f"TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "") + (f" EP{self.ep}" if self.ep > 1 else "")
        dtype = self.dtype
        if self.dtype == CHECKPOINT_DTYPE["mxfp4"] and _quantization(self.model) == "mxfp4":
            dtype = "mxfp4"  # its experts' (the bulk of its weights); attention stays bf16
        routed = f" {self.router}" if self.router else ""
        drafts = f" spec {self.speculative.replace(':', ' k=')}" if self.speculative else ""
        return (f"{self.model} {par} {self.hardware} {dtype} {self.seats} seats {self.budget} "
                f"tokens{routed}{drafts}{tier_label(self.kv_tier)}")


@dataclass(frozen=True)
class DeploySpace:
    models: list[str]
    gpus: list[str]
    tp: list[int]
    dtypes: list[str]
    seats: list[int]
    budgets: list[int]
    pp: list[int] = field(default_factory=lambda: [1])  # pipeline stages
    ep: list[str] = field(default_factory=lambda: ["off"])  # "off" | "on": experts over the TP GPUs
    routers: list[str] = field(default_factory=lambda: [""])  # '': the config's router
    speculative: list[str] = field(default_factory=lambda: [""])  # off | METHOD:K ('': the config's)
    kv_tiers: list[str] = field(default_factory=lambda: [""])  # off | cpu:GIB ('': the config's)

    def size(self) -> int:
        return len(deployments(self))

    def describe(self) -> str:
        dims = [("model", self.models), ("GPU", self.gpus), ("TP", self.tp), ("PP", self.pp),
                ("EP", self.ep), ("dtype", self.dtypes), ("seats", self.seats), ("token budget", self.budgets),
                ("router", self.routers), ("speculation", self.speculative), ("KV tier", self.kv_tiers)]
        hidden = {"PP": [1], "EP": ["off"], "router": [""], "speculation": [""], "KV tier": [""]}  # left at their one default
        shown = [(n, v) for n, v in dims if hidden.get(n) != v]
        note = " (EP on: MoE models at TP > 1)" if "on" in self.ep else ""
        return (" x ".join(f"{len(v)} {n}{'s' if len(v) > 1 and not n.endswith('s') else ''} "
                           f"({', '.join(map(str, v))})" for n, v in shown)
                + f"{note} = {self.size()} deployments")


def _quantization(model: str) -> str:
    try:
        return lookup_model(model).quantization
    except ValueError:
        return ""


def layouts(model: str, tp: int, pp: list[int], ep: list[str]) -> list[tuple[int, int]]:
    """(pp, ep) layouts to try with this model at this TP degree: every PP degree asked
    for; EP off, and on (the experts spread over the TP GPUs: ep = tp, core/model/layout.py) for a
    mixture of experts at TP > 1 where asked. Whether a layout fits the model is why_not's."""
    moe = lookup_model(model).is_moe
    eps = ([1] if "off" in ep else []) + ([tp] if "on" in ep and moe and tp > 1 else [])
    return [(p, e) for p in pp for e in eps]


def deployments(space: DeploySpace) -> list[Deployment]:
    return [Deployment(m, g, tp, d, s, b, pp, ep, r, k, t)
            for m in space.models for g in space.gpus for tp in space.tp
            for pp, ep in layouts(m, tp, space.pp, space.ep)
            for d in space.dtypes for s in space.seats for b in space.budgets for r in space.routers
            for k in space.speculative for t in space.kv_tiers]


def why_not(dep: Deployment) -> str:
    """Why this deployment cannot run, before any simulation ('' where it may)."""
    try:
        model, hw = lookup_model(dep.model), lookup_hardware(dep.hardware)
    except ValueError as e:
        raise UserError(str(e)) from None
    if model.num_heads % dep.tp:
        return f"TP {dep.tp} does not divide {model.num_heads} attention heads"
    try:
        Layout(dep.tp, dep.pp, dep.ep).check(model)
    except ValueError as e:
        return str(e)
    if dep.dtype == "fp8" and not hw.peak_flops_fp8:
        return f"{dep.hardware} has no fp8 tensor cores"
    # A quantised checkpoint is served in its own quantisation (vLLM reads it from the
    # config): fp8 weights (DeepSeek-V3/R1) as fp8; mxfp4 experts (gpt-oss) beside bf16.
    native = CHECKPOINT_DTYPE.get(model.quantization)
    if native is not None and dep.dtype != native:
        return (f"{dep.model} is an {model.quantization} checkpoint: vLLM serves it as such "
                f"(--dtype-options {native}), {dep.dtype} needs another checkpoint")
    return ""


def configure(cfg: ExperimentConfig, dep: Deployment) -> ExperimentConfig:
    """cfg serving this deployment (one replica; the search sets the count)."""
    c = cfg.model_copy(deep=True)
    c.model.name, c.hardware.name, c.hardware.tensor_parallel = dep.model, dep.hardware, dep.tp
    c.hardware.pipeline_parallel, c.hardware.expert_parallel = dep.pp, dep.ep
    c.model = c.model.model_copy(update={"dtype": dep.dtype})  # marked as given: no preset default
    c.scheduler = c.scheduler.model_copy(update={"max_num_seqs": dep.seats, "max_num_batched_tokens": dep.budget})
    c.run.replicas = 1
    if dep.router:
        c.run.router = dep.router
    if dep.speculative == "off":
        c.speculative.method = "off"
    elif dep.speculative:
        method, k = dep.speculative.split(":")
        c.speculative.method, c.speculative.num_speculative_tokens = method, int(k)
    if dep.kv_tier:
        c.kv_tier = tier_config(dep.kv_tier, cfg.kv_tier)
    return c


def parse_list(text: str, option: str, kind: type = str) -> list:
    """'a,b,c' -> [a, b, c] of kind; a one-line error naming the option."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UserError(f"{option}: expected a comma-separated list, got {text!r}")
    if kind is int:
        bad = [x for x in items if not x.isdigit() or int(x) < 1]
        if bad:
            raise UserError(f"{option}: expected positive whole numbers, got {bad[0]!r}")
        return sorted({int(x) for x in items})
    return list(dict.fromkeys(items))
