"""An example batchlab plug-in (docs/policies.md): the policy kv_headroom (headroom.py)
and the orders shortest_total and longest_output (orders.py), registered by the entry
points in pyproject.toml. Nothing is imported here: batchlab imports each module when
its name is first asked for."""
