"""Prefill/decode disaggregation on the real backend: a prefill engine and a decode engine
in one process, each with its own KV pool and scheduler, and each finished prompt's KV
blocks really copied from one pool to the other (handoff.py, pools.py)."""
