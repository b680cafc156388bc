"""The long-running relay: send what is pending, wait out failures, stop cleanly.

One loop for every relay. Its picker (``relay.pickers``) says what it sends from: the whole
outbox, or one leased partition at a time. Each round is one ``dispatch`` (or
``dispatch_batch``) call on the pick, so every rule of CONTRACT section 4 holds unchanged:
read, then send, mark only exact ACKs, stop at the first failure (with ``--inflight N``, one
``dispatch_inflight`` call: up to 16 batches, N of them in flight to the broker at a time, each
marked in order on its own ACKs; ``source/inflight.py``). Around it the loop decides what to do
next:

- something was sent: go again at once (more may be pending), and forget past failures;
- nothing was pending: poll again after ``poll_interval``;
- a transient failure (no connection, a time-out, a 5xx, an answer that is not an ACK, the
  store failing around the send): draw a capped, jittered backoff and let the pick wait it out
  (the whole outbox: the loop sleeps; a partition: parked, the loop goes on with others);
- a permanent failure (the sink answered 4xx: this event will never be accepted as it is):
  alert, then by policy stop, or quarantine the event and go on with the ones behind it.

A stop request (SIGTERM/SIGINT in the command) is only looked at between sends: the send in
flight finishes and, if it was acknowledged, is marked, so a stop never leaves an event that
the sink has applied but the outbox does not know about. Waits end early on a stop.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .._core.logline import log_event
from .._core.telemetry import RoundSpan
from ..errors import LeaseLost, NotAcknowledged
from ..source.dispatch import StopRequested, dispatch_batch_marking, dispatch_marking
from ..source.inflight import dispatch_inflight
from ..wire.sender import Sender, sender
from ..wire.stored import (
    SplitSender,
    Stored,
    StoredEventSender,
    StoredSender,
    split_sender,
    stored_event_sender,
    stored_sender,
)
from .pickers import Pick, Picker, RelaySource
from .policy import (
    EXIT_POISON,
    EXIT_STOPPED,
    FAILURE_CLASSES,
    PERMANENT,
    POISON_POLICIES,
    Failure,
    describe,
    failure_of,
    holding_poison,
    quarantine_reason,
    stopping_on_poison,
)
from .wakeup import IdleWait

logger = logging.getLogger("ackledger.relay")

# How often a wait looks at the stop flag: short enough to stop promptly, long enough not to spin.
_WAIT_SLICE = 0.05
#: ``--inflight``: batches one round sends at most before it lets its window drain (a leased
#: partition's whole turn; the single loop then logs and looks at the stop flag again).
BATCHES_PER_STEP = 16

#: A busy relay writes at most one ``sent`` line per this many seconds. At one event a round
#: (a PostgreSQL wake-up per publish) a line per round cost 60-85 µs of the relay's 370 µs of
#: CPU per event, and ~7 of 42 µs per event with ``--batch``.
SENT_LINE_EVERY = 1.0
#: How many ids a ``sent`` line lists (then "+N more").
_SENT_IDS = 16


class Stop(Protocol):
    """A stop request: :class:`StopFlag`, or a ``threading.Event`` set from another thread."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


class StopFlag:
    """A stop request that a signal handler may set: a plain flag, where ``Event.set`` takes a
    lock that the handler's own thread may hold, mid-wait."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep until set or ``timeout`` seconds have passed; returns whether it is set."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, _WAIT_SLICE))
        return self._set


#: How a line is written: (level, event, message, **fields).
_Write = Callable[..., None]


class _SentLines:
    """The ``sent`` lines: the first one at once, then at most one per ``every`` seconds, each
    counting every event marked since the one before (with the first ids and the last).

    A line that waits for its turn is written before any other line (so the lines keep their
    order), when a round comes from another pick (other fields), once it is due (the loop
    asks between rounds and wakes from an idle wait for it) and when the relay stops."""

    def __init__(self, write: _Write, every: float) -> None:
        self._write = write
        self._every = every
        self._count = 0
        self._ids: list[str] = []
        self._last = ""
        self._fields: dict[str, object] = {}
        self._written = -math.inf  # time.monotonic() of the last line

    def add(self, marked: list[str], fields: dict[str, object]) -> None:
        if self._count and fields != self._fields:
            self.flush()
        self._ids.extend(marked[: _SENT_IDS - len(self._ids)])
        self._count += len(marked)
        self._last = marked[-1]
        self._fields = fields
        self.flush_if_due()

    def due_in(self) -> float | None:
        """Seconds until the waiting line is due (0 if it is), or None if no line waits."""
        if not self._count:
            return None
        return max(0.0, self._written + self._every - time.monotonic())

    def flush_if_due(self) -> None:
        if self._count and time.monotonic() - self._written >= self._every:
            self.flush()

    def flush(self) -> None:
        """Write the waiting line now, if there is one."""
        if not self._count:
            return
        count, ids, last, fields = self._count, self._ids, self._last, self._fields
        self._count, self._ids = 0, []
        self._written = time.monotonic()
        shown = ids if count == len(ids) else [*ids, f"+{count - len(ids)} more"]
        self._write(logging.INFO, "sent", f"sent {count} event(s)", **fields, ids=shown, last=last)


@dataclass
class RelayCounts:
    """What this relay process has done; the metrics endpoint reads these at scrape time."""

    attempted: int = 0
    succeeded: int = 0
    #: Of ``succeeded``, those whose ACK was a 2xx without identity (``ack="status"``).
    without_identity: int = 0
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_CLASSES, 0))
    poison: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POISON_POLICIES, 0))
    store_errors: int = 0
    consecutive_failures: int = 0
    backoff_s: float = 0.0


#: What one send takes: a copy of the event, or the event as stored.
_E = TypeVar("_E")


class _Sends:
    """The send callbacks given to dispatch. They remember what they sent and how it failed,
    because dispatch re-raises the send's exception without saying which event it was for."""

    def __init__(self, wire: Sender, stopping: Callable[[], bool]) -> None:
        self.wire = wire
        #: The same sender when it is one of ackledger's own (wire/stored.py), else None.
        self.wire_stored: StoredSender | None = stored_sender(wire)
        self.wire_stored_event: StoredEventSender | None = stored_event_sender(wire)
        self.wire_split: SplitSender | None = split_sender(wire)
        self._stopping = stopping
        self.acked = 0
        self.error: BaseException | None = None
        self.failed_id: str | None = None
        self.round = RoundSpan()
        #: Whether this round may make a span (tracing on): per item, asked once a round.
        self._traced = False

    def new_round(self) -> None:
        self.acked = 0
        self.error = None
        self.failed_id = None
        self.wire.refusal = None
        self._traced = self.round.new_round()

    def one(self, event: dict[str, Any]) -> bool:
        return self._one(event, self.wire.send, event)

    def stored_one(self, event: Stored) -> bool:
        """``one`` for an own sender: the event as the outbox stored it (handed to dispatch
        only when ``wire_stored_event`` is set)."""
        if self.wire_stored_event is None:
            raise TypeError("the sender does not take stored events")
        return self._one(event.attributes, self.wire_stored_event.send_stored_event, event)

    def _one(self, attributes: Mapping[str, Any], send: Callable[[_E], bool], event: _E) -> bool:
        if self._stopping():
            raise StopRequested
        if self._traced:
            self.round.sending(attributes.get("partitionkey"))
        try:
            answer = send(event)
        except Exception as exc:
            self.error, self.failed_id = exc, attributes["id"]
            raise
        self.acked += 1
        return answer

    def many(self, events: list[dict[str, Any]]) -> int:
        self.round.sending(events[0].get("partitionkey"))
        try:
            acked = self.wire.send_batch(events)
        except Exception as exc:
            self.error, self.failed_id = exc, events[0]["id"]
            raise
        self.acked += acked
        return acked

    def stored(self, events: list[Stored]) -> int:
        """``many`` for an own sender: the events as the outbox stored them (handed to
        dispatch only when ``wire_stored`` is set)."""
        if self.wire_stored is None:
            raise TypeError("the sender does not take stored events")
        self.round.sending(events[0].attributes.get("partitionkey"))
        try:
            acked = self.wire_stored.send_stored(events)
        except Exception as exc:
            self.error, self.failed_id = exc, events[0].id
            raise
        self.acked += acked
        return acked

    def publish(self, events: list[Stored]) -> object:
        """The first half of ``stored`` (``--inflight``): publish now, judge later."""
        if self.wire_split is None:
            raise TypeError("the sender does not send in two halves")
        self.round.sending(events[0].attributes.get("partitionkey"))
        try:
            return self.wire_split.publish_stored(events)
        except Exception as exc:
            self.error, self.failed_id = exc, events[0].id
            raise

    def confirm(self, flight: object, ids: list[str]) -> int:
        """The second half: the acknowledged prefix of the batch published as ``flight``."""
        if self.wire_split is None:
            raise TypeError("the sender does not send in two halves")
        try:
            acked = self.wire_split.confirmed(flight)
        except Exception as exc:
            self.error, self.failed_id = exc, ids[0]
            raise
        self.acked += acked
        return acked

    def settled(self, flight: object) -> bool:
        """Whether ``confirm(flight)`` would return at once. A failure while looking says
        yes: ``confirm`` then reports it for the right batch."""
        if self.wire_split is None:
            raise TypeError("the sender does not send in two halves")
        try:
            return self.wire_split.settled(flight)
        except Exception:
            return True


class Relay:
    """Relays from ``picker`` (its ``settings`` say how) with ``wire`` (built from the
    settings when not given). ``stop`` ends the loop after the send in flight (default: a
    :class:`StopFlag`, see ``request_stop``); ``log``, if given, gets each line's text instead
    of the relay's logger; ``after_delivery`` is called with each acknowledged id before its
    mark (drills; see dispatch)."""

    def __init__(
        self,
        picker: Picker,
        *,
        wire: Sender | None = None,
        stop: Stop | None = None,
        log: Callable[[str], None] | None = None,
        after_delivery: Callable[[str], object] | None = None,
    ) -> None:
        self.picker = picker
        self.settings = settings = picker.settings
        self.counts = RelayCounts()
        self.stop: Stop = stop if stop is not None else StopFlag()
        self._stopping = self.stop.is_set
        self._log = log
        #: The ``sent`` lines, at most one a second while busy.
        self._sent = _SentLines(self._line, SENT_LINE_EVERY)
        if wire is None:
            wire = sender(
                settings.url,
                timeout=settings.timeout,
                allowed_hosts=settings.allowed_hosts,
                token=settings.token,
                ack=settings.ack,
            )
        self._sends = _Sends(wire, self._stopping)
        #: Batches in flight per round (1: one batch at a time).
        self._window = settings.window
        #: The last round failed: one batch at a time until a round succeeds, so that a held
        #: poison event's retries re-send its own batch only, not a window of them.
        self._narrow = False
        if self._window > 1 and self._sends.wire_split is None:
            if settings.inflight is not None:
                raise ValueError(
                    f"inflight: {wire!r} cannot keep batches in flight (only ackledger's own "
                    "amqp:// and nats:// senders publish and confirm in two halves)"
                )
            self._window = 1  # the default's window, for a sender that cannot keep one
        # ackledger's own senders take the stored text (wire/stored.py); others get copies.
        self._send_stored = None if self._sends.wire_stored is None else self._sends.stored
        self._send_stored_event = (
            None if self._sends.wire_stored_event is None else self._sends.stored_one
        )
        #: The wait when nothing is pending: the poll, or a PostgreSQL notification first.
        self.idle = IdleWait(
            picker.outbox.backend, self.stop, listen=settings.listen, note=self._note
        )
        self._after_one = after_delivery
        self._after_batch = None if after_delivery is None else _each(after_delivery)
        # One strategy marks what was acknowledged: inline (each, last) or behind the next send.
        self._marking = picker.marking()
        #: The permanent failure that stopped the relay (``--on-poison stop``), if any.
        self.poisoned: Failure | None = None
        #: The events this relay quarantined (``--on-poison quarantine``).
        self.quarantined: list[str] = []

    def request_stop(self) -> None:
        """Finish the send in flight, then leave ``run`` (safe to call from a signal handler
        with the default ``stop``)."""
        self.stop.set()

    @property
    def stopping(self) -> bool:
        return self._stopping()

    def run(self) -> int:
        """Relay until asked to stop (returns 0) or stopped by a poison event (EXIT_POISON)."""
        settings = self.settings
        message, fields = self.picker.started()
        self._note(
            logging.INFO, "started", message,
            batch=settings.batch, limit=settings.limit, inflight=self._window,
            on_poison=settings.on_poison, **fields,
        )  # fmt: skip
        try:
            self.idle.start()
            code = self._loop()
        finally:
            self._sent.flush()
            self.idle.close()
            # The last batch's marks land before the relay reports that it stopped.
            self._marking.close()
            # Then nothing needs a lease any more.
            self.picker.stopped(self._note)
        if code == EXIT_STOPPED:
            self._note(logging.INFO, "stopped", "stop requested; the send in flight was finished")
        return code

    def _loop(self) -> int:
        picker = self.picker
        while not self._stopping():
            self._sent.flush_if_due()
            try:
                pick = picker.pick(self._note)
                if pick is None or not self._work(pick):
                    self.idle.wait(self._idle_seconds())
            except Exception as exc:
                # The store failed outside a round (a lease's claim or release, a
                # quarantine): a leasing relay waits it out, the single loop ends.
                wait = picker.unreachable(exc, self._note)
                self.counts.store_errors += 1
                self._wait(wait)
        return EXIT_STOPPED if self.poisoned is None else EXIT_POISON

    def _work(self, pick: Pick) -> bool:
        """Rounds on one pick until it is drained, fails or has had its turn; returns False
        if it had nothing to send (the loop then polls)."""
        busy = False
        try:
            while True:
                marked = self.step(pick.source, 1 if self._narrow else self._window)
                if marked:
                    busy = True
                    self._on_success(pick, marked)
                if self._stopping() or not pick.again(marked):
                    break
            pick.release()
        except StopRequested:
            pick.release()  # stopped between two sends: everything sent so far is marked
        except LeaseLost as exc:
            pick.lost(exc, self._note)
            return True
        except Exception as exc:
            self._narrow = True
            failure = self.classify(pick.source, exc)
            if failure.kind == PERMANENT:
                self._on_poison(pick, failure)
            else:
                self._wait(pick.park(self._on_transient(pick, failure), self._note))
            return True
        finally:
            pick.done()
        return busy

    def step(self, source: RelaySource, window: int) -> list[str]:
        """One dispatch call, with up to ``window`` batches in flight in batch rounds; returns
        the ids marked sent, raises what stopped it."""
        self._sends.new_round()
        before = self.counts.succeeded
        try:
            if window > 1:
                return dispatch_inflight(
                    source, source.pending_rows, self._sends.publish, self._sends.confirm,
                    self._sends.settled,
                    limit=self.settings.limit, inflight=window,
                    batches=BATCHES_PER_STEP,
                    stopping=self._stopping, after_delivery=self._after_batch,
                )  # fmt: skip
            if self.settings.batch:
                return dispatch_batch_marking(
                    source, self._sends.many, self.settings.limit, self._after_batch,
                    self._marking, send_stored=self._send_stored,
                )  # fmt: skip
            return dispatch_marking(
                source, self._sends.one, self.settings.limit, self._after_one, self._marking,
                send_stored=self._send_stored_event,
            )  # fmt: skip
        finally:
            self.counts.succeeded = before + self._sends.acked
            self.counts.attempted += self._sends.acked
            if self.settings.ack == "status":
                self.counts.without_identity += self._sends.acked
            self._sends.round.end(self._sends.acked, self._sends.error)

    def classify(self, source: RelaySource, exc: Exception) -> Failure:
        """Turn what stopped a round into a Failure, counted in the relay's metrics."""
        sends = self._sends
        refusal = sends.wire.refusal
        if refusal is not None and isinstance(exc, NotAcknowledged):
            failure = failure_of(exc, refusal)  # a batch whose answer refused one item
            # dispatch_batch recorded "only n of m acknowledged"; keep the sink's reason.
            source.amend_error(refusal.event_id, failure.message)
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

    def _on_success(self, pick: Pick, marked: list[str]) -> None:
        self._narrow = False
        failures = pick.backoff.failures
        if failures:
            self._note(
                logging.INFO, "recovered", f"sending again after {failures} failed round(s)",
                **pick.fields,
            )  # fmt: skip
            pick.recovered()
        self.counts.consecutive_failures = 0
        self.counts.backoff_s = 0.0
        self._sent.add(marked, pick.fields)

    def _idle_seconds(self) -> float:
        """The idle wait: the poll interval, or less if a ``sent`` line is due sooner."""
        due = self._sent.due_in()
        interval = self.settings.poll_interval
        return interval if due is None else min(interval, due)

    def _on_transient(self, pick: Pick, failure: Failure) -> float:
        delay = pick.backoff.next_delay()
        asked = ""
        if failure.retry_after is not None:
            # The receiver said when: at least that long, never past the cap.
            delay = max(delay, min(failure.retry_after, self.settings.max_backoff))
            asked = f" (Retry-After {failure.retry_after:g}s, capped at --max-backoff)"
        self.counts.consecutive_failures += 1
        self.counts.backoff_s = delay
        self._note(
            logging.WARNING, "send-failed",
            f"{failure.message}; retrying in {delay:.2f}s{asked}",
            id=failure.event_id or "-", failure_class=failure.kind,
            failures_in_a_row=pick.backoff.failures, **pick.fields,
        )  # fmt: skip
        return delay

    def _on_poison(self, pick: Pick, failure: Failure) -> None:
        """Alert on a permanent failure, then hold, stop or quarantine it, as the policy says."""
        event_id = failure.event_id or "?"
        policy = self.settings.on_poison
        self.counts.poison[policy] += 1
        self._note(
            logging.ERROR, "poison",
            f"ALERT: the sink refused event {event_id} permanently ({failure.message}); "
            f"everything behind it is blocked; policy --on-poison {policy}",
            id=event_id, status=failure.status if failure.status is not None else "-",
            **pick.fields,
        )  # fmt: skip
        if policy == "hold":
            # Treated as a failure that waits the longest backoff: alive, alerting each time.
            wait = self.settings.max_backoff
            self._note(
                logging.ERROR, "holding-poison",
                holding_poison(event_id, self.picker.outbox.backend.location, wait),
                id=event_id, **pick.fields,
            )  # fmt: skip
            self._wait(pick.park(wait, self._note))
            return
        if policy == "stop" or failure.event_id is None:
            self.poisoned = failure
            self._note(
                logging.ERROR, "stopped-on-poison",
                stopping_on_poison(event_id, self.picker.outbox.backend.location),
                id=event_id, **pick.fields,
            )  # fmt: skip
            self.stop.set()
        else:
            self._quarantine(pick, failure.event_id, quarantine_reason(failure))
        pick.release()

    def _quarantine(self, pick: Pick, event_id: str, reason: str) -> None:
        try:
            seq = pick.source.quarantine(event_id, reason)
        except (KeyError, ValueError) as exc:
            # Someone else already moved it (an operator, or another relay): nothing to do.
            self._note(
                logging.WARNING, "quarantine-skipped", describe(exc), id=event_id, **pick.fields
            )
            return
        self.quarantined.append(event_id)
        self._note(
            logging.ERROR, "quarantined",
            f"event {event_id} quarantined; the events behind it go on (a reorder), "
            "requeue it once fixed", id=event_id, seq=seq, **pick.fields,
        )  # fmt: skip

    def _note(self, level: int, event: str, message: str, **fields: object) -> None:
        self._sent.flush()  # a waiting ``sent`` line comes first: the lines keep their order
        self._line(level, event, message, **fields)

    def _line(self, level: int, event: str, message: str, **fields: object) -> None:
        if self._log is not None:
            self._log(message)
        else:
            log_event(logger, level, event, message, **self.picker.fields, **fields)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stop.wait(seconds)


def _each(after_delivery: Callable[[str], object]) -> Callable[[list[str]], None]:
    """A batch round's ``after_delivery``: the per-event callback, once per acknowledged id."""

    def after_batch(ids: list[str]) -> None:
        for event_id in ids:
            after_delivery(event_id)

    return after_batch
