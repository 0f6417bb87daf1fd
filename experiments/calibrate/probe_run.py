"""What makes `calibrate --endpoint --out DIR` resumable after a kill: DIR/probes.json,
written (atomically) before the first probe, holds everything the probes' requests
depend on (the prompt seed, the longest prompt, the seats they were sized for, the
server and model). A probe is finished once its result.json exists (written last,
atomically). Run again into DIR, the command sends only the probes not finished, with
the same seeds, provided nothing that shapes them has changed; otherwise it refuses,
naming the difference, and says how to fit the finished ones with --from-replay."""
from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from batchlab.calibration.from_replay.probes import HELD, design
from batchlab.core import atomic
from batchlab.core.run_folder import to_json
from batchlab.experiments.errors import UserError

STATE = "probes.json"
DONE = "result.json"  # a probe's last file


@dataclass(frozen=True)
class ProbeRun:
    probe_seed: int
    probe_max_prompt: int
    seats: int
    endpoint: str
    model: str

    def save(self, directory: Path) -> None:
        atomic.write_text(directory / STATE, to_json(asdict(self)) + "\n")

    def differences(self, other: ProbeRun) -> list[str]:
        return [f"{f.name} {getattr(self, f.name)!r} (now {getattr(other, f.name)!r})"
                for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


def finished(directory: Path, names: list[str]) -> list[str]:
    """The probes (of `names`, in order) whose result.json was written."""
    return [n for n in names if (directory / n / DONE).is_file()]


FIT_OPTIONS = ("model", "profile", "hardware", "policy", "max_num_seqs", "max_num_batched_tokens",
               "num_kv_blocks", "block_size", "server_run")


def fit_command(directory: Path, done: list[str] | None, endpoint: str, args: argparse.Namespace) -> str:
    """The command that fits the finished probes (None: all of DIR's, as --endpoint splits
    them) without sending any, with the options given to this one that the fit reads."""
    flags = [f"--{o.replace('_', '-')} {shlex.quote(str(getattr(args, o)))}" for o in FIT_OPTIONS
             if getattr(args, o, None) is not None]
    if getattr(args, "prefix_caching", None) is not None:
        flags.append("--prefix-caching" if args.prefix_caching else "--no-prefix-caching")
    paths = shlex.quote(str(directory)) if done is None else " ".join(shlex.quote(str(directory / n)) for n in done)
    return " ".join(["batchlab calibrate --from-replay", paths, "--metrics", shlex.quote(endpoint), *flags,
                     "--out", shlex.quote(str(directory / "profile.json"))])


def probe_folders(paths: list[str]) -> tuple[list[str], set[str]]:
    """--from-replay's paths with each `calibrate --endpoint --out DIR` (it holds STATE) in
    place of its finished probes, in the order sent; and those of them judged, not fitted
    (HELD, as --endpoint splits them)."""
    out, judged = [], set()
    for p in paths:
        d = Path(p)
        if not (d / STATE).is_file():
            out.append(p)
            continue
        try:
            data = json.loads((d / STATE).read_text())
            names = [n for n, _ in design(int(data["probe_max_prompt"]), int(data["seats"]))]
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise UserError(f"{d / STATE}: not as calibrate --endpoint writes it ({e})") from None
        done = [str(d / n) for n in finished(d, names)]
        if not done:
            raise UserError(f"{d}: no finished probe (no */{DONE}); expected a calibrate --endpoint --out")
        out += done
        judged |= {str(d / n) for n in HELD}
    return out, judged


def earlier_run(directory: Path, args: argparse.Namespace) -> ProbeRun | None:
    """The probes.json of an earlier run into `directory`; None for a new or empty one. A
    one-line UserError for a non-empty folder that holds none (with the command that fits
    any finished probes it holds, as a run from before probes.json left them), or one that
    cannot be read."""
    if not directory.exists():
        return None
    if not directory.is_dir():
        raise UserError(f"--out {directory}: is a file; expected a directory for the probes")
    if not any(directory.iterdir()):
        return None
    path = directory / STATE
    if not path.is_file():
        done = sorted(p.parent.name for p in directory.glob(f"*/{DONE}"))
        fit = fit_command(directory, done, args.endpoint, args)
        how = f"; to fit the {len(done)} finished probes it holds: {fit}" if done else ""
        raise UserError(f"--out {directory}: not empty, and no {STATE} says how its probes were sent, so they "
                        f"cannot be resumed: give a new or empty --out{how}")
    try:
        data = json.loads(path.read_text())
        return ProbeRun(**{f.name: _typed(data, f.name, f.type) for f in fields(ProbeRun)})
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"{path}: not as calibrate --endpoint writes it ({e}); give a new --out") from None


def _typed(data, name: str, kind: str):
    value = data[name] if isinstance(data, dict) and name in data else None
    want = int if kind == "int" else str
    if type(value) is not want:
        raise ValueError(f"{name} is {value!r}; expected {'an integer' if want is int else 'text'}")
    return value


def resume_or_refuse(directory: Path, before: ProbeRun, now: ProbeRun, names: list[str],
                     args: argparse.Namespace) -> list[str]:
    """The probes already finished, if `now` may go on where `before` stopped; else a
    one-line UserError naming what differs and the way forward."""
    done = finished(directory, names)
    diff = before.differences(now)
    if diff:
        fit = fit_command(directory, done, before.endpoint, args)
        how = f"; to fit the {len(done)} finished probes as they are: {fit}" if done else ""
        raise UserError(f"--out {directory}: holds probes sent with {', '.join(diff)}; resuming would mix two "
                        f"designs: give a new --out{how}")
    return done
