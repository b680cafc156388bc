"""Key spaces: the SQL behind the idempotency core (see ``store.claims``).

A claim inserts the key with its fingerprint unless the key exists, and returns the new row's
reference; it is one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` so that it is correct both
under SQLite's single writer and under PostgreSQL's READ COMMITTED (where a concurrent claim of
the same key waits for the first to commit, then does nothing).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .executor import Executor, Params


@dataclass(frozen=True)
class KeySpace:
    name: str
    #: params: the key columns, the fingerprint, then the rest of the row; returns the reference.
    claim_sql: str
    #: params: the key columns; returns (fingerprint, reference).
    find_sql: str
    #: How many leading columns of a claim row are the key.
    key_width: int = 1
    #: For a space whose key is also what the claim returns: claim many rows at once (see
    #: ``claim_inbox_rows``), and find many keys' fingerprints. Keys are tuples.
    claim_rows: Callable[[Executor, Sequence[Params]], set[Any]] | None = None
    find_keys: Callable[[Executor, Sequence[Any]], dict[Any, str]] | None = None

    def claim(self, tx: Executor, key: Params, fingerprint: str, rest: Params) -> Any:
        return tx.scalar(self.claim_sql, (*key, fingerprint, *rest))

    def find(self, tx: Executor, key: Params) -> tuple[str, Any] | None:
        row = tx.one(self.find_sql, key)
        return None if row is None else (str(row[0]), row[1])


#: The columns an outbox claim writes, in the order of its parameters.
OUTBOX_COLUMNS = (
    "id, fingerprint, source, type, subject, partitionkey, partition_key, data, event, created_at"
)
#: What follows the claim's row: the key is the event's id, the reference its seq.
OUTBOX_ON_CONFLICT = "ON CONFLICT (id) DO NOTHING RETURNING seq"

OUTBOX = KeySpace(
    name="outbox",
    claim_sql=(
        f"INSERT INTO ackledger_outbox ({OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        + OUTBOX_ON_CONFLICT
    ),
    find_sql="SELECT fingerprint, seq FROM ackledger_outbox WHERE id = ?",
)

# The inbox's key is an event's identity, (source, id), in one inbox's name.
INBOX_INSERT = (
    "INSERT INTO ackledger_inbox (name, source, id, fingerprint, type, first_received_at, "
    "last_received_at, "
    "arrival, last_arrival) VALUES "
)
_INBOX_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INBOX_DO_NOTHING = " ON CONFLICT (id, source, name) DO NOTHING"
INBOX_ON_CONFLICT = _INBOX_DO_NOTHING + " RETURNING name, source, id"

#: Rows per statement of ``claim_inbox_rows`` and keys per ``find_inbox_keys``: at most 9 * 64
#: parameters (far below SQLite's and PostgreSQL's limits), and at most 64 statement texts of
#: each, which stay in the drivers' statement caches.
MANY = 64


@functools.lru_cache(maxsize=2 * MANY)
def inbox_claim_rows_sql(count: int, returning: bool = True) -> str:
    """The multi-row claim of ``count`` rows; without ``returning``, told by its row count."""
    end = INBOX_ON_CONFLICT if returning else _INBOX_DO_NOTHING
    return INBOX_INSERT + ", ".join([_INBOX_ROW] * count) + end


@functools.lru_cache(maxsize=MANY)
def _inbox_find_keys_sql(count: int) -> str:
    # One source and a list of ids: both databases read the primary key's index for it (a
    # row-value IN over VALUES made SQLite scan the whole table).
    marks = ", ".join("?" * count)
    return (
        "SELECT name, source, id, fingerprint FROM ackledger_inbox "
        f"WHERE name = ? AND source = ? AND id IN ({marks})"
    )


#: An inbox's key: its name, the event's source and id.
Identity = tuple[str, str, str]


def claim_inbox_rows(tx: Executor, rows: Sequence[Params]) -> set[Identity]:
    """``INBOX.claim`` of many rows (each: name, source, id, the fingerprint, the rest) in a
    few statements; returns the keys that were claimed. They must be distinct: which of two
    rows with one identity a multi-row insert keeps is not something to depend on.

    It is the same ``INSERT ... ON CONFLICT DO NOTHING`` as the one-row claim, so it is exactly
    as safe under concurrency; it only saves a statement per event.
    """
    claimed: set[Identity] = set()
    for start in range(0, len(rows), MANY):
        chunk = rows[start : start + MANY]
        params = tuple(itertools.chain.from_iterable(chunk))
        found = tx.execute(inbox_claim_rows_sql(len(chunk)), params)
        claimed.update([(str(name), str(source), str(key)) for name, source, key in found])
    return claimed


def find_inbox_keys(tx: Executor, keys: Sequence[Identity]) -> dict[Identity, str]:
    """``INBOX.find`` of many keys: the stored fingerprint of each that is there."""
    by_source: dict[tuple[str, str], list[str]] = {}
    for name, source, event_id in keys:
        by_source.setdefault((name, source), []).append(event_id)
    found: dict[Identity, str] = {}
    for (name, source), ids in by_source.items():
        for start in range(0, len(ids), MANY):
            chunk = ids[start : start + MANY]
            rows = tx.execute(_inbox_find_keys_sql(len(chunk)), (name, source, *chunk))
            for row_name, row_source, event_id, stored in rows:
                found[(str(row_name), str(row_source), str(event_id))] = str(stored)
    return found


INBOX = KeySpace(
    name="inbox",
    claim_sql=INBOX_INSERT + _INBOX_ROW + INBOX_ON_CONFLICT,
    find_sql=(
        "SELECT fingerprint, id FROM ackledger_inbox WHERE name = ? AND source = ? AND id = ?"
    ),
    key_width=3,
    claim_rows=claim_inbox_rows,
    find_keys=find_inbox_keys,
)

# The ledger's business key (case_id, work_id). Only idempotent deliveries are in the partial
# unique index, so the conflict target names its predicate; control-mode deliveries never
# pass through a claim (see ``ledger.INSERT_CONTROL``).
DELIVERIES = KeySpace(
    name="deliveries",
    claim_sql=(
        "INSERT INTO ackledger_deliveries (case_id, work_id, fingerprint, mode, pod_uid, "
        "created_at) "
        "VALUES (?, ?, ?, 'idempotent', ?, ?) "
        "ON CONFLICT (case_id, work_id) WHERE mode = 'idempotent' DO NOTHING "
        "RETURNING delivery_no"
    ),
    find_sql=(
        "SELECT fingerprint, delivery_no FROM ackledger_deliveries "
        "WHERE case_id = ? AND work_id = ? AND mode = 'idempotent'"
    ),
)
