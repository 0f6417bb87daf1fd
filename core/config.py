"""Scheduler settings, shared by the simulator and the backend (pydantic: a TOML
[scheduler] table validates into this, with one-line errors naming the field)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from batchlab.core.checks import BlockSize, Count, Seconds, Tokens


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = Field("continuous", description="static | continuous | chunked (or any registered, "
                        "an installed plug-in's name, or module:Class: core/plugins.py)")
    max_num_seqs: Count = Field(256, description="seats: sequences in one step at most")
    max_num_batched_tokens: Tokens | None = Field(
        None, description="tokens per step; default 8192 (continuous), 2048 (chunked)")
    block_size: BlockSize = Field(16, description="KV block size in tokens")
    num_kv_blocks: Count | None = Field(
        None, description="KV pool size in blocks; default: derived from the hardware")
    admission: str = Field("fcfs", description="admission order: fcfs | priority | shortest_prompt | "
                           "... (any registered in core/orders, a plug-in's name or module:function; "
                           "see --list-policies)")
    preemption: str = Field("recent", description="victim order: recent (last admitted) | priority | ...")
    max_batch_delay_s: Seconds = Field(
        0.0, description="static: wait up to this long for a full batch")
    prefix_caching: bool | None = Field(
        None, description="reuse the KV blocks of cached prompt prefixes (vLLM v1 "
        "semantics, core/prefix_cache.py); None: the policy's default (on for continuous "
        "and chunked, off for static)")
    max_model_len: Tokens | None = Field(
        None, description="longest prompt + output a request may ask for, as vLLM's "
        "max_model_len (longer ones are rejected); None: no limit (the commands default it "
        "to the model's context length)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="the policy's own parameters ([scheduler.params]; "
        "each policy declares them, see --list-policies)")
    kv_allocation: Literal["paged", "reserved"] = Field(
        "paged", description="paged: blocks as tokens arrive, preempt when out; reserved: "
        "admit only if prompt + whole output budget fits, never preempt")
