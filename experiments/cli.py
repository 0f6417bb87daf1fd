"""The `batchlab` command: one console script, subcommands sharing options."""
from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys

from batchlab.experiments.commands import COMMANDS
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import FLAGS


# Writes that fail for the disk's sake (full, quota, read-only): one line, not a traceback.
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="batchlab", description="LLM serving: simulate, run, calibrate, validate.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:  # each module is light: its library loads when it runs
        importlib.import_module(f"batchlab.experiments.commands.{name}").add_parser(sub)
    for command in sub.choices.values():  # so that a field's error can name its option
        for action in command._actions:
            if action.option_strings and action.dest not in FLAGS:
                FLAGS[action.dest] = action.option_strings[0]
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
