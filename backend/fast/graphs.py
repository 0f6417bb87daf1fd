"""CUDA graphs of decode steps: one graph per captured batch size (vLLM's default sizes,
backend/fast/sizes.py), a step of n sequences replaying the graph of the next size up,
as serving engines do. The paged KV cache and the scheduler are unchanged: a graph reads
its inputs from static buffers that each step refills (token ids, positions, cache
slots, the decode block mask's tensors), then replays every kernel of the forward pass
with one launch.

Padding: the extra rows repeat the step's first row (its token, position and cache
slot: they write the same K/V to the same slot, which leaves the cache as the step
alone would) and read no KV block; their logits are dropped.
A graph is captured the first time its size runs, from that step's real inputs (a
capture records, it does not compute; the warm-up run before it writes what the step
writes anyway). Mixture-of-experts layers route on the host (backend/moe.py), which a
graph cannot hold: their steps run eagerly.
Needs CUDA; on another device the runtime refuses --cuda-graphs with one line
(backend/fast/options.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from batchlab.backend.attention import AttentionMetadata
from batchlab.backend.fast.paged_flex import DecodeMask, PagedDecode
from batchlab.backend.fast.sizes import padded_size, vllm_capture_sizes

DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs: sizes up to 512


@dataclass
class _Graph:
    graph: object  # torch.cuda.CUDAGraph
    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    masks: dict  # window -> DecodeMask
    logits: torch.Tensor


class DecodeGraphs:
    def __init__(self, runner, cache, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> None:
        if runner.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; this backend runs on {runner.device}")
        self.runner, self.cache = runner, cache
        self.sizes = vllm_capture_sizes(max_num_seqs)
        self.windows = sorted({lw.window for lw in runner.layers}, key=lambda w: w or 0)
        self.graphs: dict[int, _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()
        # positions never pass the pool's capacity: the rope tables a graph reads are final
        runner.ensure_rope(cache.num_blocks * cache.block_size)

    def padded(self, rows: int) -> int | None:
        return padded_size(rows, self.sizes)

    def runs(self, meta) -> bool:
        pd = meta.paged_decode
        return pd is not None and not meta.prefills and pd.padded in self.sizes

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta,
            sample_rows: torch.Tensor) -> torch.Tensor:
        """Logits of sample_rows for a decode-only step whose metadata was padded to a
        captured size."""
        pd: PagedDecode = meta.paged_decode
        P, n = pd.padded, pd.rows
        g = self.graphs.get(P)
        fresh = g is None
        if fresh:
            g = self._buffers(P)
        self._fill(g, input_ids, positions, meta.slots, pd, n)
        if fresh:
            self._capture(g, P)
            self.graphs[P] = g
        g.graph.replay()
        return g.logits[sample_rows]

    # -- internals --------------------------------------------------------------
    def _buffers(self, P: int) -> _Graph:
        dev, nb = self.runner.device, self.cache.num_blocks
        empty = PagedDecode(np.ones(P, np.int64), [[0]] * 0, P, self.cache.block_size, nb, dev)
        masks = {w: DecodeMask.of(empty.arrays(w), dev) for w in self.windows}
        zeros = lambda: torch.zeros(P, dtype=torch.int64, device=dev)  # noqa: E731
        return _Graph(None, zeros(), zeros(), zeros(), masks, None)

    def _fill(self, g: _Graph, ids, pos, slots, pd: PagedDecode, n: int) -> None:
        for buf, src in ((g.ids, ids), (g.positions, pos), (g.slots, slots)):
            buf[:n].copy_(src[:n])
            buf[n:].copy_(src[:1].expand(buf.shape[0] - n))
        for w, mask in g.masks.items():
            mask.fill(pd.arrays(w))

    def _static_meta(self, g: _Graph, P: int):
        bs, nb, dev = self.cache.block_size, self.cache.num_blocks, self.runner.device
        # rows == P: the graph computes every padded row; the masks read g's tensors
        plan = PagedDecode(np.ones(P, np.int64), [[0]] * P, P, bs, nb, dev,
                           masks={w: m.block_mask(bs, nb) for w, m in g.masks.items()})
        return AttentionMetadata(g.slots, [], [], P, plan, "paged")

    def _capture(self, g: _Graph, P: int) -> None:
        runner, dev = self.runner, self.runner.device
        meta = self._static_meta(g, P)
        rows = torch.arange(P, device=dev)
        top = self.cache.num_blocks * self.cache.block_size - 1
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):  # warm-up: compiles, and writes what the step writes
            runner.forward_eager(g.ids, g.positions, meta, self.cache, rows, top)
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            g.logits = runner.forward_eager(g.ids, g.positions, meta, self.cache, rows, top)
        g.graph = graph
