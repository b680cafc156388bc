"""Batch rounds with up to N batches in flight to a broker (``relay --inflight N``; the
relay's default there is 8).

``dispatch_batch`` sends a batch, waits for its ACKs, marks them, and only then selects the
next one; to a broker, each batch then waits in series for the selection, the publish and the
broker's fsync for its confirms, and the marks' commit. Here up to N batches are published
before the oldest one's ACKs are awaited, with the same rules (CONTRACT sections 4, 5, 5b):

- batch k is marked only on its own ACKs (the split send of an own sender, ``SplitSender``),
  and only after every batch before it was wholly acknowledged and marked;
- the first failure, in whichever batch, stops the round: the acknowledged prefix of the
  failed batch is marked, nothing after it is, even if the broker confirmed it; everything
  unmarked stays pending and is sent again later (the inbox's identity, and JetStream's
  ``Nats-Msg-Id``, absorb the duplicates);
- the next selection skips the events in flight, and reads from the outbox only (no write
  is open while the broker is awaited: each batch's marks are their own transaction);
- a stop request publishes nothing more; what is in flight is awaited and marked.

The price is the kill -9 bound: a dead relay leaves up to N batches sent and unmarked, where
``--inflight 1`` leaves one, and all of them are re-sent (the inbox absorbs them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.exact import is_int
from ..errors import NotAcknowledged
from ..wire.stored import Stored
from .dispatch import Source, _as_stored, _note_failure

#: How many batches one call sends at most before its window is drained and it returns.
MAX_INFLIGHT = 16

Select = Callable[[Collection[str], int], Sequence[Mapping[str, Any]]]
Publish = Callable[[list[Stored]], object]
Confirm = Callable[[object, list[str]], object]
#: Whether a batch's ACKs are all in (``confirm`` would not wait for them).
Settled = Callable[[object], bool]


def check_inflight(value: object) -> int:
    if not is_int(value) or not 1 <= value <= MAX_INFLIGHT:
        raise ValueError(f"inflight: must be a whole number of batches from 1 to "
                         f"{MAX_INFLIGHT}, got {value!r}")  # fmt: skip
    assert isinstance(value, int)
    return value


@dataclass
class _Batch:
    ids: list[str]
    #: The sender's handle, or None when publishing it failed with ``error``.
    flight: object = None
    error: Exception | None = None


def dispatch_inflight(
    outbox: Source,
    select: Select,
    publish: Publish,
    confirm: Confirm,
    settled: Settled,
    *,
    limit: int,
    inflight: int,
    batches: int,
    stopping: Callable[[], bool],
    after_delivery: Callable[[list[str]], object] | None = None,
) -> list[str]:
    """Send up to ``batches`` batches of up to ``limit`` events from ``select`` (which skips
    the ids it is given: those in flight), at most ``inflight`` at a time; returns the ids
    marked, in order, or raises the first failure once everything before it is marked."""
    window: deque[_Batch] = deque()
    flying: set[str] = set()
    marked: list[str] = []
    published = 0
    while True:
        while len(window) < inflight and published < batches and not stopping():
            if window and window[-1].error is not None:
                break  # the newest publish failed: nothing is published after a failure
            selection = select(flying, limit)
            if not selection:
                break
            stored = _as_stored(selection)
            if stored is None:
                raise TypeError(
                    "inflight: the selection must be read from an outbox (its stored rows)"
                )
            batch = _Batch([item.id for item in stored])
            try:
                batch.flight = publish(stored)
            except Exception as exc:
                batch.error = exc
            window.append(batch)
            flying.update(batch.ids)
            published += 1
        if not window:
            return marked
        ids, failure = _acknowledged(outbox, window, flying, confirm, settled)
        if ids:
            if after_delivery is not None:
                after_delivery(ids)
            outbox.mark_sent_many(ids, attempted=True)
            marked.extend(ids)
        if failure is not None:
            raise failure


def _acknowledged(
    outbox: Source,
    window: deque[_Batch],
    flying: set[str],
    confirm: Confirm,
    settled: Settled,
) -> tuple[list[str], Exception | None]:
    """The oldest batch's acknowledged ids (waiting for its ACKs), then those of the batches
    after it whose ACKs are all in already, up to the first one not wholly acknowledged; and
    the failure that stops the round there, if any (noted in the outbox). One commit then
    marks them all: when the marks' commit is slower than the broker, several batches share
    it, still in order and each on its own ACKs."""
    ids: list[str] = []
    while True:
        batch = window.popleft()
        flying.difference_update(batch.ids)
        try:
            acked = _acked(outbox, batch, confirm)
        except Exception as exc:
            return ids, exc
        ids.extend(batch.ids[:acked])
        if acked < len(batch.ids):
            later = sum(len(other.ids) for other in window)
            refusal = NotAcknowledged(
                f"only {acked} of {len(batch.ids)} events were acknowledged; "
                f"{batch.ids[acked]!r} and the {len(batch.ids) - acked - 1} after it stay "
                f"pending (and {later} sent after them, unmarked)"
            )
            _note_failure(outbox, batch.ids[acked], refusal)
            return ids, refusal
        if not window:
            return ids, None
        following = window[0]
        if following.error is None and not settled(following.flight):
            return ids, None


def _acked(outbox: Source, batch: _Batch, confirm: Confirm) -> int:
    """The batch's acknowledged prefix; raises (its failure noted) if there is none to count."""
    if batch.error is not None:
        _note_failure(outbox, batch.ids[0], batch.error)
        raise batch.error
    try:
        answer = confirm(batch.flight, batch.ids)
    except Exception as exc:
        _note_failure(outbox, batch.ids[0], exc)
        raise
    if not is_int(answer) or not 0 <= answer <= len(batch.ids):
        refusal = NotAcknowledged(
            f"confirmed returned {answer!r}; expected a count from 0 to {len(batch.ids)}"
        )
        _note_failure(outbox, batch.ids[0], refusal)
        raise refusal
    assert isinstance(answer, int)
    return answer
