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

The seam for a relay command is :func:`run_partition_worker`: give it an ``Outbox``, an owner
name unique among the running relays, a ``send`` (or ``send_batch``) callable exactly as for
``dispatch``/``dispatch_batch``, and a ``threading.Event`` that ends the loop.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..dispatch import Send, SendBatch, dispatch, dispatch_batch
from ..errors import LeaseLost
from ..outbox import Outbox, check_limit
from .leases import DEFAULT_TTL, Lease, LeasedPartition, PartitionLeases, check_ttl

IDLE_WAIT_S = 0.5
BATCHES_PER_LEASE = 16
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


@dataclass
class WorkerReport:
    """What one worker did, for its final log line and for tests."""

    owner: str
    sent: int = 0
    leases: int = 0
    lost: int = 0
    failures: int = 0
    lost_partitions: list[str] = field(default_factory=list)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class PartitionWorker:
    def __init__(
        self,
        outbox: Outbox,
        *,
        owner: str,
        send: Send | None = None,
        send_batch: SendBatch | None = None,
        lease_ttl: float = DEFAULT_TTL,
        limit: int = 16,
        stop: threading.Event | None = None,
        idle_wait: float = IDLE_WAIT_S,
        max_backoff: float = MAX_BACKOFF_S,
        batches_per_lease: int = BATCHES_PER_LEASE,
        after_delivery: Callable[[str], object] | None = None,
        log: Callable[[str], None] = _stderr,
    ) -> None:
        if (send is None) == (send_batch is None):
            raise ValueError("send, send_batch: give exactly one of them")
        self.leases = PartitionLeases(outbox, owner, lease_ttl)
        self.send = send
        self.send_batch = send_batch
        self.limit = check_limit(limit)
        self.stop = stop if stop is not None else threading.Event()
        self.idle_wait = check_ttl(idle_wait, "idle_wait")
        self.max_backoff = check_ttl(max_backoff, "max_backoff")
        self.batches_per_lease = batches_per_lease
        self.after_delivery = after_delivery
        self.log = log
        self.report = WorkerReport(owner)
        #: Consecutive failures per partition (this worker's view; resets on success).
        self._failures: dict[str, int] = {}

    def run(self) -> WorkerReport:
        while not self.stop.is_set():
            try:
                busy = self.run_once()
            except Exception as exc:
                # The database itself failed (unreachable, restarting): wait, then go on.
                self.report.failures += 1
                self.log(f"{self.report.owner}: database error: {type(exc).__name__}: {exc}")
                self.stop.wait(self._backoff(1))
                continue
            if not busy:
                self.stop.wait(self.idle_wait)
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
        except LeaseLost as exc:
            self.report.lost += 1
            self.report.lost_partitions.append(lease.partition)
            self.log(f"{self.report.owner}: lease lost: {exc}")
        except Exception as exc:
            self._park(view.lease, exc)
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
            self._failures.pop(view.partition, None)
            if len(marked) < self.limit:
                break  # drained (for now)
        view.release()

    def _dispatch(self, view: LeasedPartition) -> list[str]:
        if self.send is not None:
            return dispatch(view, self.send, self.limit, after_delivery=self.after_delivery)
        assert self.send_batch is not None
        each = self.after_delivery

        def after_batch(ids: list[str]) -> None:
            if each is not None:
                for event_id in ids:
                    each(event_id)

        return dispatch_batch(view, self.send_batch, self.limit, after_delivery=after_batch)

    def _backoff(self, failures: int) -> float:
        ceiling = min(self.max_backoff, FIRST_BACKOFF_S * 2.0 ** min(failures - 1, 30))
        return ceiling * random.uniform(0.5, 1.0)

    def _park(self, lease: Lease, exc: Exception) -> None:
        """Keep the failed partition's lease, unrenewed, for a backoff: nobody retries it
        before then, and this worker turns to other partitions."""
        self.report.failures += 1
        count = self._failures[lease.partition] = self._failures.get(lease.partition, 0) + 1
        wait = self._backoff(count)
        self.log(
            f"{self.report.owner}: partition {lease.partition!r} stopped at a failure "
            f"({type(exc).__name__}: {exc}); retrying it in {wait:.1f}s"
        )
        try:
            self.leases.renew(lease, wait)
        except Exception as parked:  # the lease is gone or the database is: either way, move on
            self.log(f"{self.report.owner}: could not park {lease.partition!r}: {parked}")


def run_partition_worker(
    outbox: Outbox,
    *,
    owner: str,
    send: Send | None = None,
    send_batch: SendBatch | None = None,
    lease_ttl: float = DEFAULT_TTL,
    limit: int = 16,
    stop: threading.Event | None = None,
    idle_wait: float = IDLE_WAIT_S,
    max_backoff: float = MAX_BACKOFF_S,
    after_delivery: Callable[[str], object] | None = None,
    log: Callable[[str], None] = _stderr,
) -> WorkerReport:
    """Run one partition worker until ``stop`` is set; returns what it did.

    ``send``/``send_batch`` are the callables of ``dispatch``/``dispatch_batch`` (give one).
    ``owner`` names this worker in lease rows and must be unique among running workers.
    ``lease_ttl``: how long a lease lasts without renewal (marks renew it); a crashed worker's
    partitions wait this long before another worker takes them.
    """
    worker = PartitionWorker(
        outbox,
        owner=owner,
        send=send,
        send_batch=send_batch,
        lease_ttl=lease_ttl,
        limit=limit,
        stop=stop,
        idle_wait=idle_wait,
        max_backoff=max_backoff,
        after_delivery=after_delivery,
        log=log,
    )
    return worker.run()
