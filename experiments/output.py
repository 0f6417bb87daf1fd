"""A command's --out directory: checked before any work, made, cleared of an earlier run's
results, config.json written; the runs go in as core/run_folder.py lays them out (RunSet:
per policy a requests.csv and a steps.csv, one meta.json and one summary.json keyed by
policy, rewritten after each policy so an interrupt keeps what finished)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TYPE_CHECKING

from batchlab.core.result import RunResult
# The JSON and table writers are the run folder's; commands import them from here too.
from batchlab.core.run_folder import TABLES, RunSet, to_json, with_latencies, write_table  # noqa: F401
from batchlab.experiments.errors import UserError
from batchlab.core import atomic

if TYPE_CHECKING:  # the profile models: simulate loads no calibration
    from batchlab.calibration.fit.calibrated import Calibrated


def check_out_dir(out_dir: str | Path) -> None:
    """--out names a directory, or nothing yet: checked before any work is done."""
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise UserError(f"--out {out_dir}: is a file; expected a directory (created if missing)")


def make_out_dir(out_dir: str | Path, config: dict[str, Any], clear: bool = True) -> Path:
    """Create `out_dir`, clear an earlier run's results from it (clear) and write
    config.json; a one-line error if it cannot be written."""
    check_out_dir(out_dir)
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        if clear:
            remove_earlier_results(d)
        atomic.write_text(d / "config.json", to_json(config) + "\n")
    except OSError as e:
        raise UserError(f"--out {out_dir}: cannot write there: {e.strerror} ({e.filename})") from None
    return d


class ResultWriter:
    def __init__(self, out_dir: str | Path, config: dict[str, Any]) -> None:
        """Done before anything is simulated or served (see make_out_dir)."""
        self.dir = make_out_dir(out_dir, config)
        self._runs = RunSet(self.dir)

    def add(self, name: str, result: RunResult, summary: dict[str, float]) -> None:
        """The run's tables in DIR/NAME, its meta and summary in DIR's keyed files."""
        self._runs.add(name, result, summary)


def remove_earlier_results(out: Path) -> None:
    """A reused --out directory must not mix two runs (a `chunked/` left from an earlier
    run beside a summary listing only `static`). If its meta.json is one batchlab wrote
    (a run's meta per policy, each saying its "world"), the policies it lists lose their
    tables (and their folders, if that empties them), and meta.json and summary.json go;
    anything else stays."""
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):  # absent, or not JSON: not ours
        return
    if not (isinstance(meta, dict) and meta
            and all(isinstance(m, dict) and m.get("world") in ("sim", "real") for m in meta.values())):
        return  # someone else's meta.json
    # Only plain folder names: never follow a key such as "../x" out of `out`.
    policies = {k for k in meta if k not in ("", ".", "..") and Path(k).name == k}
    for name in ("meta.json", "summary.json"):
        (out / name).unlink(missing_ok=True)
    for policy in sorted(policies):
        folder = out / policy
        if folder.is_symlink() or not folder.is_dir():
            continue  # we only ever write real folders
        for table in TABLES:
            (folder / table).unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass  # absent, or holds files of someone else's: left as it is


def profile_out_path(args: argparse.Namespace, default: str | None = None) -> Path:
    """Where `calibrate` writes its profile: --out, or `default` (MODEL-DEVICE.json); a
    one-line error where it cannot go."""
    if args.out:
        out = Path(args.out)
    else:
        out = Path(default or f"{Path(args.model.rstrip('/')).name}-{args.device.replace(':', '')}.json")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: directory {out.parent} does not exist")
    if out.is_dir():
        raise UserError(f"--out {out}: is a directory; give a file name")
    return out


def print_calibrated(args: argparse.Namespace, calibrated: Calibrated, out: Path) -> None:
    """Any calibration's report (calibration/fit/calibrated.py), as --format asks."""
    print(calibrated.json(out) if args.format == "json" else calibrated.text(out))


def save_fitted_profile(args: argparse.Namespace, out: Path | None, profile, suffix: str) -> Path:
    """Save a profile fitted on runs or replays at `out` (checked beforehand with
    profile_out_path), or, without --out, at MODEL-SUFFIX.json; returns where."""
    if out is None:
        model = profile.model_source or profile.model.name
        out = profile_out_path(args, f"{Path(model.rstrip('/')).name}-{suffix}.json")
    profile.save(out)
    return out
