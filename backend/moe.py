"""A mixture-of-experts MLP (Mixtral's): a router picks each token's top-k experts, their
softmax weights renormalised over the k, and each expert (a SwiGLU MLP) runs on the
tokens routed to it. The order of operations is transformers' own, so greedy outputs
match its reference implementation token for token."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class MoEWeights:
    router: torch.Tensor  # [experts, hidden]
    gate_up: torch.Tensor  # [experts, 2 * intermediate, hidden]
    down: torch.Tensor  # [experts, hidden, intermediate]
    top_k: int

    @staticmethod
    def of(block: torch.nn.Module, config) -> MoEWeights:
        """From a transformers sparse-MoE block (gate: the router; experts: stacked)."""
        ex = block.experts
        return MoEWeights(block.gate.weight.detach(), ex.gate_up_proj.detach(), ex.down_proj.detach(),
                          int(config.num_experts_per_tok))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.router, self.gate_up, self.down))

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """h [T, hidden] -> the experts' weighted sum [T, hidden]."""
        probs = F.softmax(F.linear(h, self.router).float(), dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in torch.unique(experts).tolist():
            tokens, slot = torch.where(experts == e)
            gate, up = F.linear(h[tokens], self.gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down[e]) * weights[tokens, slot, None]
            out.index_add_(0, tokens, y.to(out.dtype))
        return out
