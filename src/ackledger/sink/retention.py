"""Inbox retention's two halves: the purge's walk of the inbox in windows of its key, and the
oldest kept receipt that the purge records as it walks (read by ``Inbox.retention``, the
sink's ``/metrics`` and ``status``)."""

from __future__ import annotations

import threading
import time

from ..store import Backend
from ..store.inbox import BEFORE_ALL


def purge_windows(backend: Backend, cutoff: float, window: int) -> int:
    """Delete every receipt first received before ``cutoff``, walking the key ``window`` keys
    at a time in one pass; record the oldest receipt kept; return how many were deleted.

    Each window is read without a write lock and, if it holds receipts to delete, deleted in
    a short write transaction of its own: a service writing the same database waits for one
    window at most, never for the whole purge, and what is done stays done if the purge stops
    (a crash leaves the last purge's record, an older receipt than any kept: the gauge then
    says too old, never too young, until the next purge). The record is written last.
    """
    # SQLite has one writer, and a waiting one sleeps between its tries (up to 100 ms): taking
    # the lock again at once would starve it for many windows, so the purge leaves the lock
    # free for as long as its window held it (bench/inbox_purge.py measures it).
    one_writer = backend.dialect == "sqlite"
    after = BEFORE_ALL
    kept: float | None = None
    total = 0
    while True:
        with backend.read() as tx:
            found = tx.inbox_purge_window(after, window, cutoff)
        if found.old:
            began = time.monotonic()
            with backend.write() as tx:
                total += tx.inbox_purge_delete(after, found.last, cutoff)
            if one_writer:
                time.sleep(time.monotonic() - began)
        if found.kept_oldest is not None and (kept is None or found.kept_oldest < kept):
            kept = found.kept_oldest
        if found.last is None:
            break
        after = found.last
    with backend.write() as tx:
        tx.inbox_record_oldest(kept, cutoff)
    return total


class OldestReceipt:
    """When the oldest receipt still kept first arrived, as the last purge recorded it.

    Only a purge deletes receipts, and every new one is younger than those kept, so the
    record stays true until the next purge. When nothing is recorded (a database never
    purged since migration 0010 made it empty, or a purge that kept nothing) one scan of the
    inbox finds it, and the answer is kept in memory until a purge records again (the row's
    generation): never a scan per ``/metrics`` scrape. The scan's answer is not written
    back: reading never writes (a read-only opener, a sink's scrape behind another writer).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scanned: tuple[int | None, float] | None = None

    def read(self, backend: Backend) -> float | None:
        with backend.read() as tx:
            recorded = tx.inbox_recorded_oldest()
            if recorded is not None and recorded.first_received_at is not None:
                return recorded.first_received_at
            generation = None if recorded is None else recorded.generation
            with self._lock:
                scanned = self._scanned
                if scanned is not None and scanned[0] == generation:
                    return scanned[1]
                found = tx.inbox_scan_oldest()
                # An empty inbox is not remembered: its next scan is as cheap, and it may not
                # be empty then.
                if found is not None:
                    self._scanned = (generation, found)
                return found
