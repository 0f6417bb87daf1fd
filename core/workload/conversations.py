"""Prompts that share prefixes: a system prompt shared by every request, and multi-turn
chat, with prefix hashes that say exactly which blocks two prompts share.

Multi-turn chat: conversations start at the arrival process's times; conversation c has
a number of turns drawn from a geometric distribution of mean `turns`; turn k's prompt
is the system prompt, then every earlier message and reply, then the new message (its
length drawn from the prompt spec); its reply length from the output spec. Turn k + 1
is sent a think time (exponential, mean `turn_gap_s`) after turn k was: open loop, so
under overload a turn may arrive before the previous reply.

Hashes: one per HASH_BLOCK tokens of prompt. A block wholly inside the system prompt has
the same hash in every request; any other full block, a hash of its conversation and
position (the conversation's text is the same in every turn that holds it); a prompt's
partial last block, a hash of its own. Only prompt blocks are cached by the engines
here (core/prefix_cache.py), so turn k + 1 reuses turn k's prompt; the reply and the new
message are computed (vLLM would also reuse the reply's blocks)."""
from __future__ import annotations

import numpy as np

from batchlab.core.workload.workload import Workload

HASH_BLOCK = 16  # tokens per hash: the engines' default KV block
_CONV = 1 << 40  # hash ranges: system blocks < _CONV <= conversation blocks
_PARTIAL = 1 << 39  # within a conversation's range: partial last blocks


def prompt_hashes(length: int, system: int, conv: int, turn: int) -> tuple[int, ...]:
    """Hashes of a prompt of `length` tokens: `system` tokens of shared system prompt,
    then conversation `conv`'s text (the same in all its turns)."""
    full, out = length // HASH_BLOCK, []
    for j in range(full):
        out.append(j if (j + 1) * HASH_BLOCK <= system else (conv + 1) * _CONV + j)
    if length % HASH_BLOCK:
        out.append((conv + 1) * _CONV + _PARTIAL + turn)
    return tuple(out)


def with_system_prompt(w: Workload, system: int) -> Workload:
    """Every prompt starts with the same `system` tokens (request i is conversation i)."""
    prompt = w.prompt_len + system
    hashes = [prompt_hashes(int(p), system, i, 0) for i, p in enumerate(prompt.tolist())]
    return w.replace(f"shared system prompt: {system} tokens before every prompt",
                     prompt_len=prompt, prefix_hashes=hashes, hash_block_size=HASH_BLOCK)


def multi_turn(starts: np.ndarray, messages: np.ndarray, replies: np.ndarray, turns: float,
               gap_s: float, system: int, rng: np.random.Generator) -> Workload:
    """n turns in all (n = len(messages)), conversations starting at `starts` (as many
    as it takes), sorted by arrival."""
    n = len(messages)
    counts = rng.geometric(1.0 / turns, size=n)  # turns per conversation, mean `turns`
    conv_of = np.repeat(np.arange(n), counts)[:n]
    turn_of = np.arange(n) - np.searchsorted(conv_of, conv_of)  # index within its conversation
    gaps = rng.exponential(gap_s, size=n) if gap_s > 0 else np.zeros(n)
    gaps[turn_of == 0] = 0.0
    arrival = starts[conv_of] + _cumsum_within(gaps, turn_of)
    history = _cumsum_within(messages + replies, turn_of) - (messages + replies)  # before turn k
    prompt = system + history + messages
    hashes = [prompt_hashes(int(p), system, int(c), int(k))
              for p, c, k in zip(prompt.tolist(), conv_of.tolist(), turn_of.tolist())]
    order = np.argsort(arrival, kind="stable")
    return Workload(arrival[order], prompt[order], replies[order],
                    prefix_hashes=[hashes[i] for i in order], hash_block_size=HASH_BLOCK)


def _cumsum_within(x: np.ndarray, turn_of: np.ndarray) -> np.ndarray:
    """Running sums of x restarting where turn_of is 0 (each conversation's first turn)."""
    total = np.cumsum(x)
    first = np.flatnonzero(turn_of == 0)
    base = np.repeat(total[first] - x[first], np.diff(np.append(first, len(x))))
    return total - base
