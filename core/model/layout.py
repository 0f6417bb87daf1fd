"""How one replica of a model is spread over GPUs: tensor parallel (TP) within a stage,
pipeline parallel (PP) across stages, expert parallel (EP) for the routed experts, and
data-parallel attention. `Layout.check(model)` is the one place that says whether a
layout fits a model (a one-line error where it does not divide the heads, experts or
layers); `share(model)` is what one GPU holds of it, which the roofline and the KV
capacity read.

Conventions (vLLM's and SGLang's):
- a replica is tp x pp GPUs; each stage holds ceil(layers / pp) layers at most (engines
  split uneven counts as evenly as they can: the largest stage sets the pace);
- ep > 1 spreads the routed experts whole over the stage's GPUs instead of slicing each
  one over TP: ep equals tp (vLLM's --enable-expert-parallel: EP size = TP x DP);
- dp_attention (SGLang's --enable-dp-attention, vLLM's DP attention for MLA models):
  each of the stage's tp GPUs runs attention for its own share of the sequences with
  whole attention weights, and the experts are shared over all of them. It pays where
  TP would replicate the KV (MLA has one latent KV head)."""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from batchlab.core.model.spec import ModelSpec


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def is_plain_tp(self) -> bool:
        """TP alone, the layout the dense roofline has always priced."""
        return self.pp == 1 and self.ep == 1 and not self.dp_attention

    def describe(self) -> str:
        parts = [f"TP {self.tp}"] + ([f"PP {self.pp}"] if self.pp > 1 else []) + \
                ([f"EP {self.ep}"] if self.ep > 1 else []) + (["DP attention"] if self.dp_attention else [])
        return ", ".join(parts)

    def check(self, model: ModelSpec) -> None:
        """ValueError (one line) where this layout cannot run `model`."""
        tp, heads, kv = self.tp, model.num_heads, model.num_kv_heads
        for name, v in (("tensor_parallel", self.tp), ("pipeline_parallel", self.pp),
                        ("expert_parallel", self.ep)):
            if v < 1:
                raise ValueError(f"{name}={v}: expected a positive integer")
        if not self.dp_attention and (heads % tp or (kv % tp and tp % kv)):
            raise ValueError(f"tensor_parallel={tp} does not split {model.name}'s {heads} attention "
                             f"heads and {kv} KV heads evenly")
        if self.pp > model.num_layers:
            raise ValueError(f"pipeline_parallel={self.pp} exceeds {model.name}'s {model.num_layers} "
                             f"layers: a stage needs at least one")
        if self.ep > 1:
            if not model.is_moe:
                raise ValueError(f"expert_parallel={self.ep}: {model.name} has no experts")
            if self.ep != tp:
                raise ValueError(f"expert_parallel={self.ep} must equal tensor_parallel={tp}: the "
                                 f"experts are spread over a stage's GPUs (or give expert_parallel=1)")
            if model.num_experts % self.ep:
                raise ValueError(f"expert_parallel={self.ep} does not divide {model.name}'s "
                                 f"{model.num_experts} experts")
        if self.dp_attention and tp == 1:
            raise ValueError("data_parallel_attention needs tensor_parallel > 1 (the GPUs it "
                             "spreads the sequences over)")

    def share(self, model: ModelSpec) -> GpuShare:
        self.check(model)
        return GpuShare.of(model, self)


@dataclass(frozen=True)
class GpuShare:
    """What one GPU of the busiest stage holds and reads of the model: fractions of each
    kind of weight, of the KV cache and of the attention work."""
    stage: float  # share of the layers on this GPU's stage (the largest stage)
    dense_weights: float  # of attention (unless DP attention), dense MLPs, shared experts, head
    attention_weights: float  # of the attention projections
    expert_slice: float  # of each routed expert this GPU holds (1/tp sliced; 1 when whole)
    experts_here: float  # routed experts per MoE layer on this GPU (all of them when sliced)
    kv_per_token: float  # of a token's KV of one layer, on each GPU that holds the token
    kv_read: float  # of the step's KV bytes this GPU reads
    attention_flops: float  # of the step's attention FLOPs this GPU computes
    kv_replicas: int  # GPUs holding each token's KV within a stage (TP over few KV heads)
    sequence_groups: int  # GPUs whose KV hold different sequences (DP attention: tp)

    @staticmethod
    def of(model: ModelSpec, layout: Layout) -> GpuShare:
        tp = layout.tp
        stage = ceil(model.num_layers / layout.pp) / model.num_layers
        if layout.dp_attention:
            # Whole attention per GPU, its own sequences: KV and attention work split by tp.
            attention, kv, read, replicas, groups = 1.0, 1.0, 1 / tp, 1, tp
        else:
            # MLA has one latent KV head: every TP GPU keeps all of it (vLLM does).
            kv_heads = 1 if model.is_mla else model.num_kv_heads
            shards = min(tp, kv_heads)
            attention, kv, read, replicas, groups = 1 / tp, 1 / shards, 1 / shards, tp // shards, 1
        if layout.ep > 1:
            expert_slice, here = 1.0, model.num_experts / layout.ep
        else:
            expert_slice, here = 1 / tp, float(model.num_experts)
        return GpuShare(stage=stage, dense_weights=1 / tp, attention_weights=attention,
                        expert_slice=expert_slice, experts_here=here, kv_per_token=kv, kv_read=read,
                        attention_flops=1 / tp, kv_replicas=replicas, sequence_groups=groups)


def kv_shards(model: ModelSpec, tensor_parallel: int) -> int:
    """Over how many GPUs the KV heads are split: tp, or the KV head count when tp
    exceeds it (each GPU then holds a replica of one KV head, as vLLM does). A tp that
    splits a head is an error."""
    tp, heads, kv = tensor_parallel, model.num_heads, model.num_kv_heads
    if heads % tp or (kv % tp and tp % kv):
        raise ValueError(f"tensor_parallel={tp} does not split {model.name}'s {heads} attention "
                         f"heads and {kv} KV heads evenly")
    return min(tp, kv)
