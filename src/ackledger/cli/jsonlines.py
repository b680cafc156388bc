"""``accept --jsonl`` and ``publish --jsonl``: many inputs, one JSON value a line, in one
process, each written in its own transaction.

Each line is parsed and checked before it is written; the database is opened at the first
good line, so a file whose first line is bad leaves nothing behind. A bad line stops the run
with exit 2 naming its number; the lines before it stay committed and their seqs printed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import IO, Any

from ..errors import AckledgerError
from ..source.outbox import Outbox


def _lines(stream: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, start=1):
        if line.strip():  # blank lines (a trailing newline, spacing) are not inputs
            yield number, line


def _open_input(path: str) -> IO[str]:
    from . import UsageError

    if path == "-":
        return sys.stdin
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--jsonl: cannot read {path!r}: {exc.strerror or exc}") from None


def write_lines(
    path: str,
    check: Callable[[object], object],
    open_outbox: Callable[[], Outbox],
    write: Callable[[Outbox, Any], int],
) -> int:
    """Parse each line of ``path`` (``-``: stdin), ``check`` it, ``write`` what ``check``
    returned into the outbox (opened once, at the first good line), print each seq; returns
    how many were written. Bad input raises UsageError naming the line."""
    from . import UsageError
    from .arguments import json_arg

    written = 0
    with ExitStack() as stack:
        stream = _open_input(path)
        if stream is not sys.stdin:
            stack.enter_context(stream)
        outbox: Outbox | None = None
        number = 0
        try:
            for at, line in _lines(stream):
                number = at  # kept for the message when the next read or check fails
                checked = check(json_arg(line, "line"))
                if outbox is None:
                    outbox = stack.enter_context(open_outbox())
                print(write(outbox, checked), flush=True)
                written += 1
        except UnicodeDecodeError:
            raise UsageError(f"after line {number}: not UTF-8 text{_before(written)}") from None
        except (UsageError, AckledgerError, ValueError, TypeError) as exc:
            text = str(exc).removeprefix("line: ")
            raise UsageError(f"line {number}: {text}{_before(written)}") from None
    print(f"wrote {written} event(s)", file=sys.stderr)
    return written


def _before(written: int) -> str:
    if not written:
        return "; nothing was written"
    return f"; the {written} event(s) before it were written (their seqs are printed)"
