"""A ready backend: settings resolved (device, dtype, threads), model loaded, forward
pass built, KV pool sized from a memory budget. One Runtime serves several runs (e.g.
one per policy); each run gets a fresh Engine over a (reused) KV pool."""
from __future__ import annotations

import time

import torch

from batchlab.backend.device import (budget_bytes, dtype_name, free_memory_bytes, parse_memory,
                            resolve_device, resolve_dtype, set_threads)
from batchlab.backend.engine import Engine
from batchlab.backend.fast.options import FastPath
from batchlab.backend.kv_cache import PagedKVCache, blocks_in_budget, bytes_per_block
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.models import LoadedModel, load_model
from batchlab.backend.speculative.draft_model import LoadedDraft, load_draft
from batchlab.backend.speculative.setup import speculative_engine
from batchlab.core.run_meta import RunMeta
from batchlab.core.sizes import gib
from batchlab.core.cpu_name import cpu_name
from batchlab.core.speculative.config import SpeculativeConfig

# KV pool budget when none is given. A GPU serves from its own memory: most of what is
# free after the weights. A CPU shares host RAM (and zeroing a pool of a fifth of it cost
# seconds of page faults per run): a fixed size, as vLLM's CPU backend does.
DEFAULT_KV_MEMORY = {"cpu": "1GiB", "cuda": "0.8"}


class Runtime:
    def __init__(self, model: str = "batchlab-tiny", dtype: str = "float32", device: str = "cpu",
                 threads: int | None = 1, kv_memory: str | float | None = None,
                 seed: int = 0, loaded: LoadedModel | None = None, keep_hf: bool = False,
                 matmul: str = "auto", fast: FastPath | None = None) -> None:
        """threads: torch intra-op threads (None keeps torch's default); kv_memory: the KV
        pool budget, a fraction of free memory or a size ('2GiB'; None: DEFAULT_KV_MEMORY
        for the device); seed: weights of an
        embedded preset; matmul: the GEMM kernel (see backend.linear); fast: the fast
        path's parts (backend/fast/options.py; None: the reference path). `loaded` reuses
        a model already loaded; keep_hf keeps the transformers module (the oracle)
        alive, else only the runner's weights stay."""
        # How to build this runtime again, in another process (None: a reused model).
        self.args = None if loaded is not None else {
            "model": model, "dtype": dtype, "device": device, "threads": threads,
            "kv_memory": kv_memory, "seed": seed, "matmul": matmul, "fast": fast}
        self.device = resolve_device(device)
        self.fast = (fast or FastPath()).check(self.device)  # a bad choice fails before loading
        self.dtype = resolve_dtype(dtype)
        self.threads = set_threads(threads)
        self.kv_memory = DEFAULT_KV_MEMORY[self.device.type] if kv_memory is None else kv_memory
        parse_memory(self.kv_memory)  # a bad value fails now, not after loading the model
        t0 = time.perf_counter()
        self.model = loaded or load_model(model, self.dtype, self.device, seed)
        self.runner = ModelRunner(self.model.hf, matmul, self.fast)
        if not keep_hf:
            self.model.hf = None  # frees the unfused q/k/v and gate/up copies
        self.load_s = time.perf_counter() - t0
        # Resolved once, after the weights are in memory: every run gets the same pool.
        self.kv_budget_bytes = budget_bytes(self.kv_memory, self.device)
        self._cache: PagedKVCache | None = None
        self.seed, self.draft = seed, None  # a separate speculative draft (use_draft)
        self._drafts: dict[str, LoadedDraft] = {}
        self._draft_cache: PagedKVCache | None = None

    def use_draft(self, name: str | None) -> None:
        """Serve beside the separate draft model `name` (speculative.draft_model; None: no
        draft of its own), loaded once, its KV in a pool of its own sized like the target's:
        a block of the budget holds both models' KV. ValueError, one line naming the field,
        where it cannot serve beside the model."""
        if name is not None and name not in self._drafts:
            self._drafts[name] = load_draft(name, self.model, self.dtype, self.device, self.seed,
                                            self.runner.matmul)
        self.draft = None if name is None else self._drafts[name]

    def _budget(self) -> int:
        """The KV budget; a fraction of free memory taken after the draft's weights too."""
        kind, num = parse_memory(self.kv_memory)
        if self.draft is None or kind != "fraction":
            return self.kv_budget_bytes
        return max(0, self.kv_budget_bytes - int(num * self.draft.runner.weight_bytes_per_step))

    def block_bytes(self, block_size: int) -> int:
        """KV bytes of one block: the model's, and its draft's where it has one."""
        own = bytes_per_block(self.spec, block_size, self.dtype)
        return own + (bytes_per_block(self.draft.spec, block_size, self.dtype) if self.draft else 0)

    def draft_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        """The draft's pool, block for block beside the model's (reused when unchanged)."""
        c = self._draft_cache
        if c is None or c.num_blocks != num_blocks or c.block_size != block_size \
                or (c.num_layers, c.kv_heads, c.head_dim) != (self.draft.spec.num_layers,
                                                             self.draft.spec.num_kv_heads, self.draft.spec.head_dim):
            self._draft_cache = None
            self._draft_cache = PagedKVCache(self.draft.spec, num_blocks, block_size, self.dtype, self.device)
        return self._draft_cache

    @property
    def spec(self):
        return self.model.spec

    def kv_blocks(self, block_size: int) -> int:
        """Blocks the memory budget holds (what the scheduler's BlockManager gets)."""
        if self.draft is None:
            return blocks_in_budget(self.spec, block_size, self.dtype, self.kv_budget_bytes)
        return self._budget() // self.block_bytes(block_size)

    def pool_blocks(self, num_kv_blocks: int | None, block_size: int) -> int:
        """The KV pool a run gets: num_kv_blocks, else what the budget holds; refused,
        naming the option and the figure, before anything is allocated when it holds no
        block or would not fit in the device's free memory."""
        per_block = self.block_bytes(block_size)
        blocks = num_kv_blocks or self.kv_blocks(block_size)
        what = (f"--num-kv-blocks {num_kv_blocks}" if num_kv_blocks
                else f"--kv-memory {self.kv_memory} ({self._budget():,} bytes)")
        beside = f" with speculative.draft_model {self.draft.name}'s KV" if self.draft else ""
        if blocks < 1:
            raise ValueError(f"{what} holds no KV block: one block of {block_size} tokens of "
                             f"{self.model.name}{beside} in {dtype_name(self.dtype)} takes {per_block:,} "
                             f"bytes; give at least that (or a smaller --block-size)")
        c = self._cache
        if c is None or c.num_blocks != blocks or c.block_size != block_size or self.draft:
            need = blocks * per_block
            held = [x for x in (c, self._draft_cache) if x is not None]
            free = free_memory_bytes(self.device) + sum(x.nbytes for x in held)
            if need > free:
                raise ValueError(f"{what}: a KV pool of {blocks:,} blocks of {block_size} tokens{beside} "
                                 f"would need {gib(need)}; {self.device} has {gib(free)} free")
        return blocks

    def cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        """A pool of exactly num_blocks blocks (reused when the shape is unchanged)."""
        c = self._cache
        if c is None or c.num_blocks != num_blocks or c.block_size != block_size:
            self._cache = None  # free the old pool before allocating the new one
            self._cache = PagedKVCache(self.spec, num_blocks, block_size, self.dtype, self.device)
        return self._cache

    def engine(self, num_blocks: int, block_size: int, temperature: float = 0.0,
               seed: int = 0, speculative: SpeculativeConfig | None = None) -> Engine:
        """speculative: draft and verify as it says (backend/speculative/; its emission
        is the engine's `emission`)."""
        engine = Engine(self.runner, self.cache(num_blocks, block_size), temperature=temperature,
                        seed=seed, prompt_seed=seed)
        if speculative is None:
            return engine
        return speculative_engine(engine, speculative, draft=self.draft_parts(num_blocks, block_size))

    def draft_parts(self, num_blocks: int, block_size: int) -> tuple[ModelRunner, PagedKVCache] | None:
        """The separate draft's runner and pool (None: no draft of its own)."""
        if self.draft is None:
            return None
        return self.draft.runner, self.draft_cache(num_blocks, block_size)

    def meta(self) -> RunMeta:
        """What ran (model, dtype, device, machine), the part of a real run's meta the
        runtime knows."""
        import transformers  # lazy: transformers (seconds to import), loaded with the model by now
        spec = self.spec
        info = {
            "model": self.model.name, "model_source": self.model.source,
            "model_params": spec.params, "weight_bytes_per_step": self.runner.weight_bytes_per_step,
            "kv_bytes_per_token": bytes_per_block(spec, 1, self.dtype),
            "dtype": dtype_name(self.dtype), "device": str(self.device), "threads": self.threads,
            "matmul": self.runner.matmul,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": cpu_name(), "kv_memory": str(self.kv_memory),
            "kv_budget_bytes": self.kv_budget_bytes, "model_load_s": round(self.load_s, 3),
        }
        if self.fast != FastPath():  # the reference path's meta stays as it was
            info["fast_path"] = self.fast.label()
        if self.model.seed is not None:
            info["weights_seed"] = self.model.seed
        if self.device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(self.device)
        return RunMeta(**info)
