"""Scheduler.abort (a client left, batchlab serve): from any point of any registered
policy's schedule, the aborted sequence leaves and its KV blocks come back; the others
finish as if it had never been there, and block accounting stays whole."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.request import Request, Status
from batchlab.core.schedulers import all_policies, make_scheduler

requests = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 20)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(reqs=requests, policy=st.sampled_from(sorted(all_policies())), victim=st.integers(0, 11),
       at_step=st.integers(0, 30), seats=st.integers(1, 6), blocks=st.integers(8, 40))
def test_abort_frees_blocks_and_the_rest_finish(reqs, policy, victim, at_step, seats, blocks):
    cfg = SchedulerConfig(policy=policy, max_num_seqs=seats, block_size=4, max_num_batched_tokens=64)
    sched = make_scheduler(cfg, blocks)
    seqs = [sched.add(Request(i, 0.0, p, o), 0.0) for i, (p, o) in enumerate(reqs)]
    target = seqs[victim % len(seqs)]
    now, aborted = 0.0, False
    for step in range(5000):
        if step == at_step:
            was = target.status
            aborted = sched.abort(target, now)
            assert aborted == (was in (Status.RUNNING, Status.WAITING))
            if aborted:
                assert target.status is Status.ABORTED and target.block_table == []
                assert target not in sched.running and target not in sched.waiting()
                assert not sched.abort(target, now)  # a second time: nothing to do
        if not sched.has_work():
            break
        batch = sched.schedule(now)
        now += 1.0
        if batch.is_empty:
            assert sched.next_wakeup(now) is not None or not sched.has_work()
            continue
        assert target not in batch.seqs or not aborted
        sched.complete(batch, now)
        used = sum(len(s.block_table) for s in sched.running)
        assert sched.kv.num_used == used
    assert not sched.has_work() and sched.kv.num_used == 0
    for s in seqs:
        if s is target and aborted:
            continue
        assert s.status in (Status.FINISHED, Status.REJECTED)
