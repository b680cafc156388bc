"""Key spaces: the SQL behind the idempotency core (see ``ackledger.idempotency``).

A claim inserts the key with its fingerprint unless the key exists, and returns the new row's
reference; it is one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` so that it is correct both
under SQLite's single writer and under PostgreSQL's READ COMMITTED (where a concurrent claim of
the same key waits for the first to commit, then does nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Params, Tx


@dataclass(frozen=True)
class KeySpace:
    name: str
    #: params: the key columns, the fingerprint, then the rest of the row; returns the reference.
    claim_sql: str
    #: params: the key columns; returns (fingerprint, reference).
    find_sql: str

    def claim(self, tx: Tx, key: Params, fingerprint: str, rest: Params) -> Any:
        return tx.scalar(self.claim_sql, (*key, fingerprint, *rest))

    def find(self, tx: Tx, key: Params) -> tuple[str, Any] | None:
        row = tx.one(self.find_sql, key)
        return None if row is None else (str(row[0]), row[1])


OUTBOX = KeySpace(
    name="outbox",
    claim_sql=(
        "INSERT INTO outbox (id, fingerprint, sku, qty, partition_key, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING seq"
    ),
    find_sql="SELECT fingerprint, seq FROM outbox WHERE id = ?",
)

INBOX = KeySpace(
    name="inbox",
    claim_sql=(
        "INSERT INTO inbox (id, fingerprint, sku, qty, first_received_at, last_received_at, "
        "arrival, last_arrival) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING RETURNING id"
    ),
    find_sql="SELECT fingerprint, id FROM inbox WHERE id = ?",
)

# The ledger's business key (case_id, work_id). Only idempotent deliveries are in the partial
# unique index, so the conflict target names its predicate; control-mode deliveries never
# pass through a claim (see ``ledger_sql.insert_control_delivery``).
DELIVERIES = KeySpace(
    name="deliveries",
    claim_sql=(
        "INSERT INTO deliveries (case_id, work_id, fingerprint, mode, pod_uid, created_at) "
        "VALUES (?, ?, ?, 'idempotent', ?, ?) "
        "ON CONFLICT (case_id, work_id) WHERE mode = 'idempotent' DO NOTHING "
        "RETURNING delivery_no"
    ),
    find_sql=(
        "SELECT fingerprint, delivery_no FROM deliveries "
        "WHERE case_id = ? AND work_id = ? AND mode = 'idempotent'"
    ),
)
