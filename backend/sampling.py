"""How a next token is drawn: a request's own temperature, top-k, top-p and seed
(batchlab serve), or one temperature for every row (batchlab run's Engine.sample).

Computed so that no finite setting makes a probability non-finite: the logits are
shifted by their maximum before dividing by the temperature (every scaled logit is then
<= 0, the best is exactly 0, so the softmax's sum is >= 1 whatever the temperature), and
a temperature below GREEDY_BELOW samples greedily, as vLLM does (_SAMPLING_EPS)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

GREEDY_BELOW = 1e-5
SEED_RANGE = (-(2 ** 63), 2 ** 64)  # what a torch generator takes (mod 2**64)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0  # (0, 1]: keep the most likely tokens whose mass reaches top_p
    top_k: int = 0  # 0: all tokens
    seed: int | None = None  # None: the server's seeded generator, shared in row order

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW or self.top_k == 1

    def generator(self, device: torch.device) -> torch.Generator | None:
        """A generator of this request's own (None: use the server's)."""
        if self.seed is None:
            return None
        return torch.Generator(device=device).manual_seed(self.seed % 2 ** 64)


def probabilities(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """One row of logits as finite probabilities (float64) under p (not greedy)."""
    x = logits.double()
    if not torch.isfinite(x).all():
        raise ValueError("the model produced non-finite logits")
    x = (x - x.max()) / p.temperature  # <= 0 everywhere, 0 at the best token: never NaN
    if 0 < p.top_k < x.numel():
        kth = torch.topk(x, p.top_k).values[-1]
        x = torch.where(x >= kth, x, torch.full_like(x, -torch.inf))
    probs = torch.softmax(x, dim=-1)
    if p.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of the tokens ranked above
        drop = order[before >= p.top_p]  # the first token always stays (before = 0)
        probs[drop] = 0.0
        probs = probs / probs.sum()
    return probs


def sample_row(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator) -> int:
    if p.greedy:
        return int(logits.argmax())
    return int(torch.multinomial(probabilities(logits, p), 1, generator=generator)[0])


def sample_rows(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """One token per row at one temperature, as probabilities() computes them (every
    row's best logit shifted to 0 before dividing): finite for any finite temperature."""
    if temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1)
    x = logits.double()
    x = (x - x.max(dim=-1, keepdim=True).values) / temperature
    return torch.multinomial(torch.softmax(x, dim=-1), 1, generator=generator).squeeze(1)
