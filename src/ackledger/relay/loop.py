"""The long-running relay: send what is pending, wait out failures, stop cleanly.

Each round is one ``dispatch`` (or ``dispatch_batch``) call, so every rule of CONTRACT section
4 holds unchanged: read, then send, mark only exact ACKs, stop at the first failure. Around it
the relay decides what to do next:

- something was sent: go again at once (more may be pending), and forget past failures;
- nothing was pending: poll again after ``poll_interval``;
- a transient failure (no connection, a time-out, a 5xx, an answer that is not an ACK): wait a
  capped, jittered backoff and try the same event again;
- a permanent failure (the sink answered 4xx: this event will never be accepted as it is):
  alert, then by policy stop, or quarantine the event and go on with the ones behind it.

A stop request (SIGTERM/SIGINT in the command) is only looked at between sends: the send in
flight finishes and, if it was acknowledged, is marked, so a stop never leaves an event that
the sink has applied but the outbox does not know about. Waits end early on a stop.

The relay reaches the outbox only through :class:`RelaySource`: ``pending`` is the selection,
the marks are ``mark_sent``/``mark_sent_many`` (called by dispatch), and ``quarantine`` and
``stats`` serve the poison policy and the metrics. An ``Outbox`` is a RelaySource; a relay that
works under partition leases gets a view that selects its partitions and marks under its lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core.logline import abridged_ids, log_event
from ..errors import NotAcknowledged
from ..source.dispatch import Source, StopRequested, dispatch_batch_marking, dispatch_marking
from ..source.marking import Marking, MarksBehind, marking_for
from ..source.outbox import Outbox
from ..wire.sender import Sender, sender
from .policy import (
    EXIT_POISON,
    EXIT_STOPPED,
    FAILURE_CLASSES,
    PERMANENT,
    POISON_POLICIES,
    Failure,
    describe,
    failure_of,
    quarantine_reason,
    stopping_on_poison,
)
from .settings import RelaySettings

logger = logging.getLogger("ackledger.relay")

# How often a wait looks at the stop flag: short enough to stop promptly, long enough not to spin.
_WAIT_SLICE = 0.05


class RelaySource(Source, Protocol):
    """What the relay needs from the outbox (see the module docstring)."""

    def amend_error(self, event_id: str, error: str) -> None: ...

    def quarantine(self, event_id: str, reason: str) -> int: ...

    def stats(self) -> dict[str, Any]: ...


@dataclass
class RelayCounts:
    """What this relay process has done; the metrics endpoint reads these at scrape time."""

    attempted: int = 0
    succeeded: int = 0
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_CLASSES, 0))
    poison: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POISON_POLICIES, 0))
    store_errors: int = 0
    consecutive_failures: int = 0
    backoff_s: float = 0.0


class _Sends:
    """The send callbacks given to dispatch. They remember what they sent and how it failed,
    because dispatch re-raises the send's exception without saying which event it was for."""

    def __init__(self, wire: Sender, stopping: Callable[[], bool]) -> None:
        self.wire = wire
        self._stopping = stopping
        self.acked = 0
        self.error: BaseException | None = None
        self.failed_id: str | None = None

    def new_round(self) -> None:
        self.acked = 0
        self.error = None
        self.failed_id = None
        self.wire.refusal = None

    def one(self, event: dict[str, Any]) -> bool:
        if self._stopping():
            raise StopRequested
        try:
            answer = self.wire.send(event)
        except Exception as exc:
            self.error, self.failed_id = exc, event["id"]
            raise
        self.acked += 1
        return answer

    def many(self, events: list[dict[str, Any]]) -> int:
        try:
            acked = self.wire.send_batch(events)
        except Exception as exc:
            self.error, self.failed_id = exc, events[0]["id"]
            raise
        self.acked += acked
        return acked


class Relay:
    def __init__(
        self,
        source: RelaySource,
        settings: RelaySettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        marker: Outbox | None = None,
        wire: Sender | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.backoff = settings.backoff(settings.rng())
        self.counts = RelayCounts()
        self._sleep = sleep
        self._stop = False
        if wire is None:
            wire = sender(
                settings.url, timeout=settings.timeout, allowed_hosts=settings.allowed_hosts
            )
        self._sends = _Sends(wire, lambda: self._stop)
        # One strategy marks what was acknowledged: inline (each, last) or behind the next send.
        self._marking: Marking = marking_for(settings.mark_sync)
        if settings.pipeline:
            if not isinstance(source, Outbox) or marker is None:
                raise ValueError("pipeline: needs an Outbox source and a marker Outbox")
            self._marking = MarksBehind(source, marker)
        #: The permanent failure that stopped the relay (``--on-poison stop``), if any.
        self.poisoned: Failure | None = None

    def request_stop(self) -> None:
        """Finish the send in flight, then leave ``run`` (safe to call from a signal handler)."""
        self._stop = True

    @property
    def stopping(self) -> bool:
        return self._stop

    def run(self) -> int:
        """Relay until asked to stop (returns 0) or stopped by a poison event (EXIT_POISON)."""
        settings = self.settings
        log_event(
            logger, logging.INFO, "started",
            f"relaying to {settings.url}", batch=settings.batch, limit=settings.limit,
            on_poison=settings.on_poison, pending=self.source.stats()["pending"],
        )  # fmt: skip
        try:
            code = self._loop()
        finally:
            # The last batch's marks land before the relay reports that it stopped.
            self._marking.close()
        if code == EXIT_STOPPED:
            log_event(
                logger, logging.INFO, "stopped", "stop requested; the send in flight was finished"
            )
        return code

    def _loop(self) -> int:
        while not self._stop:
            try:
                marked = self.step()
            except StopRequested:
                break
            except Exception as exc:
                failure = self.classify(exc)
                if failure.kind == PERMANENT:
                    if not self._on_poison(failure):
                        return EXIT_POISON
                else:
                    self._wait(self._on_transient(failure))
                continue
            if marked:
                self._on_success(marked)
            else:
                self._wait(self.settings.poll_interval)
        return EXIT_STOPPED

    def step(self) -> list[str]:
        """One dispatch call; returns the ids marked sent, raises what stopped it."""
        self._sends.new_round()
        before = self.counts.succeeded
        try:
            if self.settings.batch:
                return dispatch_batch_marking(
                    self.source, self._sends.many, self.settings.limit, None, self._marking
                )
            return dispatch_marking(
                self.source, self._sends.one, self.settings.limit, None, self._marking
            )
        finally:
            self.counts.succeeded = before + self._sends.acked
            self.counts.attempted += self._sends.acked

    def classify(self, exc: Exception) -> Failure:
        """Turn what stopped a round into a Failure, counted in the relay's metrics."""
        sends = self._sends
        refusal = sends.wire.refusal
        if refusal is not None and isinstance(exc, NotAcknowledged):
            failure = failure_of(exc, refusal)  # a batch whose answer refused one item
            # dispatch_batch recorded "only n of m acknowledged"; keep the sink's reason.
            self.source.amend_error(refusal.event_id, failure.message)
        elif exc is sends.error:
            failure = failure_of(exc, None, sends.failed_id)
        else:
            # Not the network: the store failed (e.g. locked) around the send. Whatever was
            # acknowledged but not marked stays pending and is re-sent; the inbox absorbs it.
            self.counts.store_errors += 1
            return Failure(None, "store", describe(exc))
        self.counts.attempted += 1
        self.counts.failed[failure.kind] += 1
        return failure

    def _on_success(self, marked: list[str]) -> None:
        if self.counts.consecutive_failures:
            log_event(
                logger, logging.INFO, "recovered",
                f"sending again after {self.counts.consecutive_failures} failed round(s)",
            )  # fmt: skip
        self.backoff.reset()
        self.counts.consecutive_failures = 0
        self.counts.backoff_s = 0.0
        log_event(
            logger, logging.INFO, "sent", f"sent {len(marked)} event(s)",
            ids=abridged_ids(marked), last=marked[-1],
        )  # fmt: skip

    def _on_transient(self, failure: Failure) -> float:
        delay = self.backoff.next_delay()
        self.counts.consecutive_failures += 1
        self.counts.backoff_s = delay
        log_event(
            logger, logging.WARNING, "send-failed",
            f"{failure.message}; retrying in {delay:.2f}s",
            id=failure.event_id or "-", failure_class=failure.kind,
            failures_in_a_row=self.counts.consecutive_failures,
        )  # fmt: skip
        return delay

    def _on_poison(self, failure: Failure) -> bool:
        """Alert on a permanent failure; returns False when the policy says stop."""
        event_id = failure.event_id or "?"
        policy = self.settings.on_poison
        self.counts.poison[policy] += 1
        log_event(
            logger, logging.ERROR, "poison",
            f"ALERT: the sink refused event {event_id} permanently ({failure.message}); "
            f"everything behind it is blocked; policy --on-poison {policy}",
            id=event_id, status=failure.status if failure.status is not None else "-",
        )  # fmt: skip
        if policy == "stop" or failure.event_id is None:
            self.poisoned = failure
            log_event(
                logger, logging.ERROR, "stopped-on-poison",
                stopping_on_poison(event_id), id=event_id,
            )  # fmt: skip
            return False
        reason = quarantine_reason(failure)
        try:
            seq = self.source.quarantine(failure.event_id, reason)
        except (KeyError, ValueError) as exc:
            # Someone else already moved it (an operator, or another relay): nothing to do.
            log_event(logger, logging.WARNING, "quarantine-skipped", describe(exc), id=event_id)
            return True
        log_event(
            logger, logging.ERROR, "quarantined",
            f"event {event_id} quarantined; the events behind it go on (a reorder), "
            "requeue it once fixed", id=event_id, seq=seq,
        )  # fmt: skip
        return True

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._sleep(min(left, _WAIT_SLICE))
