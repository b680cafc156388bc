"""How dispatch marks what was acknowledged: one strategy object per way of marking.

- ``EACH`` (``dispatch(mark_sync="each")``, the default): inline, every mark durable;
- ``LAST`` (``mark_sync="last"``): inline, only the last mark of a call waits for the disk;
- ``MarksBehind`` (``dispatch_batch(behind=...)``, ``dispatch(behind=...)``): a batch's
  marks, or one event's mark, are committed on another connection while the next batch or
  event is selected and sent.

A round of the relay waits for two durable commits in a row: the sink's, before it answers,
and the outbox's marks, after the answer. Only the first one has to come before the next
send. The second one can run on its own thread and its own connection while the next batch
(or, per item, the next event) travels, which is what ``MarksBehind`` does:

- at most one batch's marks (per item: one event's mark, still a durable commit of its own)
  are in flight; handing over the next ones first waits for them, so an error of a mark
  surfaces at the latest at the next hand-over, ``settle`` or ``close``. One, not more: a
  second one would wait for the first's commit anyway (one database, one writer), and every
  one more is one more event re-sent after a crash;
- the next selection skips the events whose marks are in flight (they are sent, not yet
  marked), and never reads past them in any other way, so order is kept;
- a failed send waits for the marks in flight before it is handled: everything acknowledged
  before the failure is marked, as ``dispatch_batch`` promises;
- ``close`` waits for the last marks; a relay calls it before it exits.

What can go wrong in between is what can go wrong between any ACK and its mark: if the
process dies, the events acknowledged but not yet marked are sent again and the sink answers
them as duplicates.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatch import Source
    from .outbox import Outbox

_STOP = object()

#: ``dispatch(mark_sync=...)``: fsync every mark, or only the last one of the call.
MARK_SYNCS = ("each", "last")


class Marking:
    """Inline marks, each one durable: what dispatch does unless told otherwise."""

    #: Per-item dispatch: every mark waits for the disk (False: only the call's last one).
    durable_each = True

    def select_rows(self, outbox: Source, limit: int) -> Sequence[Mapping[str, Any]]:
        """The next selection of a dispatch call: the rows as read (``PendingRow``, parsed
        only when asked) from a source that has them, else its events."""
        rows = getattr(outbox, "pending_rows", None)
        if rows is None:
            return outbox.pending(limit)
        found: Sequence[Mapping[str, Any]] = rows((), limit)
        return found

    def hand_over(self, event_ids: Sequence[str]) -> bool:
        """A wholly acknowledged batch: True if its marks were taken over (``MarksBehind``),
        False if dispatch_batch marks it inline."""
        return False

    def hand_over_one(self, event_id: str) -> bool:
        """``hand_over((event_id,))``: one acknowledged event of per-item dispatch."""
        return False

    def settle(self) -> None:
        """Wait for the marks in flight, if any, re-raising what failed them."""

    def close(self) -> None:
        """Let the last marks land; a relay calls it before it exits."""


class MarksLast(Marking):
    """Inline marks; only the last one of a dispatch call (or its recorded failure) waits for
    the disk, which on a database in WAL mode makes the earlier ones durable too."""

    durable_each = False


EACH = Marking()
LAST = MarksLast()


def marking_for(mark_sync: object) -> Marking:
    """The inline strategy named by ``mark_sync`` ("each" or "last")."""
    if mark_sync == "each" and isinstance(mark_sync, str):
        return EACH
    if mark_sync == "last" and isinstance(mark_sync, str):
        return LAST
    raise ValueError(f"mark_sync: must be 'each' or 'last', got {mark_sync!r}")


def check_mark_sync(value: object) -> str:
    marking_for(value)
    assert isinstance(value, str)
    return value


class MarksBehind(Marking):
    """``reader`` selects and records failures; ``marker`` (another ``Outbox`` on the same
    database: its own connection) commits the marks handed over."""

    def __init__(self, reader: Outbox, marker: Outbox) -> None:
        if reader is marker:
            # One connection would make the next selection wait for the marks' commit.
            raise ValueError("marker: must be another Outbox on the same database")
        self.reader = reader
        self.marker = marker
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._inflight: frozenset[str] = frozenset()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="ackledger-marks", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            try:
                self._commit(job)
            except BaseException as exc:  # handed to the sending thread, which re-raises it
                self._done.put(exc)
            else:
                self._done.put(None)

    def _job(self, ids: list[str]) -> Any:
        """What the marking thread is handed for these ids (a subclass adds its source)."""
        return ids

    def _commit(self, job: Any) -> None:
        """On the marking thread: commit one handed-over batch's marks (per item, one)."""
        if len(job) == 1:
            self.marker.mark_sent(job[0], attempted=True)
        else:
            self.marker.mark_sent_many(job, attempted=True)

    @property
    def inflight(self) -> frozenset[str]:
        """The ids handed over whose marks are not known to be committed yet."""
        return self._inflight

    def select_rows(self, outbox: Source, limit: int) -> Sequence[Mapping[str, Any]]:
        """The next selection: pending rows, without those whose marks are in flight."""
        return self.reader.pending_rows(self._inflight, limit)

    def hand_over(self, event_ids: Sequence[str]) -> bool:
        self.submit(event_ids)
        return True

    def hand_over_one(self, event_id: str) -> bool:
        """``hand_over((event_id,))``, in fewer steps: dispatch hands over every event."""
        if self._closed:
            raise RuntimeError("MarksBehind is closed")
        if self._inflight:
            self.wait()
        ids = [event_id]
        self._inflight = frozenset(ids)
        self._jobs.put(self._job(ids))
        return True

    def settle(self) -> None:
        self.wait()

    def submit(self, event_ids: Sequence[str]) -> None:
        """Wait for the marks in flight (re-raising their error), then hand these over."""
        if self._closed:
            raise RuntimeError("MarksBehind is closed")
        self.wait()
        ids = list(event_ids)
        if ids:
            self._inflight = frozenset(ids)
            self._jobs.put(self._job(ids))

    def wait(self) -> None:
        """Return once the marks in flight are committed; raises what failed them."""
        if not self._inflight:
            return
        error = self._done.get()
        self._inflight = frozenset()
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the last marks, then end the thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            self._jobs.put(_STOP)
            self._thread.join()
