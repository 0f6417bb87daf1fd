"""Prefill/decode disaggregation in simulated time: a prefill pool and a decode pool of
replicas, each behind its own router, and the KV of each finished prefill sent to a
decode replica over a named link (core/kv_handoff.py, core/model/links.py)."""
from batchlab.sim.disaggregated.simulate import DisaggregatedResult, simulate_disaggregated
from batchlab.sim.disaggregated.world import DisaggregatedWorld

__all__ = ["DisaggregatedResult", "DisaggregatedWorld", "simulate_disaggregated"]
