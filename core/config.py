"""Scheduler settings, shared by the simulator and the backend (pydantic: a TOML
[scheduler] table validates into this, with one-line errors naming the field)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = Field("continuous", description="static | continuous | chunked (or any registered)")
    max_num_seqs: int = Field(256, gt=0, description="seats: sequences in one step at most")
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="tokens per step; default 8192 (continuous), 2048 (chunked)")
    block_size: int = Field(16, gt=0, description="KV block size in tokens")
    num_kv_blocks: int | None = Field(
        None, gt=0, description="KV pool size in blocks; default: derived from the hardware")
    admission: str = Field("fcfs", description="fcfs | priority | shortest_prompt")
    preemption: str = Field("recent", description="victim: recent (last admitted) | priority")
    max_batch_delay_s: float = Field(
        0.0, ge=0, description="static: wait up to this long for a full batch")
    prefix_caching: bool | None = Field(
        None, description="reuse the KV blocks of cached prompt prefixes (vLLM v1 "
        "semantics, core/prefix_cache.py); None: the policy's default (on for continuous "
        "and chunked, off for static)")
    max_model_len: int | None = Field(
        None, gt=0, description="longest prompt + output a request may ask for, as vLLM's "
        "max_model_len (longer ones are rejected); None: no limit (the commands default it "
        "to the model's context length)")
