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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core.backoff import Backoff
from .._core.logline import note
from ..errors import InvalidEvent, NotAcknowledged
from ..source.dispatch import Source, StopRequested, check_mark_sync, dispatch, dispatch_batch
from ..source.marking import MarksBehind
from ..source.outbox import MAX_BATCH, Outbox, check_limit, reason_from
from ..wire.ack import BatchAnswer
from ..wire.http import post_batch, send_http
from ..wire.targets import check_target, check_timeout

logger = logging.getLogger("ackledger.relay")

TRANSIENT = "transient"
PERMANENT = "permanent"
FAILURE_CLASSES = (TRANSIENT, PERMANENT)
POISON_POLICIES = ("stop", "quarantine")

EXIT_STOPPED = 0
#: The relay stopped on a poison event under ``--on-poison stop``.
EXIT_POISON = 3

# 4xx answers that say "not now" rather than "never".
_RETRYABLE_4XX = frozenset({408, 425, 429})
# How often a wait looks at the stop flag: short enough to stop promptly, long enough not to spin.
_WAIT_SLICE = 0.05


class RelaySource(Source, Protocol):
    """What the relay needs from the outbox (see the module docstring)."""

    def amend_error(self, event_id: str, error: str) -> None: ...

    def quarantine(self, event_id: str, reason: str) -> int: ...

    def stats(self) -> dict[str, Any]: ...


def failure_class(status: int | None) -> str:
    """A sink's 4xx is permanent (except "not now" answers); everything else is transient."""
    if status is not None and 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return PERMANENT
    return TRANSIENT


@dataclass(frozen=True)
class Failure:
    """One failed round: which event, which class, and what was said."""

    event_id: str | None
    kind: str
    message: str
    status: int | None = None


@dataclass
class RelaySettings:
    url: str  #: the sink's ``/events`` URL; batches go to ``/events/batch``
    batch: bool = False
    limit: int = MAX_BATCH
    poll_interval: float = 0.5
    on_poison: str = "stop"
    timeout: float = 5.0
    allowed_hosts: tuple[str, ...] = ()
    #: Per-item rounds: fsync every mark ("each") or the last of each round ("last"; see
    #: ``dispatch``). A batch round's marks are one transaction either way.
    mark_sync: str = "each"
    #: Batch rounds: commit a batch's marks on a second connection while the next batch is
    #: sent (``marks_behind``). Needs ``batch``.
    pipeline: bool = False

    def __post_init__(self) -> None:
        check_target(self.url, "/events", self.allowed_hosts)
        check_limit(self.limit)
        check_mark_sync(self.mark_sync)
        if self.pipeline and not self.batch:
            raise ValueError("pipeline: only batch rounds can overlap their marks (add batch)")
        if self.on_poison not in POISON_POLICIES:
            raise ValueError(f"on_poison: must be stop or quarantine, got {self.on_poison!r}")
        value = self.poll_interval
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"poll_interval: must be a positive number of seconds, got {value!r}")
        # Refused here, once, rather than by every send (which a relay would retry forever).
        check_timeout(self.timeout)


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


class _Sender:
    """The send callbacks given to dispatch. They remember what they sent and how it failed,
    because dispatch re-raises the send's exception without saying which event it was for."""

    def __init__(self, settings: RelaySettings, stopping: Callable[[], bool]) -> None:
        self._settings = settings
        self._stopping = stopping
        self._batch_url = settings.url + "/batch"
        self.acked = 0
        self.error: BaseException | None = None
        self.failed_id: str | None = None
        self.refusal: Failure | None = None

    def new_round(self) -> None:
        self.acked = 0
        self.error = None
        self.failed_id = None
        self.refusal = None

    def one(self, event: dict[str, Any]) -> bool:
        if self._stopping():
            raise StopRequested
        try:
            answer = send_http(
                event,
                self._settings.url,
                timeout=self._settings.timeout,
                allowed_hosts=self._settings.allowed_hosts,
            )
        except Exception as exc:
            self.error, self.failed_id = exc, event["id"]
            raise
        self.acked += 1
        return answer

    def many(self, events: list[dict[str, Any]]) -> int:
        try:
            answer = post_batch(
                events,
                self._batch_url,
                timeout=self._settings.timeout,
                allowed_hosts=self._settings.allowed_hosts,
            )
        except Exception as exc:
            self.error, self.failed_id = exc, events[0]["id"]
            raise
        self.acked += answer.acked
        self.refusal = refusal_of(events, answer)
        return answer.acked


def refusal_of(events: list[dict[str, Any]], answer: BatchAnswer) -> Failure | None:
    """The item a batch answer did not acknowledge, as a Failure with the sink's reason (the
    batch send only returns a count; dispatch_batch then raises NotAcknowledged for the rest),
    or None if every item was acknowledged."""
    if answer.acked >= len(events):
        return None
    problem = answer.error or {}
    status = problem.get("status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    detail = problem.get("detail") or problem.get("title") or "not acknowledged"
    return Failure(
        events[answer.acked]["id"],
        failure_class(status),
        f"HTTP {status} in batch: {detail}" if status else str(detail),
        status,
    )


class Relay:
    def __init__(
        self,
        source: RelaySource,
        settings: RelaySettings,
        backoff: Backoff,
        *,
        sleep: Callable[[float], None] = time.sleep,
        marker: Outbox | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.backoff = backoff
        self.counts = RelayCounts()
        self._sleep = sleep
        self._stop = False
        self._sender = _Sender(settings, lambda: self._stop)
        self._behind: MarksBehind | None = None
        if settings.pipeline:
            if not isinstance(source, Outbox) or marker is None:
                raise ValueError("pipeline: needs an Outbox source and a marker Outbox")
            self._behind = MarksBehind(source, marker)
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
        note(
            logger, logging.INFO, "started",
            f"relaying to {settings.url}", batch=settings.batch, limit=settings.limit,
            on_poison=settings.on_poison, pending=self.source.stats()["pending"],
        )  # fmt: skip
        try:
            code = self._loop()
        finally:
            if self._behind is not None:
                # The last batch's marks land before the relay reports that it stopped.
                self._behind.close()
        if code == EXIT_STOPPED:
            note(logger, logging.INFO, "stopped", "stop requested; the send in flight was finished")
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
        self._sender.new_round()
        before = self.counts.succeeded
        try:
            if self.settings.batch:
                return dispatch_batch(
                    self.source, self._sender.many, self.settings.limit, behind=self._behind
                )
            return dispatch(
                self.source, self._sender.one, self.settings.limit,
                mark_sync=self.settings.mark_sync,
            )  # fmt: skip
        finally:
            self.counts.succeeded = before + self._sender.acked
            self.counts.attempted += self._sender.acked

    def classify(self, exc: Exception) -> Failure:
        """Turn what stopped a round into a Failure, counted in the relay's metrics."""
        sender = self._sender
        if sender.refusal is not None and isinstance(exc, NotAcknowledged):
            failure = sender.refusal  # a batch whose answer refused one item
            if failure.event_id is not None:
                # dispatch_batch recorded "only n of m acknowledged"; keep the sink's reason.
                self.source.amend_error(failure.event_id, failure.message)
        elif exc is sender.error:
            status = exc.status if isinstance(exc, NotAcknowledged) else None
            # An event the outbox holds but send_http refuses to send can never go as it is.
            kind = PERMANENT if isinstance(exc, InvalidEvent) else failure_class(status)
            failure = Failure(sender.failed_id, kind, _describe(exc), status)
        else:
            # Not the network: the store failed (e.g. locked) around the send. Whatever was
            # acknowledged but not marked stays pending and is re-sent; the inbox absorbs it.
            self.counts.store_errors += 1
            return Failure(None, "store", _describe(exc))
        self.counts.attempted += 1
        self.counts.failed[failure.kind] += 1
        return failure

    def _on_success(self, marked: list[str]) -> None:
        if self.counts.consecutive_failures:
            note(
                logger, logging.INFO, "recovered",
                f"sending again after {self.counts.consecutive_failures} failed round(s)",
            )  # fmt: skip
        self.backoff.reset()
        self.counts.consecutive_failures = 0
        self.counts.backoff_s = 0.0
        note(
            logger, logging.INFO, "sent", f"sent {len(marked)} event(s)",
            ids=some_ids(marked), last=marked[-1],
        )  # fmt: skip

    def _on_transient(self, failure: Failure) -> float:
        delay = self.backoff.next_delay()
        self.counts.consecutive_failures += 1
        self.counts.backoff_s = delay
        note(
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
        note(
            logger, logging.ERROR, "poison",
            f"ALERT: the sink refused event {event_id} permanently ({failure.message}); "
            f"everything behind it is blocked; policy --on-poison {policy}",
            id=event_id, status=failure.status if failure.status is not None else "-",
        )  # fmt: skip
        if policy == "stop" or failure.event_id is None:
            self.poisoned = failure
            note(
                logger, logging.ERROR, "stopped-on-poison",
                f"stopping: inspect with `ackledger trace {event_id}`, fix the cause, then "
                f"`ackledger quarantine {event_id} --reason ...` or correct the sink",
                id=event_id,
            )  # fmt: skip
            return False
        reason = reason_from(f"sink refused it permanently: {failure.message}")
        try:
            seq = self.source.quarantine(failure.event_id, reason)
        except (KeyError, ValueError) as exc:
            # Someone else already moved it (an operator, or another relay): nothing to do.
            note(logger, logging.WARNING, "quarantine-skipped", _describe(exc), id=event_id)
            return True
        note(
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


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def some_ids(ids: Iterable[str], keep: int = 16) -> list[str]:
    listed = list(ids)
    return listed if len(listed) <= keep else [*listed[:keep], f"+{len(listed) - keep} more"]
