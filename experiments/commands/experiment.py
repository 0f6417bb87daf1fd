"""`batchlab experiment NAME | all | --list`: reproducible studies of the published claims
about batching. Each writes report.md (its table, the claim and the measured figure), PNG
plots and CSV tables into --out (default ./out/experiments/NAME)."""
from __future__ import annotations

import argparse
from pathlib import Path

from batchlab.experiments.errors import UserError
from batchlab.experiments.output import check_out_dir, to_json
from batchlab.experiments.studies import STUDIES, get_study
from batchlab.experiments.validation import profile_source

DEFAULT_OUT = Path("out/experiments")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("experiment", help="reproduce a claim about batching: report + plots",
                              description=__doc__)
    p.add_argument("name", nargs="?", metavar="NAME", help="a study (see --list), or 'all'")
    p.add_argument("--list", action="store_true", help="list the studies and exit")
    p.add_argument("--out", metavar="DIR", help="output folder (default ./out/experiments/NAME; "
                                                "with 'all', one sub-folder per study)")
    p.add_argument("--small", action="store_true", help="reduced size: seconds, same qualitative result")
    p.add_argument("--backend", action="store_true",
                   help="also run the real-backend variant where a study has one (CPU torch, minutes)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="json: the study's measured figures on stdout")
    p.add_argument("--profile", metavar="FILE|NAME",
                   help="studies that calibrate (fidelity): use this profile instead")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.format)
    if not args.name:
        raise UserError("experiment: give a study NAME, 'all', or --list")
    names = ([n for n, s in STUDIES.items() if args.backend or not s.real_only]
             if args.name == "all" else [_lookup(args.name)])
    if args.profile is not None:
        takes = [n for n in names if STUDIES[n].profile]
        if args.name == "all" or not takes:
            with_profile = ", ".join(s.name for s in STUDIES.values() if s.profile)
            raise UserError(f"--profile applies to one study that calibrates ({with_profile}), "
                            f"not to {args.name}")
        profile_source.load(args.profile)  # a bad profile: an error before anything runs
    if args.backend:
        for n in names if args.name != "all" else []:
            if not STUDIES[n].backend:
                with_backend = ", ".join(s.name for s in STUDIES.values() if s.backend)
                raise UserError(f"experiment {n} has no --backend variant (studies with one: {with_backend})")
    for n in names:  # before any study runs: an --out that is a file is one line
        if args.out is not None:
            check_out_dir(args.out)
        check_out_dir(_out_dir(args.out, n, several=len(names) > 1))
    results = {}
    for n in names:
        study = STUDIES[n]
        out = _out_dir(args.out, n, several=len(names) > 1)
        try:
            extra = {"profile": args.profile} if study.profile else {}
            results[n] = study.run(out, "small" if args.small else "full",
                                   backend=args.backend and study.backend, **extra)
        except ImportError as e:  # the backend variant needs torch + transformers
            raise UserError(f"experiment {n} --backend needs the backend extras ({e.name or e}); "
                            f"install them with: pip install -e '.[backend]'") from None
        if args.format == "table":
            print(f"{n}: {out / 'report.md'} ({results[n]['elapsed_s']:.1f} s)")
    if args.format == "json":
        print(to_json(results if len(names) > 1 else results[names[0]]))
    return 0


def _lookup(name: str) -> str:
    try:
        return get_study(name).name
    except ValueError as e:
        raise UserError(str(e)) from None


def _out_dir(out: str | None, name: str, several: bool) -> Path:
    if out is None:
        return DEFAULT_OUT / name
    return Path(out) / name if several else Path(out)


def _list(fmt: str) -> int:
    if fmt == "json":
        print(to_json([{"name": s.name, "description": s.description, "backend": s.backend}
                       for s in STUDIES.values()]))
        return 0
    width = max(len(n) for n in STUDIES)
    for s in STUDIES.values():
        flag = " [--backend]" if s.backend else ""
        print(f"{s.name.ljust(width)}  {s.description}{flag}")
    return 0
