"""The scratch databases of one schedule: made fresh, dropped afterwards whatever happened.

A SQLite source is a folder (the temporary one by default): each schedule gets files in a new
temporary folder inside it, removed at the end. A ``postgresql://`` source names a server:
each schedule gets databases named ``ackledger_verify_<random>``, dropped at the end, also
after an error or Ctrl-C.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...store import is_database_url, scratch_database

PREFIX = "ackledger_verify_"


@dataclass(frozen=True)
class Databases:
    source: str
    #: The inbox of the sink verify runs itself (None when the user's sender is used).
    sink: str | None
    #: Where the processes' logs go (kept when a schedule fails).
    logs: Path


@contextmanager
def scratch(source: str | None, own_sink: bool) -> Iterator[Databases]:
    with ExitStack() as stack:
        folder = Path(tempfile.mkdtemp(prefix="ackledger-verify-", dir=_folder(source)))
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        if is_database_url(source):
            made = (scratch_database(source, PREFIX) for _ in range(2 if own_sink else 1))
            names = [stack.enter_context(database) for database in made]
            yield Databases(names[0], names[1] if own_sink else None, folder)
        else:
            sink = str(folder / "sink.db") if own_sink else None
            yield Databases(str(folder / "source.db"), sink, folder)


def _folder(source: str | None) -> str | None:
    return None if source is None or is_database_url(source) else source
