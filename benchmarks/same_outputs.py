#!/usr/bin/env python3
"""Prove that a restructure changed no output: run a fixed set of batchlab commands with the
`batchlab` code of one tree, hash every file they write and what they print, and compare
two such manifests.

    python benchmarks/same_outputs.py --tree DIR --out MANIFEST.json [--pure] [--keep WORKDIR]
                                      [--only NAME,...] [--shared DIR] [--pythonpath DIR]
    python benchmarks/same_outputs.py --compare BEFORE.json AFTER.json
    python benchmarks/same_outputs.py --list          # the cases and their exact commands

Standalone: it imports nothing of batchlab (it may run from a tree that no longer matches
the one measured); run it with the Python that has batchlab's dependencies (the venv's):
every command runs with that same interpreter (sys.executable). Compare manifests made on
the same machine with the same venv: a study's study.json records the CPU model and count
and the numpy version, and the shared data's absolute path (--shared, default /work/shared)
appears in workload descriptions; neither is normalised.

How the tree's code is the code that runs
-----------------------------------------
Every command runs as `python -v -m batchlab ARGS` in a subprocess whose cwd is a fresh
folder of its own under the work folder, with a controlled environment: every PYTHON* and
BATCHLAB_* variable of the caller dropped, then PYTHONPATH=DIR (or --pythonpath, or DIR/src
where only that holds batchlab/__init__.py), BATCHLAB_TRACES=SHARED/traces (the trees would
otherwise look for ../shared/traces beside themselves), BATCHLAB_PURE=1 with --pure, TZ=UTC,
COLUMNS=100 (argparse's wrapping of --help), MPLBACKEND=Agg.
PYTHONPATH entries come before site-packages on sys.path, and the venv's editable install of
/work/main is a meta-path finder that setuptools *appends* to sys.meta_path, after the
normal PathFinder, so it only answers for a name PathFinder cannot find in the tree. That is
checked, not trusted, twice:
  1. before anything runs, a child with the same environment imports batchlab and prints
     where `batchlab` and each of its subpackages resolve (find_spec: nothing executed but
     batchlab/__init__); all must lie inside DIR, else the script stops (exit 1) before
     running anything (with --tree an empty folder it stops, naming /work/main's files);
  2. every command runs under `python -v`, which writes to stderr the file every module is
     loaded from (`# code object from '...'`, `# X matches Y`, `# extension module ...
     loaded from '...'`); a file outside DIR and outside the interpreter's own prefixes
     (sysconfig paths: stdlib, site-packages; sys.prefix, sys.base_prefix) fails that case
     (its manifest entry "imports" says which files). -v writes to stderr only, and
     multiprocessing workers inherit the flag, so they are checked too.
  (Were PYTHONPATH ever to lose, the fallback is `python -I -S` with an explicit sys.path;
  check 2 would show the need. It has not been needed.)

What is hashed
--------------
Per case: the stdout of each batchlab command; the exit code; every file left in the case's
folder (the tables, summaries, meta, configs, reports, profiles, plots and Parquet files the
command wrote, and the inputs this script wrote there, which are the same bytes for any
tree). stderr is not hashed (progress bars, "simulated in 0.05 s": the wall clock), except
for the error-path steps (stderr=True), whose one-line message is their output: there the
lines `python -v` itself writes (import traces, site's report, the version banner) are
removed and the rest hashed. PNG plots and Parquet tables are hashed byte for byte: two runs
of the pristine tree give identical bytes (matplotlib writes no date into a PNG; Parquet
holds the rows and the writer's version string).

What is normalised, and why (nothing else; each rule a specific key or pattern)
-------------------------------------------------------------------------------
In every text output (stdout, hashed stderr, every file that decodes as UTF-8):
  * the work folder's absolute path (as given and resolved) -> <WORK>: each run has a fresh
    temp folder, and outputs echo the paths they were given or wrote;
  * the tree's absolute path (as given and resolved) -> <TREE>: the package's install path,
    where an output names a file of the package;
  (a path is replaced only where it ends: not a prefix of a longer name)
Then the NORMALISE table below, each rule with its reason (all wall-clock):
  * JSON (files, and stdout of --format json) "created": ISO time -> "<CREATED>" (profiles);
    "date": ISO time -> "<DATE>" (a study's provenance); "fit_s", "judge_s" -> "<SECONDS>"
    (calibrate --from-operators' GPU profile and --format json, --from-replay --format
    json); "elapsed_s" -> "<SECONDS>" (a study's study.json);
  * stdout "fit 1.4 s; held-out judgment 6.7 s" (calibrate --from-operators), and
    "NAME: DIR/report.md (1.3 s)" (batchlab experiment);
  * report.md "Elapsed: 7 s." (the prefix-caching study);
  * SORT_LINES: the lines of points.jsonl (sweep) and searches.jsonl (capacity) are sorted:
    they are streamed in the order the worker processes finish (each line is the same;
    results.csv / answers.csv, in grid and search order, are hashed as written).
Every one of these was found by running the pristine tree twice and diffing the kept,
normalised outputs (`diff -r A/_normalised B/_normalised`).

The manifest
------------
{"_run": {tree, pythonpath, commit, pure, python, started, seconds per case, failed, ...},
 CASE: {"rc": exit code of the case's last batchlab command, "stdout": sha256,
        "rc@LABEL", "stdout@LABEL": the same for its earlier (labelled) commands,
        "stderr[@LABEL]": sha256 (error-path steps only),
        FILE: sha256 for every file in the case's folder (path relative to it),
        "imports": "ok" | "outside tree: FILES"}}
--compare ignores "_run" (and any key starting with "_"), prints every (case, key) that
differs or is missing on one side, and exits 1 if any, 0 if identical. A case whose exit
code is not the expected one (or whose imports left the tree) is reported, recorded in
_run.failed, and makes the measuring run exit 1; the manifest is written all the same.

With --keep WORKDIR (must be empty or new) the work folder stays: WORKDIR/CASE/ (what ran
there), WORKDIR/_logs/CASE[@LABEL].{cmd,stdout,stderr} (raw), WORKDIR/_normalised/CASE/...
(the exact bytes hashed; _stdout, _stderr for the streams), so that two kept runs can be
diffed. Without it a temp folder is used and removed.

Left out: the commands that need torch or a server (run, serve, replay, calibrate's backend
sweep and --endpoint, validate serving for real, the studies' --backend variants and the
fidelity study): they time the machine and are not deterministic.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from same_outputs_cases import CASES, B, Case, Ctx, F, save  # beside this script

DEFAULT_SHARED = "/work/shared"
STEP_TIMEOUT_S = 900


# -- normalisation ----------------------------------------------------------------------
ISO = r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"'
NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
JSON_TEXT = (".json", ".jsonl", "stdout")  # stdout: what --format json prints
# (where: file suffixes, file names or "stdout"; pattern; replacement; why)
NORMALISE: list[tuple[tuple[str, ...], re.Pattern, str, str]] = [
    (JSON_TEXT, re.compile(r'("created": )' + ISO), r'\1"<CREATED>"',
     "profiles (calibrate --from-operators / --from-replay / --from-run) record when they were written"),
    (JSON_TEXT, re.compile(r'("date": )' + ISO), r'\1"<DATE>"',
     "a study's study.json provenance records when it ran"),
    (JSON_TEXT, re.compile(r'("(?:fit_s|judge_s)": )' + NUMBER), r'\1"<SECONDS>"',
     "calibrate --from-operators (GPU profile and --format json) and --from-replay --format json "
     "record the wall-clock seconds of the fit and of the held-out judgment"),
    (JSON_TEXT, re.compile(r'("elapsed_s": )' + NUMBER), r'\1"<SECONDS>"',
     "a study's study.json records its wall-clock run time"),
    (("stdout",), re.compile(r"^fit \d+(?:\.\d+)? s; held-out judgment \d+(?:\.\d+)? s$", re.M),
     "fit <S> s; held-out judgment <S> s", "calibrate --from-operators prints its wall-clock times"),
    (("stdout",), re.compile(r"^([\w-]+: \S*report\.md) \(\d+(?:\.\d+)? s\)$", re.M), r"\1 (<S> s)",
     "batchlab experiment prints each study's wall-clock run time"),
    (("report.md",), re.compile(r"^Elapsed: \d+ s\.$", re.M), "Elapsed: <S> s.",
     "the prefix-caching study's report.md states its wall-clock run time"),
]
# Files whose lines are written in completion order by parallel workers (the set of lines is
# the output; the tables written at the end are in grid / search order and hashed as they
# are): their lines are sorted before hashing.
SORT_LINES = {"points.jsonl": "sweep streams one line per point as workers finish",
              "searches.jsonl": "capacity streams one line per search as workers finish"}


def path_patterns(paths: dict[str, list[Path]]) -> list[tuple[re.Pattern, str]]:
    """Absolute paths -> placeholders, longest first, only where the path ends (not a
    prefix of a longer name)."""
    pairs = []
    for token, ps in paths.items():
        for p in ps:
            for s in {str(p), os.path.realpath(p)}:
                pairs.append((s, token))
    pairs.sort(key=lambda t: -len(t[0]))
    return [(re.compile(re.escape(s) + r"(?![\w.\-])"), token) for s, token in pairs]


def normalise(data: bytes, name: str, paths: list[tuple[re.Pattern, str]]) -> bytes:
    """name: the file's name ("x/y.json"), "stdout" or "stderr". Data that is not UTF-8
    (PNG, Parquet) is returned unchanged."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    base = name.rsplit("/", 1)[-1]
    kinds = {base, os.path.splitext(base)[1].lower()}
    for pattern, token in paths:
        text = pattern.sub(token, text)
    for where, pattern, repl, _why in NORMALISE:
        if kinds & set(where):
            text = pattern.sub(repl, text)
    if base in SORT_LINES:
        text = "".join(sorted(text.splitlines(keepends=True)))
    return text.encode("utf-8")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- running --------------------------------------------------------------------------------
CHECK = r"""
import importlib.util, json, os, pkgutil, sys, sysconfig
import batchlab
out = {"batchlab": batchlab.__file__, "subpackages": {}, "sys_path": sys.path,
       "allowed": sorted({os.path.realpath(p) for p in [*sysconfig.get_paths().values(), sys.prefix,
                          sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] if p})}
for m in pkgutil.iter_modules(batchlab.__path__):
    spec = importlib.util.find_spec("batchlab." + m.name)
    locs = list(spec.submodule_search_locations or []) if spec else []
    out["subpackages"][m.name] = (spec.origin if spec else None, locs)
print(json.dumps(out))
"""


def inside(path: str, root: str) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip("/") + "/")


def check_imports(ctx: Ctx) -> None:
    r = subprocess.run([ctx.python, "-c", CHECK], env=ctx.env, cwd=tempfile.gettempdir(),
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"same_outputs: importing batchlab from {ctx.tree} failed:\n{r.stderr}")
    info = json.loads(r.stdout)
    print(f"batchlab.__file__ = {info['batchlab']}")
    bad = [] if inside(info["batchlab"], str(ctx.tree)) else [("batchlab", info["batchlab"])]
    for name, (origin, locs) in sorted(info["subpackages"].items()):
        where = [p for p in [origin, *locs] if p and os.path.isabs(p)]
        print(f"  batchlab.{name}: {', '.join(where) or origin}")
        bad += [(f"batchlab.{name}", p) for p in where if not inside(p, str(ctx.tree))]
    if bad:
        sys.exit(f"same_outputs: not the tree's code: {bad}; PYTHONPATH={ctx.env['PYTHONPATH']}")
    ctx.allowed = [str(ctx.tree)] + info["allowed"]
    print(f"  every batchlab package resolves inside {ctx.tree}")


VERBOSE_PATHS = [re.compile(r"^# code object from '(.+)'$"),
                 re.compile(r"^# (/\S+) matches (/\S+)$"),
                 re.compile(r"^# extension module '[^']*' loaded from '(.+)'$")]


# What `python -v` itself writes to stderr: import traces ("# ...", "import ..."), site's
# report ("Processing ...", "Adding directory: ...") and the version banner.
VERBOSE_LINE = re.compile(r'^(#|import |Processing |Adding directory: |Python \d+\.\d+\.\d+ \(|Type "help", )')


def is_verbose_line(line: str) -> bool:
    return VERBOSE_LINE.match(line) is not None


def outside_imports(stderr: str, ctx: Ctx) -> list[str]:
    bad = []
    for line in stderr.splitlines():
        if not line.startswith("# "):
            continue
        for pat in VERBOSE_PATHS:
            m = pat.match(line)
            if m:
                for p in m.groups():
                    if os.path.isabs(p) and not any(inside(p, a) for a in ctx.allowed):
                        bad.append(p)
    return sorted(set(bad))


def run_case(case: Case, work: Path, logs: Path, ctx: Ctx, keep: bool) -> tuple[dict, dict]:
    folder = work / case.name
    folder.mkdir()
    entry: dict = {}
    info = {"seconds": 0.0, "ok": True, "notes": []}
    outside: list[str] = []
    t0 = time.monotonic()
    for step in case.steps:
        if isinstance(step, F):
            step.fn(folder, ctx)
            continue
        args = [a.format(traces=str(Path(ctx.shared) / "traces"),
                         vidur=str(Path(ctx.shared) / "gpu-profiles" / "vidur"),
                         shared=ctx.shared) for a in step.args]
        cmd = [ctx.python, "-v", "-m", "batchlab", *args]
        try:
            r = subprocess.run(cmd, env=ctx.env, cwd=folder, capture_output=True, timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(cmd, "timeout", e.stdout or b"", (e.stderr or b"")
                                            + f"\nsame_outputs: killed after {STEP_TIMEOUT_S} s\n".encode())
        tag = case.name + (f"@{step.label}" if step.label else "")
        (logs / f"{tag}.cmd").write_text(" ".join(cmd) + "\n")
        (logs / f"{tag}.stdout").write_bytes(r.stdout)
        (logs / f"{tag}.stderr").write_bytes(r.stderr)
        stderr = r.stderr.decode("utf-8", "replace")
        outside += outside_imports(stderr, ctx)
        suffix = f"@{step.label}" if step.label else ""
        out = normalise(r.stdout, "stdout", ctx.paths)
        entry["rc" + suffix] = r.returncode
        entry["stdout" + suffix] = sha(out)
        if keep:
            save(work / "_normalised" / case.name / f"_stdout{suffix}", out)
        if step.stderr:
            err = "".join(l for l in stderr.splitlines(keepends=True) if not is_verbose_line(l))
            errn = normalise(err.encode(), "stderr", ctx.paths)
            entry["stderr" + suffix] = sha(errn)
            if keep:
                save(work / "_normalised" / case.name / f"_stderr{suffix}", errn)
        if r.returncode != step.rc:
            info["ok"] = False
            msg = [l for l in stderr.splitlines() if not is_verbose_line(l)][-8:]
            info["notes"].append(f"{tag}: exit {r.returncode}, expected {step.rc}: " + " | ".join(msg))
            break
    info["seconds"] = round(time.monotonic() - t0, 2)
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            rel = p.relative_to(folder).as_posix()
            data = normalise(p.read_bytes(), rel, ctx.paths)
            entry[rel] = sha(data)
            if keep:
                save(work / "_normalised" / case.name / rel, data)
    entry["imports"] = "ok" if not outside else "outside tree: " + ", ".join(outside[:5])
    if outside:
        info["ok"] = False
        info["notes"].append(f"{case.name}: modules loaded from outside the tree: {outside[:5]}")
    return entry, info



def git_commit(tree: Path) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True)
        return r.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "") \
            if r.returncode == 0 else None
    except OSError:
        return None


def measure(args) -> int:
    tree = Path(args.tree).absolute()
    pythonpath = Path(args.pythonpath).absolute() if args.pythonpath else tree
    if not args.pythonpath and not (tree / "batchlab" / "__init__.py").is_file() \
            and (tree / "src" / "batchlab" / "__init__.py").is_file():
        pythonpath = tree / "src"  # a src/ layout after a restructure
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BATCHLAB_"))}
    env.update(PYTHONPATH=str(pythonpath), BATCHLAB_TRACES=str(Path(args.shared) / "traces"),
               TZ="UTC", COLUMNS="100", MPLBACKEND="Agg")
    if args.pure:
        env["BATCHLAB_PURE"] = "1"
    cases = CASES
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in {c.name for c in CASES}]
        if unknown:
            sys.exit(f"same_outputs: unknown case(s) {unknown}; --list lists them")
        cases = [c for c in CASES if c.name in names]
    if args.keep:
        work = Path(args.keep).absolute()
        if work.exists() and any(work.iterdir()):
            sys.exit(f"same_outputs: --keep {work} is not empty")
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="same_outputs."))
    logs = work / "_logs"
    logs.mkdir()
    ctx = Ctx(tree=tree, shared=args.shared, env=env, python=sys.executable)
    ctx.paths = path_patterns({"<WORK>": [work], "<TREE>": [tree]})
    print(f"tree {tree} ({git_commit(tree) or 'not a git checkout'}), PYTHONPATH={pythonpath}, "
          f"{'BATCHLAB_PURE=1' if args.pure else 'as installed (compiled where the tree has it)'}, "
          f"work folder {work}, python {sys.executable}")
    check_imports(ctx)
    manifest: dict = {"_run": {"tree": str(tree), "pythonpath": str(pythonpath),
                               "commit": git_commit(tree), "pure": bool(args.pure),
                               "python": sys.version.split()[0], "shared": args.shared,
                               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "seconds": {}, "failed": []}}
    t0 = time.monotonic()
    failed = []
    for i, case in enumerate(cases, 1):
        entry, info = run_case(case, work, logs, ctx, bool(args.keep))
        manifest[case.name] = entry
        manifest["_run"]["seconds"][case.name] = info["seconds"]
        status = "ok" if info["ok"] else "FAILED"
        files = sum(1 for k in entry if k not in ("imports",) and not k.startswith(("rc", "stdout", "stderr")))
        print(f"[{i:2}/{len(cases)}] {case.name:42} rc {entry.get('rc', '-')!s:>3} {files:3} files "
              f"{info['seconds']:7.1f} s  {status}", flush=True)
        for n in info["notes"]:
            print(f"        {n}")
        if not info["ok"]:
            failed.append(case.name)
    total = time.monotonic() - t0
    manifest["_run"]["total_seconds"] = round(total, 1)
    manifest["_run"]["failed"] = failed
    Path(args.out).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    print(f"{len(cases)} cases in {total:.0f} s; manifest {args.out}"
          + (f"; FAILED: {', '.join(failed)}" if failed else "; every exit code as expected"))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def compare(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    diffs = 0
    for name in sorted(set(a) | set(b)):
        if name.startswith("_"):
            continue
        if name not in a or name not in b:
            print(f"{name}: only in {a_path if name in a else b_path}")
            diffs += 1
            continue
        ea, eb = a[name], b[name]
        for key in sorted(set(ea) | set(eb)):
            va, vb = ea.get(key, "<missing>"), eb.get(key, "<missing>")
            if va != vb:
                short = lambda v: v[:12] if isinstance(v, str) and len(v) == 64 else v  # noqa: E731
                print(f"{name}: {key}: {short(va)} -> {short(vb)}")
                diffs += 1
    n = len([k for k in set(a) | set(b) if not k.startswith("_")])
    print(f"{diffs} difference(s) over {n} command(s)" if diffs else f"identical: {n} command(s)")
    return 1 if diffs else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", help="the checkout whose batchlab runs (PYTHONPATH=DIR)")
    ap.add_argument("--out", help="the manifest to write")
    ap.add_argument("--pythonpath", metavar="DIR",
                    help="the folder holding the batchlab package, if not DIR (default: DIR, or DIR/src "
                         "where only that has batchlab/__init__.py); it must lie inside DIR")
    ap.add_argument("--pure", action="store_true", help="BATCHLAB_PURE=1 (the pure-Python hot path)")
    ap.add_argument("--keep", metavar="WORKDIR", help="keep the work folder here (must be empty)")
    ap.add_argument("--only", metavar="NAME,...", help="run only these cases")
    ap.add_argument("--shared", default=DEFAULT_SHARED, help=f"the shared data (default {DEFAULT_SHARED})")
    ap.add_argument("--list", action="store_true", help="list the cases and their commands")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.list:
        for c in CASES:
            print(c.name + (f"  ({c.why})" if c.why else ""))
            for s in c.steps:
                print("    " + (("batchlab " + " ".join(s.args) + (f"   [exit {s.rc}]" if s.rc else ""))
                                if isinstance(s, B) else f"(writes input: {s.fn.__name__})"))
        return 0
    if not args.tree or not args.out:
        ap.error("--tree and --out are required (or --compare A B, or --list)")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
