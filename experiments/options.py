"""Options every command shares, and the merge: embedded default or --config TOML,
then command-line overrides, validated once so an error names the field."""
from __future__ import annotations

import argparse
import copy
import tomllib
from typing import Any

from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, lookup
from batchlab.core.plugins import PluginError, cut
from batchlab.core.schedulers import SCHEDULERS, policy_class
from batchlab.experiments.config import ExperimentConfig, build_config, read_toml
from batchlab.experiments.errors import UserError
from batchlab.experiments.fast_options import add_fast_path_options
from batchlab.experiments.workload_options import add_workload_options, workload_overrides


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.toml", help="experiment config (TOML)")
    add_workload_options(parser)
    g = parser.add_argument_group("scheduler")
    g.add_argument("--policy", action="append", metavar="NAME",
                   help=f"{' | '.join(sorted(SCHEDULERS))} | an installed plug-in's name | "
                        "module:Class; repeat or comma-separate to compare (simulate "
                        "--list-policies describes them)")
    g.add_argument("--policy-param", dest="policy_params", action="append", metavar="NAME=VALUE",
                   help="a policy's own parameter ([scheduler.params]), repeatable; the value "
                        "is read as in TOML (512, 0.8, true, or text)")
    g.add_argument("--max-num-seqs", dest="sc_max_num_seqs", type=int, metavar="N", help="seats")
    g.add_argument("--max-num-batched-tokens", dest="sc_max_num_batched_tokens", type=int, metavar="N")
    g.add_argument("--max-model-len", dest="sc_max_model_len", type=int, metavar="N",
                   help="longest prompt + output a request may ask for (default: the model's context)")
    g.add_argument("--block-size", dest="sc_block_size", type=int, metavar="N")
    g.add_argument("--num-kv-blocks", dest="sc_num_kv_blocks", type=int, metavar="N")
    g.add_argument("--admission", dest="admissions", action="append", metavar="ORDER",
                   help=f"{' | '.join(sorted(ADMISSION_ORDERS))} | a plug-in's name | "
                        "module:function; repeat or comma-separate to compare (a run per policy "
                        "and order)")
    g.add_argument("--preemption", dest="sc_preemption", metavar="VICTIM",
                   help=f"{' | '.join(sorted(VICTIM_ORDERS))} | a plug-in's name | module:function")
    g.add_argument("--kv-allocation", dest="sc_kv_allocation", choices=("paged", "reserved"),
                   help="paged (default): blocks as tokens arrive, preempt when out; reserved: "
                        "admit only if prompt + whole output budget fits, never preempt")
    g.add_argument("--max-batch-delay", dest="sc_max_batch_delay_s", type=float, metavar="S",
                   help="static: wait up to S seconds for a full batch")
    g.add_argument("--prefix-caching", dest="sc_prefix_caching", action="store_const", const=True,
                   help="reuse cached prompt prefixes (default: on for continuous and chunked, "
                        "off for static)")
    g.add_argument("--no-prefix-caching", dest="sc_prefix_caching", action="store_const",
                   const=False, help="turn prefix caching off")
    g = parser.add_argument_group("model and hardware")
    g.add_argument("--model", dest="mo_name", metavar="NAME|DIR")
    g.add_argument("--hardware", dest="hw_name", metavar="NAME")
    g.add_argument("--tp", "--tensor-parallel", dest="hw_tensor_parallel", type=int, metavar="N",
                   help="tensor parallel")
    g.add_argument("--pp", "--pipeline-parallel", dest="hw_pipeline_parallel", type=int, metavar="N",
                   help="pipeline stages per replica")
    g.add_argument("--ep", "--expert-parallel", dest="hw_expert_parallel", type=int, metavar="N",
                   help="spread the routed experts over N GPUs (1, or the tensor parallel size)")
    g.add_argument("--dp-attention", dest="hw_data_parallel_attention", action="store_const",
                   const=True, help="attention data-parallel over the tensor-parallel GPUs")
    g.add_argument("--profile", dest="pr_path", metavar="FILE|NAME",
                   help="calibration profile (or 'default'): its cost model, KV capacity and model")
    g = parser.add_argument_group("run")
    g.add_argument("--replicas", dest="ru_replicas", type=int, metavar="N")
    g.add_argument("--router", dest="ru_router", metavar="NAME", help="round_robin | least_loaded | prefix_aware")
    for slo in ("ttft", "tpot", "e2el"):
        g.add_argument(f"--slo-{slo}-ms", dest=f"slo_{slo}_ms", type=float, metavar="MS",
                       help=f"goodput: {slo.upper()} objective")
    g = parser.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", help="write tables (CSV), summary (JSON) here")
    g.add_argument("--format", choices=("table", "json"), default="table",
                   help="json: the summary on stdout, keyed by policy")
    note_flags(parser)


def add_plot_option(parser: argparse.ArgumentParser) -> None:
    """--plot DIR (simulate, run): experiments/run_plots.py."""
    parser.add_argument("--plot", metavar="DIR", help="write the standard plots here: latency "
                        "CDFs, seats and KV in use over time, queue length over time (PNG)")


def add_backend_options(parser: argparse.ArgumentParser, threads_note: str = "") -> argparse._ArgumentGroup:
    """The torch backend's options (run, serve, validate); mo_* land in the [model] table."""
    g = parser.add_argument_group("backend")
    g.add_argument("--dtype", dest="mo_dtype", metavar="DTYPE", help="float32 (default) | bfloat16 | float16")
    g.add_argument("--device", dest="mo_device", metavar="DEV", help="cpu (default) | cuda | cuda:N")
    g.add_argument("--threads", dest="mo_threads", type=int, metavar="N",
                   help="torch threads (default 1: steady timing on small CPUs)" + threads_note)
    g.add_argument("--kv-memory", dest="mo_kv_memory", metavar="BUDGET",
                   help="KV pool: a size (2GiB) or a fraction of free memory (0.5); default "
                        "1GiB on cpu, 0.8 of free GPU memory on cuda; --num-kv-blocks overrides it")
    g.add_argument("--matmul", dest="mo_matmul", choices=("auto", "onednn", "torch"),
                   help="GEMM kernel (auto: prepacked oneDNN on CPU float32)")
    add_fast_path_options(g)
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return g


LAYOUT_DESTS = ("hw_pipeline_parallel", "hw_expert_parallel", "hw_data_parallel_attention")


def reject_unused(args: argparse.Namespace, command: str, unused: dict[str, str]) -> None:
    """A flag this command accepts (the options are shared) but cannot honour is an
    error, not silently ignored. unused: argparse dest -> why it does not apply."""
    if "hw_tensor_parallel" in unused:  # a command on one device takes no layout at all
        unused = {**unused, **{d: unused["hw_tensor_parallel"] for d in LAYOUT_DESTS}}
    for dest, why in unused.items():
        if getattr(args, dest, None) is not None:
            flag = FLAGS.get(dest, "--" + dest.replace("_", "-"))
            raise UserError(f"{flag} does not apply to batchlab {command}: {why}")


def named(args: argparse.Namespace, table: str, field: str = "name") -> bool:
    """Whether the user set [table] field, by its flag or in the config file (a default,
    the embedded experiment's included, is not the user's choice)."""
    prefix = next(p for p, t in _SECTIONS.items() if t == table)
    if getattr(args, prefix + field, None) is not None:
        return True
    return bool(args.config) and field in (read_toml(args.config).get(table) or {})


def reject_unused_tables(cfg: ExperimentConfig, command: str, unused: dict[str, str]) -> None:
    """The same for a config file's tables: a [hardware] that `run` cannot honour is an
    error, not ignored. unused: table -> why it does not apply."""
    for table, why in unused.items():
        given = sorted(getattr(cfg, table).model_fields_set)
        if given:
            raise UserError(f"[{table}] {', '.join(given)} does not apply to batchlab {command}: {why}")


def reject_unused_fields(cfg: ExperimentConfig, command: str, unused: dict[str, str]) -> None:
    """The same for single fields: [model] dtype in a simulate config is an error, not
    silently ignored. unused: "table.field" -> why it does not apply."""
    for field, why in cfg.unused(unused).items():
        table, name = field.split(".")
        raise UserError(f"[{table}] {name} does not apply to batchlab {command}: {why}")


_SECTIONS = {"sc_": "scheduler", "mo_": "model", "hw_": "hardware", "pr_": "profile", "ru_": "run",
             "kt_": "kv_tier", "sp_": "speculative", "de_": "deployment"}


def cli_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"workload": workload_overrides(args)}
    for key, value in vars(args).items():
        if value is not None and key[:3] in _SECTIONS:
            out.setdefault(_SECTIONS[key[:3]], {})[key[3:]] = value
    slo = {k[4:]: v for k, v in vars(args).items() if k.startswith("slo_") and v is not None}
    if slo:
        out.setdefault("run", {})["slo"] = slo
    if getattr(args, "sc_preemption", None):
        _resolved("--preemption", [args.sc_preemption], lambda v: lookup(VICTIM_ORDERS, v, "preemption victim order"))
    if args.policy:
        out.setdefault("run", {})["policies"] = _resolved("--policy", _names(args.policy), policy_class)
    if getattr(args, "admissions", None):
        orders = _resolved("--admission", _names(args.admissions),
                           lambda a: lookup(ADMISSION_ORDERS, a, "admission order"))
        out.setdefault("scheduler", {})["admission"] = orders[0]
        out.setdefault("run", {})["admissions"] = orders if len(orders) > 1 else None
    for item in getattr(args, "policy_params", None) or []:
        name, value = parse_param(item)
        out.setdefault("scheduler", {}).setdefault("params", {})[name] = value
    return out


def _resolved(flag: str, names: list[str], resolve) -> list[str]:
    """names, each resolved now (a plug-in imported) so that a bad one is an error naming
    the option: `--policy mypkg:Nope: mypkg has no attribute 'Nope'`."""
    for name in names:
        try:
            resolve(name)
        except PluginError as e:
            raise UserError(f"{flag} {cut(name)}: {e.problem}") from None
    return names


def _names(values: list[str]) -> list[str]:
    """Repeated and comma-separated names, in order."""
    return [p.strip() for arg in values for p in arg.split(",") if p.strip()]


def parse_param(item: str) -> tuple[str, Any]:
    """NAME=VALUE, the value read as a TOML value (512, 0.8, true, "x"), else as text."""
    name, sep, text = item.partition("=")
    if not sep or not name.strip():
        raise UserError(f"--policy-param {item!r}: expected NAME=VALUE (e.g. long_prompt=512)")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    return name.strip(), value


def load_experiment(args: argparse.Namespace, default: dict[str, Any] | None = None) -> ExperimentConfig:
    data = read_toml(args.config) if args.config else copy.deepcopy(default or {})
    overrides = cli_overrides(args)
    if not args.config and "source" in overrides.get("workload", {}):
        # The embedded default's size and rate belong to its own preset: a trace named
        # on the command line is replayed whole, at its own times, unless told otherwise.
        data.pop("workload", None)
        # So does its seat count, sized to show its point: 32 seats saturate on the Azure
        # conv trace where vLLM's default of 256 keeps up. The scheduler's default applies.
        data.get("scheduler", {}).pop("max_num_seqs", None)
    if not args.config and "slo" in overrides.get("run", {}):
        # Likewise its SLO: `--slo-e2el-ms` alone must mean that objective alone, not
        # that one added to the default's hidden TTFT and TPOT limits.
        data.get("run", {}).pop("slo", None)
    demo = set() if args.config else set(data.get("scheduler", {})) - set(overrides.get("scheduler", {}))
    merge(data, overrides)
    try:
        cfg = build_config(data, where=args.config or "")
    except UserError as e:
        raise UserError(name_flag(str(e), args)) from None
    cfg._demo_scheduler = frozenset(demo)
    if cfg.deployment is not None and not hasattr(args, "de_link"):  # only simulate has its flags
        raise UserError(f"{args.config or 'config'}: [deployment] (prefill and decode pools) is run by "
                        f"`batchlab simulate` only; this command would ignore it (capacity deploy: --pd-ratios)")
    return cfg


# argparse dest -> the option that sets it, its first option string as the parser has it
# (filled by add_common_options and experiments.cli.build_parser), the first parser's first.
FLAGS: dict[str, str] = {}


def note_flags(parser: argparse.ArgumentParser) -> None:
    """Record the options parser has so far in FLAGS: errors name a field's flag."""
    for action in parser._actions:
        if action.option_strings:
            FLAGS.setdefault(action.dest, action.option_strings[0])


def name_flag(message: str, args: argparse.Namespace) -> str:
    """A field's error names the option too when the value came from the command line:
    `model.kv_memory (--kv-memory): ...`."""
    head, sep, rest = message.partition(": ")
    if head.endswith(".toml") or head.endswith(".TOML"):
        where, (head, sep, rest) = head + ": ", rest.partition(": ")
    else:
        where = ""
    table, _, field = head.partition(".")
    prefix = {t: p for p, t in _SECTIONS.items()} | {"workload": "wl_"}
    dest = prefix.get(table, "?") + field
    if field and getattr(args, dest, None) is not None and dest in FLAGS:
        return f"{where}{head} ({FLAGS[dest]}){sep}{rest}"
    return message


def merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Recursive update; a non-table in dst is left for validation to report."""
    for key, value in src.items():
        if isinstance(value, dict):
            if key not in dst:
                dst[key] = {}
            if isinstance(dst[key], dict):
                merge(dst[key], value)
        else:
            dst[key] = value
