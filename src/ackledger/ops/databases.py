"""The databases that reading and operating commands are pointed at.

They must already exist and hold ackledger's schema: a typo must not create an empty
database, nor may our schema be added to another program's SQLite file.
"""

from __future__ import annotations

import os

from ..store.sqlite import foreign_file


def is_url(target: str) -> bool:
    return "://" in target


def existing_database(target: str, flag: str) -> str:
    """``target`` if it is a URL or ackledger's SQLite file, else ValueError naming ``--flag``."""
    if is_url(target):
        return target
    if not os.path.isfile(target):
        raise ValueError(f"--{flag}: no database at {target!r}")
    problem = foreign_file(target)
    if problem is not None:
        raise ValueError(f"--{flag}: {problem}")
    return target
