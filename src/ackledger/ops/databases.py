"""The databases that reading and operating commands are pointed at.

They must already exist and hold ackledger's schema: a typo must not create an empty
database, nor may our schema be added to another program's SQLite file.
"""

from __future__ import annotations

from ..store import not_existing


def is_url(target: str) -> bool:
    return "://" in target


def existing_database(target: str, flag: str) -> str:
    """``target`` if it is a URL or an existing ackledger database, else ValueError naming
    ``--flag``."""
    problem = None if is_url(target) else not_existing(target)
    if problem is not None:
        raise ValueError(f"--{flag}: {problem}")
    return target
