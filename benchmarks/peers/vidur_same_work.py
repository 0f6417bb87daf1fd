"""batchlab against Vidur on the same work, in one run: CPU per request, per decision, per step.

    python benchmarks/peers/vidur_same_work.py [--pairs P] [--num-requests N]
        [--vidur-python /work/venv-vidur/bin/python] [--batchlab-path DIR]

Install Vidur in a virtual environment of its own (never in batchlab's), Python 3.11:

    python3.11 -m venv /work/venv-vidur
    /work/venv-vidur/bin/pip install vidur==0.0.26      # or the downloaded wheel

Vidur 0.0.26 downloads its operator profiles from HuggingFace; this recipe reads the public
Vidur tables in ../shared/gpu-profiles/vidur instead (MIT, microsoft/vidur): Llama-3-8B's
operator table on the A100, and the only attention table there is (a 70B shape at TP 2,
per GPU 32 query and 4 KV heads of 128: relabelled to Llama-3-8B's shape at TP 1, 32 query
and 8 KV heads of 128: a stand-in, which changes Vidur's step prices a little, not its
cost per step). Vidur's random-forest predictor, with one grid point (100 trees, depth 16)
and 3 folds instead of its 27-point grid and 10 folds (0.0.26's linear regression cannot be
built: an abstract method); a fitted predictor only fills lookup tables, read per batch.
The fit runs once, in an untimed warm-up run, and is cached in the work folder.

The work: the Azure 2023 conversation trace (../shared/traces/azure2023_conv.csv, 19,366
requests), prompts cut so that prompt + output <= 4,096 (Vidur's Llama-3-8B context),
written in both simulators' trace formats with the same arrivals and lengths. One replica of
Llama-3-8B on one A100, tensor parallel 1. Vidur: its vLLM scheduler (batch cap 128, 4,096
tokens in a batch). batchlab: the continuous policy (max_num_seqs 128,
max_num_batched_tokens 4,096), roofline price, step table kept (as `batchlab simulate`).

Each run is a fresh process, alternating (Vidur, batchlab; then the other way round);
the CPU seconds are the child's own (resource.getrusage RUSAGE_CHILDREN), and each child
also reports the CPU seconds of its simulation alone (time.process_time around it, start-up,
imports, trace reading and Vidur's predictor loading left out). Decisions: batchlab's engine
iterations (sim/counting.py: a step, or a fast-forward run); Vidur takes one decision per
batch, so its decisions are its batches. Steps: each simulator's batches (batchlab's step
table rows). Prints medians and the ratios Vidur / batchlab. --batchlab-path is the batchlab
child's PYTHONPATH (default: this checkout); point it at a compiled in-place build (pip
install -e .); the recipe warns when the child ran no compiled module.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = next((p for p in (ROOT.parent / "shared", ROOT.parents[1] / "shared") if p.is_dir()),
              ROOT.parent / "shared")
MAX_TOKENS = 4096  # Vidur's Llama-3-8B max_model_len: its trace reader asserts prompt+output <= it
BATCH_CAP, BATCH_TOKENS = 128, 4096
VIDUR_DATE = "2023-11-16"  # Vidur's trace reader keeps one Date; every row carries this one


def write_workload(trace: Path, work: Path, limit: int) -> int:
    """The trace's requests, cut to MAX_TOKENS, in batchlab's and Vidur's CSV formats."""
    rows = []
    with trace.open() as f:
        for rec in csv.DictReader(f):
            t = datetime.fromisoformat(rec["TIMESTAMP"][:26])
            out = max(1, min(int(rec["GeneratedTokens"]), MAX_TOKENS - 1))
            prompt = max(1, min(int(rec["ContextTokens"]), MAX_TOKENS - out))
            rows.append((t, prompt, out))
            if limit and len(rows) == limit:
                break
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    with (work / "batchlab.csv").open("w") as b, (work / "vidur.csv").open("w") as v:
        b.write("arrival_s,prompt_len,output_len\n")
        v.write("Date,Time,PromptTokenCount,CompletionTokenCount\n")
        for t, prompt, out in rows:
            s = f"{(t - t0).total_seconds():.6f}"
            b.write(f"{s},{prompt},{out}\n")
            v.write(f"{VIDUR_DATE},{s},{prompt},{out}\n")
    return len(rows)


def vidur_attention_table(profiles: Path, work: Path) -> Path:
    """The shared A100 attention table relabelled to Llama-3-8B at TP 1 (see the docstring)."""
    out = work / "attention.csv"
    with (profiles / "attention/a100/attention.csv").open() as f, out.open("w", newline="") as g:
        reader = csv.DictReader(f)
        writer = csv.DictWriter(g, reader.fieldnames)
        writer.writeheader()
        for rec in reader:
            rec.update(n_embd="4096", n_q_head="32", n_kv_head="8", num_tensor_parallel_workers="1")
            writer.writerow(rec)
    return out


def vidur_child(work: Path, profiles: Path) -> dict:
    """Runs in Vidur's venv: one simulation of vidur.csv; its counts and CPU seconds."""
    # lazy: each child imports only its own simulator (the other venv lacks it)
    import logging
    from vidur.config import (ClusterConfig, RandomForrestExecutionTimePredictorConfig,
                              MetricsConfig, ReplicaConfig, SimulationConfig,
                              TraceRequestGeneratorConfig, VllmSchedulerConfig)
    from vidur.entities.batch import Batch
    from vidur.events.base_event import BaseEvent
    from vidur.execution_time_predictor import sklearn_execution_time_predictor as skl
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds
    logging.disable(logging.INFO)

    def local_tables(self):  # the shared tables, not a HuggingFace download
        net = profiles / "network/a100_pairwise_nvlink"
        return (str(profiles / "compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"),
                str(work / "attention.csv"), str(net / "all_reduce.csv"), str(net / "send_recv.csv"))

    def no_hub(self):  # no network here: fit from the tables (cached in the work folder)
        raise RuntimeError("offline")
    skl.SklearnExecutionTimePredictor._get_input_files = local_tables
    skl.SklearnExecutionTimePredictor._load_predictions_from_hf = no_hub
    config = SimulationConfig(
        seed=42,
        cluster_config=ClusterConfig(
            num_replicas=1,
            replica_config=ReplicaConfig(
                model_name="meta-llama/Llama-3-8B", device="a100",
                network_device="a100_pairwise_nvlink", num_pipeline_stages=1,
                tensor_parallel_size=1),
            replica_scheduler_config=VllmSchedulerConfig(
                batch_size_cap=BATCH_CAP, max_tokens_in_batch=BATCH_TOKENS)),
        request_generator_config=TraceRequestGeneratorConfig(
            trace_file=str(work / "vidur.csv"), date=VIDUR_DATE, prefill_scale_factor=1,
            decode_scale_factor=1, time_scale_factor=1, max_tokens=MAX_TOKENS),
        execution_time_predictor_config=RandomForrestExecutionTimePredictorConfig(
            cache_dir=str(work / "vidur_cache"), prediction_max_tokens_per_request=2 * MAX_TOKENS,
            num_training_job_threads=1, num_estimators=[100], max_depth=[16],
            min_samples_split=[2], k_fold_cv_splits=3),
        metrics_config=MetricsConfig(
            write_metrics=False, enable_chrome_trace=False, store_plots=False,
            store_request_metrics=False, store_batch_metrics=False,
            store_utilization_metrics=False, output_dir=str(work / "vidur_out")))
    set_seeds(config.seed)
    sim = Simulator(config)
    events0 = BaseEvent._id
    c0 = time.process_time()
    sim.run()
    cpu = time.process_time() - c0
    return {"sim_cpu_s": cpu, "requests": _vidur_requests(work),
            "steps": Batch._id + 1, "decisions": Batch._id + 1, "events": BaseEvent._id - events0,
            "end_s": sim._time}


def _vidur_requests(work: Path) -> int:
    with (work / "vidur.csv").open() as f:
        return sum(1 for _ in f) - 1


def batchlab_child(work: Path) -> dict:
    """Runs in batchlab's venv: one simulation of batchlab.csv; its counts and CPU seconds."""
    # lazy: each child imports only its own simulator (the other venv lacks it)
    from batchlab.core.config import SchedulerConfig
    from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
    from batchlab.core.model.presets import lookup_hardware, lookup_model
    from batchlab.core.workload import WorkloadConfig, build_workload
    from batchlab.sim import simulate
    from batchlab.sim.counting import counting_decisions
    from batchlab._compiled import compiled_modules
    model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
    cost = roofline(model, hw, 1, 0.8, 0.6, 0.002)
    blocks = kv_capacity_blocks(model, hw, 1, 16)
    w = build_workload(WorkloadConfig(source=str(work / "batchlab.csv")))
    sched = SchedulerConfig(policy="continuous", max_num_seqs=BATCH_CAP,
                            max_num_batched_tokens=BATCH_TOKENS)
    with counting_decisions() as decisions:  # the recorders' own count: no cost per step
        c0 = time.process_time()
        r = simulate(w, sched, cost, blocks, record_steps=True)
        cpu = time.process_time() - c0
    s = r.summary()
    return {"sim_cpu_s": cpu, "requests": len(w), "steps": int(s["num_steps"]),
            "decisions": decisions[0], "compiled_modules": len(compiled_modules())}


def child(cmd: list[str], env: dict) -> dict:
    """One fresh process: its JSON line plus its own CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"{cmd[0]} failed: {p.stderr.strip()[-1500:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="alternating runs per simulator")
    ap.add_argument("--num-requests", type=int, default=0, help="first N of the trace (0: all)")
    ap.add_argument("--trace", type=Path, default=SHARED / "traces/azure2023_conv.csv")
    ap.add_argument("--profiles", type=Path, default=SHARED / "gpu-profiles/vidur")
    ap.add_argument("--vidur-python", default="/work/venv-vidur/bin/python")
    ap.add_argument("--batchlab-python", default=sys.executable)
    ap.add_argument("--batchlab-path", default=str(ROOT),
                    help="PYTHONPATH of the batchlab child (a compiled in-place build)")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--child", choices=("vidur", "batchlab"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        work = a.work
        print(json.dumps(vidur_child(work, a.profiles) if a.child == "vidur"
                         else batchlab_child(work)))
        return
    work = a.work or Path(tempfile.mkdtemp(prefix="vidur_same_work_"))
    work.mkdir(parents=True, exist_ok=True)
    n = write_workload(a.trace, work, a.num_requests)
    vidur_attention_table(a.profiles, work)
    me = str(Path(__file__).resolve())
    base = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    base.pop("BATCHLAB_PURE", None)
    cmds = {"vidur": ([a.vidur_python, me, "--child", "vidur", "--work", str(work),
                       "--profiles", str(a.profiles)], dict(base, PYTHONPATH="")),
            "batchlab": ([a.batchlab_python, me, "--child", "batchlab", "--work", str(work)],
                         dict(base, PYTHONPATH=a.batchlab_path))}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{n} requests; work folder {work}; load average before: {load}")
    print("warm-up (untimed): Vidur fits its predictor once, cached")
    for name, (cmd, env) in cmds.items():
        child(cmd, env)
    runs: dict[str, list[dict]] = {k: [] for k in cmds}
    for i in range(a.pairs):
        order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
        for name in order:
            runs[name].append(child(*cmds[name]))
    if not runs["batchlab"][0]["compiled_modules"]:
        print(f"WARNING: batchlab from {a.batchlab_path} ran no compiled module (the pure build)")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average after: {load}; medians of {a.pairs} runs each, alternating")
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
    head = ("simulator", "requests", "decisions", "steps", "sim CPU s", "process CPU s",
            "us/request", "us/decision", "us/step")
    print(" | ".join(head))
    for k, m in med.items():
        cpu = m["sim_cpu_s"] * 1e6
        print(f"{k} | {m['requests']:.0f} | {m['decisions']:.0f} | {m['steps']:.0f} | "
              f"{m['sim_cpu_s']:.2f} | {m['process_cpu_s']:.2f} | {cpu / m['requests']:.1f} | "
              f"{cpu / m['decisions']:.1f} | {cpu / m['steps']:.1f}")
    v, b = med["vidur"], med["batchlab"]
    for label, key in (("request", "requests"), ("decision", "decisions"), ("step", "steps")):
        print(f"Vidur / batchlab CPU per {label}: "
              f"{(v['sim_cpu_s'] / v[key]) / (b['sim_cpu_s'] / b[key]):.1f}x")
    print(f"Vidur / batchlab CPU, whole process: {v['process_cpu_s'] / b['process_cpu_s']:.1f}x;"
          f" simulation alone: {v['sim_cpu_s'] / b['sim_cpu_s']:.1f}x")
    print("per run:", json.dumps(runs))


if __name__ == "__main__":
    main()
