"""One run's replicas simulated in groups, apart (other processes), and merged into the
result a single run of them all gives, bit for bit.

Round-robin routing deals request i to replica i mod R whatever the replicas' state, and
an arrival wakes only the replica it goes to (sim/simulate.py), so a replica's run depends
on its own requests alone: a group of replicas [lo, hi) runs the requests dealt to it as a
run of hi - lo replicas of its own (split.py), and the groups' tables (their request rows
packed: rows.py), gaps and exact step sums are put together as one run's (merge.py). Routers that read the replicas' state, a
shared front end, a closed loop, speculative decoding and KV tiers couple the replicas:
split.py refuses them."""
from batchlab.sim.replica_groups.merge import merge
from batchlab.sim.replica_groups.part import GroupRun, simulate_group
from batchlab.sim.replica_groups.split import Share, check_splittable, group_workload, replica_groups

__all__ = ["GroupRun", "Share", "check_splittable", "group_workload", "merge", "replica_groups",
           "simulate_group"]
