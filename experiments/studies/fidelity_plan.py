"""What the fidelity study serves: four workloads of different shapes, two policies, each
real run repeated, on batchlab-tiny with one torch thread (docs/validation.md)."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import WorkloadConfig

NAME = "fidelity"
MODEL, THREADS, SEATS, KV_MEMORY = "batchlab-tiny", 1, 32, "32MiB"
# Token budgets: whole prompts of up to 2048 tokens in one continuous-batching step,
# chunks of up to 512 with chunked prefill.
POLICIES = {"continuous": {"max_num_batched_tokens": 2048}, "chunked": {"max_num_batched_tokens": 512}}


@dataclass(frozen=True)
class Shape:
    name: str
    what: str
    fields: dict  # WorkloadConfig fields, apart from the size
    options: str  # the same as batchlab validate options


SHAPES = (
    Shape("chat", "open-loop Poisson chat mix (`chat` preset, replies clipped to 256 tokens)",
          {"source": "chat", "max_output_len": 256, "rate": 2.0},
          "--workload chat --max-output-len 256 --rate 2"),
    Shape("code-burst", "Azure 2023 code trace from t = 180 s, lengths / 4: bursty, prefill-heavy",
          {"source": "azure_code", "window_start_s": 180, "length_scale": 4, "rate": 2.5},
          "--workload azure_code --window-start 180 --length-scale 4 --rate 2.5"),
    Shape("long-prompt", "Mooncake trace, lengths / 8, prompts clipped to 2048 tokens: long prompts",
          {"source": "mooncake", "length_scale": 8, "max_prompt_len": 2048, "rate": 1.0},
          "--workload mooncake --length-scale 8 --max-prompt-len 2048 --rate 1"),
    Shape("closed-loop", "closed loop: 8 users on the chat preset, 0.2 s think time",
          {"source": "chat", "max_output_len": 256, "max_concurrency": 8, "think_time_s": 0.2},
          "--workload chat --max-output-len 256 --max-concurrency 8 --think-time 0.2"),
)

# requests per workload, real runs per cell
SIZES = {"full": {"requests": 48, "repeats": 3}, "small": {"requests": 6, "repeats": 2}}
SMALL_LIMITS = {"max_output_len": 12, "max_prompt_len": 128}  # --small: seconds per run


def workload_config(shape: Shape, size: str, sources: dict[str, str] | None = None) -> WorkloadConfig:
    """sources: a file for a shared trace's name (tests use tests/data's excerpts)."""
    fields = dict(shape.fields)
    fields["source"] = (sources or {}).get(fields["source"], fields["source"])
    if size == "small":
        for k, v in SMALL_LIMITS.items():
            fields[k] = min(fields.get(k, v), v)
        if "rate" in fields:
            fields["rate"] *= 4  # a few requests, still arriving apart
    return WorkloadConfig(**fields, num_requests=SIZES[size]["requests"])


def scheduler(policy: str) -> SchedulerConfig:
    return SchedulerConfig(policy=policy, max_num_seqs=SEATS, **POLICIES[policy])
