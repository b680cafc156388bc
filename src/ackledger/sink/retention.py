"""Inbox retention's two halves: the purge's walk of the inbox in windows of its key, and the
oldest kept receipt that the purge records as it walks (read by ``Inbox.retention``, the
sink's ``/metrics`` and ``status``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .._core.duration import check_age
from ..store import Backend
from ..store.inbox import BEFORE_ALL, PURGED

#: Receipts are kept this long by default (``Inbox.purge``, ``ackledger inbox purge``).
DEFAULT_RETENTION_SECONDS = 30 * 86400.0
#: A shorter horizon needs ``force``: a receipt purged while its event can still be re-sent
#: turns that re-send into a second apply.
MIN_RETENTION_SECONDS = 3600.0
#: Keys per window of ``purge()``'s walk, and the most receipts one of its write transactions
#: deletes: short enough that a sink's writes wait behind it for milliseconds, long enough that
#: a purge of millions of receipts is not dominated by its commits.
PURGE_CHUNK = 1000

#: A span of windows whose old receipts are deleted together reaches at most this many windows:
#: a DELETE then scans at most ``SPAN_WINDOWS * window`` keys and deletes at most ``window``.
SPAN_WINDOWS = 10


def purge(
    backend: Backend, name: str, older_than_seconds: object, chunk: object, force: object
) -> int:
    """``Inbox.purge``: its arguments checked (ValueError naming the one that is wrong, and
    nothing deleted), then ``purge_windows`` from now less the age."""
    age = check_age(older_than_seconds, "older_than_seconds")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= 100_000:
        raise ValueError(f"chunk: must be a whole number from 1 to 100000, got {chunk!r}")
    if not isinstance(force, bool):
        raise ValueError(f"force: must be True or False, got {type(force).__name__}")
    if age < MIN_RETENTION_SECONDS and not force:
        raise ValueError(
            f"older_than_seconds: {age:g} s is under the 1 h floor; a receipt purged while "
            "its event can still be re-sent turns the re-send into a second apply "
            "(pass force=True to go below it)"
        )
    return purge_windows(backend, name, time.time() - age, chunk)


def report(backend: Backend, oldest: OldestReceipt) -> dict[str, Any]:
    """``Inbox.retention``: receipts purged over the database's life (by every inbox name),
    and the age of the oldest kept of ``oldest``'s inbox (None for an empty inbox)."""
    with backend.read() as tx:
        purged = tx.counters_read(PURGED).get("", 0)
    found = oldest.read(backend)
    age = None if found is None else max(0.0, time.time() - found)
    return {"purged": purged, "oldest_receipt_age_s": age}


def purge_windows(backend: Backend, name: str, cutoff: float, window: int) -> int:
    """Delete every receipt of the inbox ``name`` first received before ``cutoff``, walking
    the key ``window`` keys
    at a time in one pass; record the oldest receipt kept; return how many were deleted.

    Each window is read without a write lock. Consecutive windows are deleted from together,
    in one short write transaction, while they hold at most ``window`` old receipts and span
    at most ``SPAN_WINDOWS`` windows: a write transaction deletes at most ``window`` receipts
    and scans a bounded range, and a purge that finds few old receipts commits a tenth as
    often. A service writing the same database waits for one such
    transaction at most, never for the whole purge, and what is done stays done if the purge
    stops (a crash leaves the last purge's record, an older receipt than any kept: the gauge
    then says too old, never too young, until the next purge). The record is written last.
    """
    span = _Span(backend, name, cutoff)
    after = BEFORE_ALL
    kept: float | None = None
    while True:
        with backend.read() as tx:
            found = tx.inbox_purge_window(name, after, window, cutoff)
        if span.old + found.old > window or span.windows == SPAN_WINDOWS:
            span.delete_to(after)
        span.add(found.old)
        if found.kept_oldest is not None and (kept is None or found.kept_oldest < kept):
            kept = found.kept_oldest
        if found.last is None:
            span.delete_to(None)
            break
        after = found.last
    with backend.write() as tx:
        tx.inbox_record_oldest(name, kept, cutoff)
    return span.deleted


class _Span:
    """Windows read but not yet deleted from: the keys after ``start`` up to an end."""

    def __init__(self, backend: Backend, name: str, cutoff: float) -> None:
        self._backend = backend
        self._name = name
        self._cutoff = cutoff
        self.start = BEFORE_ALL
        self.old = 0
        self.windows = 0
        self.deleted = 0

    def add(self, old: int) -> None:
        self.old += old
        self.windows += 1

    def delete_to(self, end: tuple[str, str] | None) -> None:
        """Delete the span's old receipts (up to ``end``, None: to the table's end) and start
        the next span there."""
        if self.old:
            began = time.monotonic()
            with self._backend.write() as tx:
                self.deleted += tx.inbox_purge_delete(self._name, self.start, end, self._cutoff)
            # A waiting writer sleeps between its tries (SQLite: up to 100 ms): taking the
            # lock again at once would starve it for many windows, so the purge leaves the
            # lock free for as long as it held it (tests/backends/test_inbox_purge_windows.py).
            if self._backend.polling_writers:
                time.sleep(time.monotonic() - began)
        if end is not None:
            self.start = end
        self.old = 0
        self.windows = 0


class OldestReceipt:
    """When the oldest receipt still kept first arrived, as the last purge recorded it.

    Only a purge deletes receipts, and every new one is younger than those kept, so the
    record stays true until the next purge. When nothing is recorded (a database never
    purged since migration 0010 made it empty, or a purge that kept nothing) one scan of the
    inbox finds it, and the answer is kept in memory until a purge records again (the row's
    generation): never a scan per ``/metrics`` scrape. The scan's answer is not written
    back: reading never writes (a read-only opener, a sink's scrape behind another writer).
    """

    def __init__(self, name: str) -> None:
        #: The inbox whose receipts these are.
        self.name = name
        self._lock = threading.Lock()
        self._scanned: tuple[int | None, float] | None = None

    def read(self, backend: Backend) -> float | None:
        with backend.read() as tx:
            recorded = tx.inbox_recorded_oldest(self.name)
            if recorded is not None and recorded.first_received_at is not None:
                return recorded.first_received_at
            generation = None if recorded is None else recorded.generation
            with self._lock:
                scanned = self._scanned
                if scanned is not None and scanned[0] == generation:
                    return scanned[1]
                found = tx.inbox_scan_oldest(self.name)
                # An empty inbox is not remembered: its next scan is as cheap, and it may not
                # be empty then.
                if found is not None:
                    self._scanned = (generation, found)
                return found
