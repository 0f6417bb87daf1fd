"""What `batchlab serve --out DIR` leaves if it is killed, and what it does with a DIR an
earlier run used.

A served run cannot be made again, so serve never writes over one: a DIR holding a run's
results (config.json, meta.json) or a killed serve's journal is refused before the model
loads, naming what is there and the way forward (another --out). While it serves, each
request that ends is appended to DIR/POLICY/requests.journal.csv (core/run_journal.py);
a clean stop writes the run folder and removes the journal, a kill leaves it."""
from __future__ import annotations

import logging
from pathlib import Path

from batchlab.core.atomic import WriteError
from batchlab.core.request import Sequence
from batchlab.core.run_folder import META
from batchlab.core.run_journal import JOURNAL, RowJournal, read_journal
from batchlab.experiments.errors import UserError

log = logging.getLogger(__name__)


def refuse_used_out(out: str | Path) -> None:
    """A one-line UserError if --out holds an earlier run's results or a killed serve's rows."""
    d = Path(out)
    if not d.is_dir():
        return
    for path in sorted(d.glob(f"*/{JOURNAL}")):
        try:
            j = read_journal(path)
        except ValueError as e:
            raise UserError(f"--out {d}: holds a request journal that cannot be read ({e}); "
                            f"serve into a new --out") from None
        torn = "; its torn last line was dropped" if j.torn else ""
        raise UserError(f"--out {d}: a batchlab serve killed before it stopped left {len(j.rows)} request rows "
                        f"({j.count('finished')} finished) in {path}{torn}; serve into a new --out "
                        f"(that folder keeps them), or delete it first")
    for name in (META, "config.json"):
        if (d / name).is_file():
            raise UserError(f"--out {d}: holds an earlier run's results ({d / name}); a served run cannot "
                            f"be made again, so serve does not write over it: serve into a new --out, "
                            f"or delete it first")


class ServeJournal:
    """The journal of one serve run: rows appended as requests end (on the engine thread).
    A write that fails (a full disk) is said once; serving goes on, the rows stay in memory
    for the run folder written at a clean stop."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / JOURNAL
        self._journal: RowJournal | None = RowJournal(self.path)

    def append(self, seqs: list[Sequence]) -> None:
        if self._journal is None:
            return
        try:
            self._journal.append(seqs)
        except WriteError as e:
            log.warning("request journal stopped: %s", e)
            self._journal.close()
            self._journal = None

    def close(self) -> None:
        """After the run folder is written: the journal is no longer needed."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self.path.unlink(missing_ok=True)
