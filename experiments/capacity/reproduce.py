"""What `capacity deploy` sized, said so that it can be checked: the window of the trace
(with --busiest-window), and a `batchlab simulate` command that reruns the winner at
its answer, the same workload, scheduler, model, GPU, layout and price options, so its
latencies are the winner's row."""
from __future__ import annotations

import argparse
import shlex

from batchlab.core.workload import build_workload
from batchlab.experiments.capacity.space import Deployment
from batchlab.experiments.capacity.tier_options import tier_config
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.options import add_common_options
from batchlab.experiments.roofline_options import add_roofline_options
from batchlab.experiments.speculative_options import add_speculative_options

# Options the deployment itself sets (its own flags are appended instead).
SET_BY_DEPLOYMENT = {"mo_name", "hw_name", "hw_tensor_parallel", "hw_pipeline_parallel", "hw_expert_parallel",
                     "mo_dtype", "sc_max_num_seqs", "sc_max_num_batched_tokens", "ru_replicas", "policy",
                     "ru_router", "sp_method", "sp_num_speculative_tokens"}
WINDOW = {"wl_window_start_s", "wl_window_duration_s"}
OUTPUT = {"out", "format"}  # where deploy writes is not where the rerun should


def window_line(cfg: ExperimentConfig, seconds: float | None) -> str:
    """The load sized: the busiest window of the trace, where and how busy, or the whole
    workload."""
    wl = cfg.workload
    w = build_workload(wl.model_copy(update={"rate_scale": 1.0}))
    n = len(w)
    if seconds is None:
        return f"sized for: the whole workload ({wl.source}, {n} requests) at x{wl.rate_scale:g} its rate"
    rate = n / seconds
    return (f"sized for: the busiest {seconds:g} s of {wl.source}, from {wl.window_start_s:.1f} s into it "
            f"({n} requests, {rate:.2f} req/s in its own time, {rate * wl.rate_scale:.2f} req/s at "
            f"x{wl.rate_scale:g})")


def _given(args: argparse.Namespace, skip: set[str]) -> list[str]:
    """args' shared workload, scheduler, model and pricing options, as command-line words,
    in the order the parser lists them (only those not at their default)."""
    p = argparse.ArgumentParser(add_help=False)
    add_common_options(p)
    add_roofline_options(p)
    add_speculative_options(p)
    words: list[str] = []
    for a in p._actions:
        if not a.option_strings or a.dest in skip or not hasattr(args, a.dest):
            continue
        v = getattr(args, a.dest)
        if v is None or v == a.default:
            continue
        flag = a.option_strings[0]
        if a.nargs == 0:  # store_const / store_true
            words.append(flag)
        elif a.dest == "sp_acceptance":  # one option, a comma list
            words += [flag, ",".join(map(str, v))]
        elif isinstance(v, list):
            for item in v:
                words += [flag, str(item)]
        else:
            words += [flag, str(v)]
    return words


def simulate_command(args: argparse.Namespace, cfg: ExperimentConfig, dep: Deployment, replicas: int,
                     busiest: bool) -> str:
    """`batchlab simulate` of this deployment at this replica count, on the load deploy sized."""
    skip = SET_BY_DEPLOYMENT | OUTPUT | (WINDOW if busiest else set())
    words = ["batchlab", "simulate", *_given(args, skip)]
    if busiest:
        words += ["--window-start", repr(cfg.workload.window_start_s),
                  "--window-duration", repr(cfg.workload.window_duration_s)]
    words += ["--policy", cfg.policies()[0], "--router", dep.router or cfg.run.router, "--replicas", str(replicas),
              "--model", dep.model, "--hardware", dep.hardware, "--tp", str(dep.tp)]
    if dep.pp > 1:
        words += ["--pp", str(dep.pp)]
    if dep.ep > 1:
        words += ["--ep", str(dep.ep)]
    words += ["--dtype", dep.dtype, "--max-num-seqs", str(dep.seats), "--max-num-batched-tokens", str(dep.budget)]
    if dep.speculative and dep.speculative != "off":
        method, k = dep.speculative.split(":")
        words += ["--speculative", method, "--num-speculative-tokens", k]
    return shlex.join(words + tier_words(cfg, dep))


def tier_words(cfg: ExperimentConfig, dep: Deployment) -> list[str]:
    """The deployment's tier as --kv-tier flags: a searched one, or the config's [kv_tier]
    ('', whether it came from --config or from --kv-tier flags, which _given does not carry)."""
    if dep.kv_tier == "off" or not (dep.kv_tier or cfg.kv_tier):
        return []
    t = tier_config(dep.kv_tier, cfg.kv_tier) if dep.kv_tier else cfg.kv_tier
    words = ["--kv-tier", t.kind, "--kv-tier-capacity", f"{t.capacity_gib:g}"]
    if t.bandwidth_gbs is not None:
        words += ["--kv-tier-bandwidth", f"{t.bandwidth_gbs:g}"]
    if t.latency_us is not None:
        words += ["--kv-tier-latency-us", f"{t.latency_us:g}"]
    words += ["--kv-tier-preemption", t.preemption] + ([] if t.prefix else ["--no-kv-tier-prefix"])
    return words
