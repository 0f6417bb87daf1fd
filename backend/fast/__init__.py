"""The backend's fast path, its serving-engine half: paged attention that reads the KV
pool in place (paged_flex.py), fused elementwise work (fused.py), CUDA graphs for decode
steps (graphs.py, sizes.py), chosen by FastPath (options.py). The reference path
(backend/attention.py's gather, eager elementwise) stays, and tests compare the two."""
