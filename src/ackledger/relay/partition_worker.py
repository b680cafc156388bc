"""The partition worker: one of N relays on one outbox, order kept per partition.

The loop: lease a partition that has pending events and no live lease; send its events with
``ackledger.dispatch`` (so every dispatch rule holds: seq order, copies, exact ACK, stop at the
first failure, mark only what was selected) through a :class:`LeasedPartition`, whose marks
check and renew the lease; release it when it is drained (or after ``batches_per_lease``
batches, so that busy partitions take turns); lease the next one.

- A send that fails stops that partition only: its lease is *parked* (kept, unrenewed, for a
  capped, jittered backoff), so no relay retries it before then, and the worker moves on to
  other partitions.
- A mark refused with LeaseLost drops the partition at once: it has a new owner, or will have.
- A crashed worker's leases end by expiry (``lease_ttl``); until then nobody sends its
  partitions. A worker that stops on request releases its lease first.

``ackledger relay`` runs it through ``relay.runner`` (signals, metrics, logs); it reads its
settings from :class:`~ackledger.relay.settings.RelaySettings` (``owner`` set) and sends with a
``wire.sender``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .._core.backoff import Backoff
from .._core.logline import abridged_ids, log_event
from ..errors import LeaseLost
from ..source.dispatch import StopRequested, dispatch_batch_marking, dispatch_marking
from ..source.marking import marking_for
from ..source.outbox import Outbox
from ..wire.sender import Sender
from .leases import Lease, LeasedPartition, PartitionLeases
from .loop import RelayCounts
from .loop import logger as relay_logger
from .policy import PERMANENT, Failure, failure_of, quarantine_reason, stopping_on_poison
from .settings import RelaySettings

BATCHES_PER_LEASE = 16


@dataclass
class WorkerReport:
    """What one worker did, for its final log line and for tests."""

    owner: str
    sent: int = 0
    leases: int = 0
    lost: int = 0
    failures: int = 0
    lost_partitions: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    #: The event that stopped the worker under ``on_poison="stop"``, and why.
    poisoned: str | None = None


class PartitionWorker:
    """``settings.owner`` names this worker in lease rows; ``wire`` sends (``wire.sender``
    shape: ``send``, or ``send_batch`` with ``settings.batch``, and ``refusal``). ``stop`` ends
    the loop after the batch in flight (the lease is released); ``log``, if given, gets each
    line as text instead of the relay's logger; ``after_delivery`` is called with each
    acknowledged id before its mark (drills; see dispatch)."""

    def __init__(
        self,
        outbox: Outbox,
        settings: RelaySettings,
        wire: Sender,
        *,
        stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
        after_delivery: Callable[[str], object] | None = None,
    ) -> None:
        if settings.owner is None:
            raise ValueError("owner: a partition worker needs a name for its lease rows")
        self.settings = settings
        self.leases = PartitionLeases(outbox, settings.owner, settings.lease_ttl)
        self.wire = wire
        self.limit = settings.limit
        self.stop = stop or threading.Event()
        self._rng = settings.rng() or random.Random()
        # One schedule per parked partition (a success forgets it), one for the database.
        self._parked: dict[str, Backoff] = {}
        self._database = self._new_backoff()
        self.batches_per_lease = BATCHES_PER_LEASE
        self.after_delivery = after_delivery
        self.log = log
        self.report = WorkerReport(settings.owner)
        self.outbox = outbox
        self.on_poison = settings.on_poison
        # Inline marks (each, last): a mark must check the lease, so none can land behind.
        self._marking = marking_for(settings.mark_sync)
        #: Send figures of this process, in the relay's shape (its metrics read them):
        #: ``consecutive_failures`` counts failed rounds in a row over all of this worker's
        #: partitions, ``backoff_s`` is the last wait it chose.
        self.counts = RelayCounts()

    def _new_backoff(self) -> Backoff:
        return self.settings.backoff(self._rng)

    def judge(self, exc: Exception) -> Failure:
        return failure_of(exc, self.wire.refusal)

    def _note(self, level: int, event: str, message: str, **fields: object) -> None:
        if self.log is not None:
            self.log(f"{self.report.owner}: {message}")
        else:
            log_event(relay_logger, level, event, message, owner=self.report.owner, **fields)

    def run(self) -> WorkerReport:
        self._note(
            logging.INFO, "started",
            f"leasing partitions of {self.outbox.backend.location}",
            batch=self.settings.batch, limit=self.limit, on_poison=self.on_poison,
        )  # fmt: skip
        while not self.stop.is_set():
            try:
                busy = self.run_once()
            except Exception as exc:
                # The database itself failed (unreachable, restarting): wait, then go on.
                self.report.failures += 1
                self.counts.store_errors += 1
                wait = self._database.next_delay()
                self._note(
                    logging.WARNING, "database-error",
                    f"database error: {type(exc).__name__}: {exc}; retrying in {wait:.2f}s",
                )  # fmt: skip
                self.stop.wait(wait)
                continue
            self._database.reset()
            if not busy:
                self.stop.wait(self.settings.poll_interval)
        if self.report.poisoned is None:
            self._note(logging.INFO, "stopped", "stop requested; the send in flight was finished")
        return self.report

    def run_once(self) -> bool:
        """Lease one partition and work on it; False if there was nothing to lease."""
        lease = self.leases.claim()
        if lease is None:
            return False
        self.report.leases += 1
        view = LeasedPartition(self.leases, lease)
        try:
            self._drain(view)
        except StopRequested:
            view.release()  # stopped between two sends: everything sent so far is marked
        except LeaseLost as exc:
            self.report.lost += 1
            self.report.lost_partitions.append(lease.partition)
            self._note(logging.WARNING, "lease-lost", f"lease lost: {exc}",
                       partition=lease.partition)  # fmt: skip
        except Exception as exc:
            self._failed(view, exc)
        finally:
            self.report.sent += view.marked
        return True

    def _drain(self, view: LeasedPartition) -> None:
        for batch in range(self.batches_per_lease):
            if self.stop.is_set():
                break
            if batch:
                view.renew()  # raises LeaseLost if it ended while we were sending
            marked = self._dispatch(view)
            self._succeeded(view.partition, marked)
            if len(marked) < self.limit:
                break  # drained (for now)
        view.release()

    def _dispatch(self, view: LeasedPartition) -> list[str]:
        counts = self.counts
        if not self.settings.batch:
            send = self.wire.send

            def one(event: dict[str, object]) -> object:
                if self.stop.is_set():
                    raise StopRequested  # between two sends: the one before was marked
                counts.attempted += 1
                answer = send(event)
                counts.succeeded += answer is True
                return answer

            return dispatch_marking(view, one, self.limit, self.after_delivery, self._marking)
        send_batch = self.wire.send_batch
        each = self.after_delivery

        def many(events: list[dict[str, object]]) -> object:
            # Counted as the single loop counts (relay.Relay.step and classify): the items
            # the sink acknowledged, plus one for the item it refused or the request that
            # failed; the items behind a refusal were never looked at.
            try:
                answer = send_batch(events)
            except BaseException:
                counts.attempted += 1
                raise
            acked = 0  # an answer that is not a count acknowledges nothing (dispatch_batch)
            if isinstance(answer, int) and not isinstance(answer, bool):
                acked = max(0, min(answer, len(events)))
            counts.succeeded += acked
            counts.attempted += acked + (acked < len(events))
            return answer

        def after_batch(ids: list[str]) -> None:
            if each is not None:
                for event_id in ids:
                    each(event_id)

        return dispatch_batch_marking(view, many, self.limit, after_batch, self._marking)

    def _succeeded(self, partition: str, marked: list[str]) -> None:
        if self._parked.pop(partition, None) is not None:
            self._note(logging.INFO, "recovered", f"partition {partition!r} is sending again",
                       partition=partition)  # fmt: skip
        if not marked:
            return
        self.counts.consecutive_failures = 0
        self.counts.backoff_s = 0.0
        self._note(
            logging.INFO, "sent", f"sent {len(marked)} event(s)",
            partition=partition, ids=abridged_ids(marked), last=marked[-1],
        )  # fmt: skip

    def _failed(self, view: LeasedPartition, exc: Exception) -> None:
        """A send failed: a permanent failure follows the poison policy; the rest park."""
        failure = self.judge(exc)
        kind = failure.kind
        self.counts.failed[kind] = self.counts.failed.get(kind, 0) + 1
        if kind != PERMANENT:
            self._park(view.lease, failure)
            return
        head = view.pending(1)
        event_id = head[0]["id"] if head else "?"
        self.counts.poison[self.on_poison] += 1
        self._note(
            logging.ERROR, "poison",
            f"ALERT: the sink refused event {event_id} of partition {view.partition!r} "
            f"permanently ({failure.message}); policy --on-poison {self.on_poison}",
            id=event_id, partition=view.partition,
        )  # fmt: skip
        if self.on_poison == "stop" or not head:
            self.report.poisoned = f"{event_id}: {failure.message}"
            self._note(
                logging.ERROR, "stopped-on-poison",
                stopping_on_poison(event_id), id=event_id,
            )  # fmt: skip
            self.stop.set()
            view.release()
            return
        try:
            seq = self.outbox.quarantine(event_id, quarantine_reason(failure))
            self.report.quarantined.append(event_id)
            self._note(
                logging.ERROR, "quarantined",
                f"event {event_id} quarantined; its partition goes on (a reorder), requeue it "
                "once fixed", id=event_id, seq=seq, partition=view.partition,
            )  # fmt: skip
        except (KeyError, ValueError) as moved:  # an operator or another relay moved it first
            self._note(logging.WARNING, "quarantine-skipped",
                       f"quarantine of {event_id} skipped: {moved}", id=event_id)  # fmt: skip
        view.release()

    def _park(self, lease: Lease, failure: Failure) -> None:
        """Keep the failed partition's lease, unrenewed, for a backoff: nobody retries it
        before then, and this worker turns to other partitions."""
        self.report.failures += 1
        schedule = self._parked.setdefault(lease.partition, self._new_backoff())
        wait = schedule.next_delay()
        self.counts.consecutive_failures += 1
        self.counts.backoff_s = wait
        self._note(
            logging.WARNING, "send-failed",
            f"partition {lease.partition!r} stopped at a failure ({failure.message}); "
            f"retrying it in {wait:.2f}s",
            partition=lease.partition, failures_in_a_row=schedule.failures,
            wait_s=round(wait, 3),
        )  # fmt: skip
        try:
            self.leases.renew(lease, wait)
        except Exception as parked:  # the lease is gone or the database is: either way, move on
            self._note(logging.WARNING, "park-failed",
                       f"could not park {lease.partition!r}: {parked}")  # fmt: skip
