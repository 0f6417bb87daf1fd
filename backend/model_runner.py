"""The Llama-family forward pass (Llama, Mistral, Qwen2, Mixtral): RMSNorm, rotary
embeddings, grouped-query attention over the paged cache (full or sliding-window, per
layer), SwiGLU MLP or a mixture of SwiGLU experts (backend/moe.py). It takes its weights
from a transformers model and runs one step of many sequences as one flat
[tokens, hidden] batch, without padding.

q/k/v and gate/up projections are fused into one matmul each (fewer, larger GEMMs:
on CPU a thin model is dominated by per-call overhead), residual adds ride on the GEMM,
matmuls use backend.linear's kernel choice (prepacked oneDNN on CPU float32), and the
LM head runs only on the rows that sample a token.

The fast path (backend/fast/, chosen by FastPath) swaps in attention that reads the pool
in place, fused elementwise kernels, and CUDA graphs for decode steps; the defaults are
the reference path."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from batchlab.backend.attention import AttentionMetadata, build_metadata, inplace_attention, paged_attention
from batchlab.backend.fast.fused import FusedOps
from batchlab.backend.fast.graphs import DecodeGraphs
from batchlab.backend.fast.one_row import OneRowDecode, OneRowMeta
from batchlab.backend.fast.one_row_step import keeps_dense
from batchlab.backend.fast.options import FastPath
from batchlab.backend.fast.paged_flex import INPLACE_MIN_GATHER_BYTES_CPU
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.linear import Linear, resolve_matmul
from batchlab.backend.moe import MoEWeights


@dataclass
class LayerWeights:
    ln1: torch.Tensor
    qkv: Linear  # fused q, k, v: [(heads + 2 kv_heads) * dim] outputs
    o: Linear
    ln2: torch.Tensor
    gate_up: Linear | None  # fused gate, up: [2 * intermediate] outputs (None: experts)
    down: Linear | None
    window: int | None  # sliding-window size of this layer, None = full attention
    moe: MoEWeights | None = None  # a mixture-of-experts layer's router and experts


def _bias(*linears) -> torch.Tensor | None:
    if all(lin.bias is None for lin in linears):
        return None
    w = linears[0].weight
    return torch.cat([lin.bias if lin.bias is not None
                      else torch.zeros(lin.out_features, dtype=w.dtype, device=w.device)
                      for lin in linears])


def _windows(config) -> list[int | None]:
    n, w = config.num_hidden_layers, getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types:  # Qwen2 (and newer configs): per-layer attention type
        return [w if t == "sliding_attention" else None for t in types]
    if config.model_type in ("mistral", "mixtral"):
        return [w] * n
    return [None] * n


class ModelRunner:
    """Holds the weights (shared with the transformers model, except the fused
    matrices) and runs the forward pass of one step."""

    def __init__(self, hf: torch.nn.Module, matmul: str = "auto", fast: FastPath | None = None) -> None:
        """matmul: 'auto' (oneDNN on CPU float32, else torch), 'onednn' or 'torch';
        fast: the fast path's parts (None: the reference path)."""
        cfg = hf.config
        base = hf.model
        self.config = cfg
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.vocab_size = cfg.vocab_size
        self.dtype = base.embed_tokens.weight.dtype
        self.device = base.embed_tokens.weight.device
        self.matmul = resolve_matmul(matmul, self.device, self.dtype)
        self.fast = (fast or FastPath()).check(self.device)
        # the one-row decode's C step reads dense weights beside oneDNN's packed ones
        dense = keeps_dense(self.fast.one_row, self.device, self.dtype, hf)
        self.embed = base.embed_tokens.weight.detach()
        self.norm = base.norm.weight.detach()
        self.lm_head = Linear(hf.lm_head.weight, None, self.matmul, dense)
        self.layers: list[LayerWeights] = []
        with torch.no_grad():
            for layer, window in zip(base.layers, _windows(cfg)):
                at, mlp = layer.self_attn, layer.mlp
                moe = MoEWeights.of(mlp, cfg) if hasattr(mlp, "experts") else None
                self.layers.append(LayerWeights(
                    ln1=layer.input_layernorm.weight.detach(),
                    qkv=Linear(torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight]),
                               _bias(at.q_proj, at.k_proj, at.v_proj), self.matmul, dense),
                    o=Linear(at.o_proj.weight, at.o_proj.bias, self.matmul, dense),
                    ln2=layer.post_attention_layernorm.weight.detach(),
                    gate_up=None if moe else Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                                                    _bias(mlp.gate_proj, mlp.up_proj), self.matmul, dense),
                    down=None if moe else Linear(mlp.down_proj.weight, mlp.down_proj.bias, self.matmul, dense),
                    window=window, moe=moe))
        # The sliding window the step features count (the largest; 0: none).
        self.window = max((lw.window or 0 for lw in self.layers), default=0)
        rot = base.rotary_emb
        self._inv_freq = rot.inv_freq.detach().to(device=self.device, dtype=torch.float32)
        self._rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self._cos = self._sin = torch.empty(0, self.head_dim, device=self.device, dtype=self.dtype)
        self.fused = FusedOps(self.device) if self.fast.fuse else None
        self.has_moe = any(lw.moe is not None for lw in self.layers)
        self._graphs: DecodeGraphs | None = None
        self._one_row = OneRowDecode(self) if self.fast.one_row else None
        # decode rows read the pool in place from this many gathered bytes a layer, later
        # prefill chunks only on a GPU (paged_flex.py)
        on_cpu = self.device.type == "cpu"
        self.inplace_min_bytes = INPLACE_MIN_GATHER_BYTES_CPU if on_cpu else 0
        self.inplace_prefill = not on_cpu
        self._kv_token_bytes = 2 * self.num_kv_heads * self.head_dim * self.embed.element_size()

    def graphs_for(self, cache: PagedKVCache) -> DecodeGraphs | None:
        """The decode graphs over this pool (None: graphs off, or a model they cannot hold)."""
        if not self.fast.cuda_graphs or self.has_moe:
            return None
        if self._graphs is None or self._graphs.cache is not cache:
            self._graphs = DecodeGraphs(self, cache)
        return self._graphs

    def metadata(self, decodes: list[tuple[int, list[int]]], prefills: list[tuple[int, int, list[int]]],
                 cache: PagedKVCache) -> AttentionMetadata | OneRowMeta:
        """build_metadata in this runner's layout; a decode-only step is padded to a
        captured graph size when graphs are on; one decode row alone, under one_row,
        gets the one-row forward's plan."""
        if self._one_row is not None and len(decodes) == 1 and not prefills:
            return self._one_row.plan(decodes[0][0], decodes[0][1], cache)
        rows, layout = None, self.fast.attention
        if layout == "paged" and self.inplace_min_bytes > 0:
            kv_bytes = (sum(p for p, _ in decodes) + len(decodes)) * self._kv_token_bytes
            wide = self.inplace_prefill and any(s > 0 for s, _, _ in prefills)
            layout = "paged" if kv_bytes >= self.inplace_min_bytes or wide else "gather"
        graphs = self.graphs_for(cache) if decodes and not prefills and layout == "paged" else None
        if graphs is not None:
            rows = graphs.padded(len(decodes))
        return build_metadata(decodes, prefills, cache, layout, rows, self.inplace_prefill)

    @property
    def weight_bytes_per_step(self) -> int:
        """Weight bytes one forward pass streams (all layers, final norm, LM head)."""
        total = self.lm_head.nbytes + self.norm.numel() * self.norm.element_size()
        for lw in self.layers:
            mlp = lw.moe.nbytes if lw.moe else lw.gate_up.nbytes + lw.down.nbytes  # all experts
            total += lw.qkv.nbytes + lw.o.nbytes + mlp
            total += (lw.ln1.numel() + lw.ln2.numel()) * lw.ln1.element_size()
        return total

    def ensure_rope(self, max_pos: int) -> None:
        if max_pos >= self._cos.shape[0]:
            self._rope_tables(max_pos)

    def _rope_tables(self, max_pos: int) -> None:
        """cos/sin per position, as transformers computes them (fp32, then cast); the sin
        table carries rotate_half's sign so rope is x*cos + roll(x)*sin."""
        n = max(max_pos + 1, 2 * self._cos.shape[0], 4096)
        freqs = torch.arange(n, device=self.device, dtype=torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self._cos = (emb.cos() * self._rope_scale).to(self.dtype)
        sin = (emb.sin() * self._rope_scale).to(self.dtype)
        half = self.head_dim // 2
        sin[:, :half] = -sin[:, :half]
        self._sin = sin

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # rotate_half(x) = cat(-x2, x1) = roll(x, half) with the sign folded into sin
        return torch.addcmul(x * cos, x.roll(self.head_dim // 2, dims=-1), sin)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                cache: PagedKVCache, sample_rows: torch.Tensor, max_pos: int) -> torch.Tensor:
        """input_ids, positions: [T]; returns logits [len(sample_rows), vocab] (float32).
        A decode-only step padded to a captured size replays its CUDA graph; a one-row
        plan runs the one-row forward."""
        if isinstance(meta, OneRowMeta):
            if sample_rows.numel() == 0:
                return torch.empty(0, self.vocab_size, dtype=torch.float32, device=self.device)
            return self._one_row.forward(input_ids, meta, cache)
        graphs = self._graphs if self.fast.cuda_graphs else None
        if graphs is not None and graphs.cache is cache and graphs.runs(meta):
            return graphs.run(input_ids, positions, meta, sample_rows)
        return self.forward_eager(input_ids, positions, meta, cache, sample_rows, max_pos)

    @torch.inference_mode()
    def forward_eager(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                      cache: PagedKVCache, sample_rows: torch.Tensor, max_pos: int) -> torch.Tensor:
        """The forward pass, kernel by kernel (what a graph captures)."""
        self.ensure_rope(max_pos)
        T = input_ids.shape[0]
        fz = self.fused if self.fused is not None and self.fused.use(T) else None
        attend = inplace_attention if meta.layout == "paged" else paged_attention
        nh, kvh, d, hid = self.num_heads, self.num_kv_heads, self.head_dim, (self.hidden,)
        cos = self._cos[positions][:, None, :]
        sin = self._sin[positions][:, None, :]
        x = F.embedding(input_ids, self.embed)
        for i, lw in enumerate(self.layers):
            h = fz.rms_norm(x, lw.ln1, self.eps) if fz else F.rms_norm(x, hid, lw.ln1, self.eps)
            qkv = lw.qkv(h).view(T, nh + 2 * kvh, d)
            qk = (fz.rope if fz else self._rope)(qkv[:, :nh + kvh], cos, sin)
            attn = attend(i, qk[:, :nh], qk[:, nh:], qkv[:, nh + kvh:], meta, cache, lw.window)
            x = lw.o(attn, residual=x)
            h = fz.rms_norm(x, lw.ln2, self.eps) if fz else F.rms_norm(x, hid, lw.ln2, self.eps)
            if lw.moe is not None:
                x = x + lw.moe(h)
                continue
            if fz:
                x = lw.down(fz.silu_mul(lw.gate_up(h)), residual=x)
                continue
            gate, up = lw.gate_up(h).chunk(2, dim=-1)
            x = lw.down(F.silu(gate).mul_(up), residual=x)
        if sample_rows.numel() == 0:
            return x.new_empty(0, self.vocab_size, dtype=torch.float32)
        x = x[sample_rows]
        x = fz.rms_norm(x, self.norm, self.eps) if fz else F.rms_norm(x, hid, self.norm, self.eps)
        return self.lm_head(x).float()
