"""What claim 2's study serves, shared by the simulated run (static_vs_continuous.py) and
the real-backend one (static_vs_continuous_backend.py): the workload with one long reply in
every group of seats, and the utilisation static batching should reach on it."""
from __future__ import annotations

import numpy as np

from batchlab.core.workload import Workload

NAME = "static-vs-continuous"
POLICIES = ("static", "continuous", "chunked")
SHORT, LONG, PROMPT = (12, 40), (480, 520), (64, 192)
MODEL, HARDWARE, SEED = "llama-3-8b", "a100-80gb", 0


def one_long_per_group(n: int, seats: int, users: int, seed: int = SEED,
                       long: tuple[int, int] = LONG, prompt_len: tuple[int, int] = PROMPT) -> Workload:
    """n requests; in every consecutive group of `seats`, exactly one long reply at a
    random place, the others short. Closed loop: `users` requests in flight."""
    rng = np.random.default_rng(seed)
    out = rng.integers(SHORT[0], SHORT[1] + 1, n)
    groups = n // seats
    where = seats * np.arange(groups) + rng.integers(0, seats, groups)
    out[where] = rng.integers(long[0], long[1] + 1, groups)
    prompt = rng.integers(prompt_len[0], prompt_len[1] + 1, n)
    desc = [f"{n} requests, replies {SHORT[0]}-{SHORT[1]} tokens except one of "
            f"{long[0]}-{long[1]} in every {seats}, prompts {prompt_len[0]}-{prompt_len[1]} "
            f"tokens, seed {seed}",
            f"closed loop: {users} users, each sends its next request when its reply ends"]
    return Workload(np.zeros(n), prompt, out, max_concurrency=users, description=desc)


def static_expectation(out_len: np.ndarray, seats: int) -> float:
    """Static's step-averaged utilisation if batches are consecutive groups of `seats`:
    a batch runs max(L) steps and its members fill sum(L) seat-steps."""
    g = out_len[: len(out_len) // seats * seats].reshape(-1, seats)
    return float(g.sum() / (seats * g.max(axis=1).sum()))
