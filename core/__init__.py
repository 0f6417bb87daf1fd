"""The shared model of LLM serving: requests, KV blocks, schedulers, step features,
cost models and metrics. Pure Python + numpy; imports neither simpy nor torch, so the
simulator and the torch backend run the very same objects."""
