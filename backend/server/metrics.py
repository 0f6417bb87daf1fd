"""/metrics in Prometheus text format, with vLLM's metric names and `model_name` label,
so that dashboards and scrapers made for vLLM read batchlab serve unchanged.

Updated from the engine thread (prometheus-client is thread-safe); the times are the
same step-end stamps as the request table's."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401  (re-exported for app.py)

from batchlab.core.request import Sequence, Status

# vLLM's buckets (vllm/v1/metrics/loggers.py), in seconds.
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
         7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0)
_LONG = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
         120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class ServerMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = r = CollectorRegistry()
        lab = ["model_name"]

        def make(kind, name, doc, **kw):
            return kind(name, doc, lab, registry=r, **kw).labels(model_name)

        self.running = make(Gauge, "vllm:num_requests_running", "Requests in the running batch")
        self.waiting = make(Gauge, "vllm:num_requests_waiting", "Requests waiting to be scheduled")
        self.kv_usage = make(Gauge, "vllm:kv_cache_usage_perc", "KV cache usage (1 = full)")
        self.ttft = make(Histogram, "vllm:time_to_first_token_seconds", "Time to first token",
                         buckets=_TTFT)
        self.itl = make(Histogram, "vllm:inter_token_latency_seconds", "Inter-token latency",
                        buckets=_ITL)
        self.e2e = make(Histogram, "vllm:e2e_request_latency_seconds", "End-to-end request latency",
                        buckets=_LONG)
        self.queue = make(Histogram, "vllm:request_queue_time_seconds",
                          "Time from arrival to first scheduled", buckets=_LONG)
        # prometheus-client appends _total to counters: vllm:num_preemptions_total, ...
        self.preemptions = make(Counter, "vllm:num_preemptions", "Preemptions (recompute)")
        self.prompt_tokens = make(Counter, "vllm:prompt_tokens", "Prompt tokens of finished requests")
        self.generation_tokens = make(Counter, "vllm:generation_tokens", "Generated tokens")

    def watch(self, sched) -> None:
        """Gauges read the scheduler when scraped (plain reads of lengths and counts);
        the engine's settings are stated once, as vLLM states its cache config, so that a
        client calibrating from request timings (calibrate --from-replay / --endpoint)
        simulates the engine that served it."""
        self._settings(sched)
        self.running.set_function(lambda: len(sched.running))
        self.waiting.set_function(lambda: sched.num_waiting)
        self.kv_usage.set_function(lambda: sched.kv.num_used / sched.kv.num_blocks)

    def _settings(self, sched) -> None:
        r = self.registry
        # vLLM's gauge (vllm/v1/metrics/loggers.py): the cache config as labels, value 1.
        cache = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                      ["block_size", "num_gpu_blocks", "enable_prefix_caching"], registry=r)
        cache.labels(str(sched.kv.block_size), str(sched.kv.num_blocks),
                     str(bool(sched.prefix_caching))).set(1)
        # vLLM states no scheduler config; batchlab does, under its own prefix.
        budget = sched.token_budget
        sc = Gauge("batchlab:scheduler_config_info", "The engine's seats, token budget and policy",
                   ["max_num_seqs", "max_num_batched_tokens", "policy"], registry=r)
        sc.labels(str(sched.max_seqs), "" if budget is None else str(budget), sched.name).set(1)

    def on_step(self, sched, batch, kv_used_fraction: float) -> None:
        if batch.preempted:
            self.preemptions.inc(len(batch.preempted))

    def on_token(self, seq: Sequence, gap_s: float | None) -> None:
        self.generation_tokens.inc()
        if gap_s is None:
            self.ttft.observe(seq.first_token - seq.request.arrival)
        else:
            self.itl.observe(gap_s)

    def on_done(self, seq: Sequence) -> None:
        if seq.status is Status.FINISHED:
            self.e2e.observe(seq.finish - seq.request.arrival)
            self.queue.observe(seq.first_scheduled - seq.request.arrival)
            self.prompt_tokens.inc(seq.request.prompt_len)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
