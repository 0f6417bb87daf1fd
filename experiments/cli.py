"""The `batchlab` command: one console script, subcommands sharing options."""
from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from collections.abc import Iterable

from batchlab.experiments.commands import COMMANDS
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import note_flags


# Writes that fail for the disk's sake (full, quota, read-only): one line, not a traceback.
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(commands: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    """The `batchlab` parser: every command listed with its help line, and the options of
    `commands` (by default all), whose modules are imported; the others' are not."""
    parser = _Parser(prog="batchlab", description="LLM serving: simulate, run, calibrate, validate.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_line in COMMANDS.items():  # in this order, as `batchlab --help` lists them
        if name in commands:
            importlib.import_module(f"batchlab.experiments.commands.{name}").add_parser(sub)
        else:  # listed, never parsed: main() builds the command it runs
            sub.add_parser(name, help=help_line)
    for command in sub.choices.values():  # so that a field's error can name its option
        note_flags(command)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command `argv` runs: its first argument that is not an option (`batchlab` takes
    no option but --help before it); None for none, or for a name that is not a command."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = command_of(argv)  # only its module loads: `batchlab --help` loads none
    args = build_parser(() if command is None else (command,)).parse_args(argv)
    logging.basicConfig(format="batchlab: warning: %(message)s", level=logging.WARNING)
    try:
        return args.func(args)
    except (UserError, ValueError) as e:
        # ValueError: bad values found below the CLI (a workload row, a spec); its
        # message names what and where.
        print(f"batchlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("batchlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `batchlab ... | head`: the reader left; not an error
        # Point stdout at /dev/null so the flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if e.errno not in _DISK_ERRORS:  # a bug or the system's: its traceback helps
            raise
        # A write outside core/atomic.py's (whose WriteError is a ValueError above).
        where = f"{e.filename}: " if e.filename else ""
        print(f"batchlab: error: cannot write {where}{os.strerror(e.errno)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
