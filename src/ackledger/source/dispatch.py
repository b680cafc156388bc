"""Send what is pending, in order, and mark only what was exactly acknowledged.

The rules (CONTRACT section 4): the read of ``pending`` is over before the first send, so no
lock is held while the network is slow; the sender gets a copy, and the mark uses the id that
was *selected*, so a callback that edits its argument cannot mark another event; the first
failure stops the batch and is re-raised as the same object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from .._core.exact import is_int
from .._core.telemetry import span, tracing
from ..errors import NotAcknowledged
from ..store.pending import PendingRow
from ..wire.stored import Stored, stored_event_sender, stored_sender
from .marking import EACH, Marking, MarksBehind, marking_for

Send = Callable[[dict[str, Any]], object]
SendBatch = Callable[[list[dict[str, Any]]], object]
#: An own sender's ``send_stored`` (``wire/stored.py``): the stored text instead of copies.
SendStored = Callable[[list[Stored]], object]
#: An own sender's ``send_stored_event``: one event's stored text instead of a copy.
SendStoredEvent = Callable[[Stored], object]
#: What one send takes: a copy of the event, or the event as stored.
_P = TypeVar("_P")


class Source(Protocol):
    """What dispatch reads from and marks in: an ``Outbox``, or one partition of it under a
    lease (``ackledger.relay.leases.LeasedPartition``, whose marks check the lease)."""

    def pending(self, limit: int = ...) -> list[dict[str, Any]]: ...

    def mark_sent(self, event_id: str, *, attempted: bool = ..., durable: bool = ...) -> None: ...

    def mark_sent_many(
        self, event_ids: Sequence[str], *, attempted: bool = ..., durable: bool = ...
    ) -> None: ...

    def record_failure(self, event_id: str, error: str) -> None: ...


class StopRequested(BaseException):
    """Raised by a send callback to end a batch before its next send, when the process was
    asked to stop. A BaseException so that dispatch records no failed attempt: nothing was
    sent."""


def _copy(item: Mapping[str, Any]) -> dict[str, Any]:
    """The event without its ``seq``, nested values copied too: nothing the sender does to
    it reaches the selection (a JSON value's copy; cheaper than ``copy.deepcopy``)."""
    return {name: _copy_json(value) for name, value in item.items() if name != "seq"}


def _copy_json(value: Any) -> Any:
    if type(value) is dict:
        return {name: _copy_json(inner) for name, inner in value.items()}
    if type(value) is list:
        return [_copy_json(inner) for inner in value]
    return value


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _note_failure(outbox: Source, event_id: str, exc: BaseException) -> bool:
    """Record a failed send (a durable write); False if even that failed."""
    # Bookkeeping must never replace the error the caller has to see.
    try:
        outbox.record_failure(event_id, _describe(exc))
    except Exception:
        return False
    return True


def _failed(outbox: Source, marking: Marking, event_id: str, exc: BaseException) -> bool:
    """A failed send: the marks in flight land first, so everything acknowledged before it
    is marked, as dispatch promises (if they failed, their events stay pending and go again:
    the send's failure is what the caller must see); then the failure is recorded."""
    with contextlib.suppress(Exception):
        marking.settle()
    return _note_failure(outbox, event_id, exc)


def dispatch(
    outbox: Source,
    send: Send,
    limit: int = 16,
    *,
    after_delivery: Callable[[str], object] | None = None,
    mark_sync: str = "each",
    behind: MarksBehind | None = None,
) -> list[str]:
    """CONTRACT section 4. ``mark_sync="last"`` commits every mark as it is earned but waits
    for the disk only once per call: the last mark (or the recorded failure) is a durable
    commit, and on a database in WAL mode that makes every earlier mark of the call durable
    too. On a power loss in between, the events whose marks were lost are sent again and the
    sink's inbox acknowledges them as duplicates; a process crash loses nothing. It saves one
    fsync per event but the last; the default ``"each"`` makes every mark durable on its own.

    With ``behind`` (``relay --pipeline``), each acknowledged event's mark, still a durable
    commit of its own, is handed to it and committed while the next event is sent; the
    returned ids then include the last one, whose mark may still be in flight (``behind``'s
    ``close`` or next hand-over waits for it). See ``source.marking``.
    """
    marking = marking_for(mark_sync)
    if behind is not None:
        check_behind(outbox, behind)
        if marking is not EACH:
            raise ValueError(
                f"mark_sync: every mark behind is a durable commit of its own; {mark_sync!r} "
                "does not combine with behind"
            )
        marking = behind
    return dispatch_marking(
        outbox, send, limit, after_delivery, marking, send_stored=own_stored_event(send)
    )


def check_behind(outbox: Source, behind: MarksBehind) -> None:
    if behind.reader is not outbox:
        raise ValueError("behind: must read from the same Outbox that is given as outbox")


def dispatch_marking(
    outbox: Source,
    send: Send,
    limit: int,
    after_delivery: Callable[[str], object] | None,
    marking: Marking,
    *,
    send_stored: SendStoredEvent | None = None,
) -> list[str]:
    """``dispatch`` with its marking strategy given as an object (``source.marking``). With
    ``send_stored`` (an own sender's), an event read from the outbox goes to it as stored
    (``wire/stored.py``) rather than as a copy to ``send``."""
    lazy = not marking.durable_each
    selection = marking.select_rows(outbox, limit)
    if not selection:
        marking.settle()  # nothing more to send: let the last mark land before going idle
        return []
    marked: list[str] = []
    unsynced: str | None = None  # the latest mark not yet made durable
    last = len(selection) - 1
    # Asked once a call (at most 16 events): the span's name is made only when tracing is on,
    # since reading a stored row's ``type`` would parse its text.
    traced = tracing()
    try:
        for index, item in enumerate(selection):
            row = type(item) is PendingRow
            event_id: str = item.id if row else item["id"]  # type: ignore[attr-defined]
            try:
                if send_stored is not None and row:
                    stored = Stored(item, item.text)  # type: ignore[attr-defined]
                    answer = _traced(send_stored, stored, item) if traced else send_stored(stored)
                else:
                    # A row's copy is its stored text parsed anew: one parse, where the
                    # parsed event and a walk copying it were two. The span reads it first.
                    event = _copy_of(item)
                    answer = _traced(send, event, event) if traced else send(event)
            except Exception as exc:
                if _failed(outbox, marking, event_id, exc):
                    unsynced = None
                raise
            if answer is not True:
                refusal = NotAcknowledged(
                    f"send returned {answer!r} for event {event_id!r}; only True counts as an ACK"
                )
                if _failed(outbox, marking, event_id, refusal):
                    unsynced = None
                raise refusal
            if after_delivery is not None:
                after_delivery(event_id)
            if marking.hand_over_one(event_id):
                marked.append(event_id)
                continue  # its mark is committed behind the next send
            durable = not lazy or index == last
            outbox.mark_sent(event_id, attempted=True, durable=durable)
            unsynced = None if durable else event_id
            marked.append(event_id)
    finally:
        if unsynced is not None:
            # Left early (a stop request, a failed mark): marking the latest one again is a
            # durable write, which makes every earlier relaxed mark durable as well.
            with contextlib.suppress(Exception):
                outbox.mark_sent(unsynced)
    return marked


def _traced(send: Callable[[_P], object], payload: _P, event: Mapping[str, Any]) -> object:
    """``send(payload)`` in a span that is a child of the producer's (its context is stored
    with the event)."""
    with span(f"send {event['type']}", event, kind="producer"):
        return send(payload)


def dispatch_batch(
    outbox: Source,
    send_batch: SendBatch,
    limit: int = 16,
    *,
    after_delivery: Callable[[list[str]], object] | None = None,
    behind: MarksBehind | None = None,
) -> list[str]:
    """CONTRACT section 5b. With ``behind`` (``relay --batch --pipeline``), a wholly
    acknowledged batch's marks are handed to it and committed while the caller goes on to the
    next batch, whose selection skips them; anything else waits for those marks first and is
    then handled here as always. See ``marks_behind``."""
    if behind is not None:
        check_behind(outbox, behind)
    return dispatch_batch_marking(
        outbox, send_batch, limit, after_delivery, behind or EACH,
        send_stored=own_stored(send_batch),
    )  # fmt: skip


def own_stored(send_batch: object) -> SendStored | None:
    """The ``send_stored`` of the sender whose own, unwrapped ``send_batch`` this is, or None.

    Only then may the stored text go instead of copies: any other callable (a lambda, a user's
    wrapper that may change the events before it sends them) gets the copies."""
    owner = stored_sender(getattr(send_batch, "__self__", None))
    if owner is None or not _is_own_method(send_batch, owner, "send_batch"):
        return None
    return owner.send_stored


def own_stored_event(send: object) -> SendStoredEvent | None:
    """The ``send_stored_event`` of the sender whose own, unwrapped ``send`` this is, or None
    (``own_stored`` for ``dispatch``: anything else gets a copy)."""
    owner = stored_event_sender(getattr(send, "__self__", None))
    if owner is None or not _is_own_method(send, owner, "send"):
        return None
    return owner.send_stored_event


def _is_own_method(bound: object, owner: object, name: str) -> bool:
    method = getattr(bound, "__func__", None)
    return method is not None and getattr(type(owner), name, None) is method


def _as_stored(selection: Sequence[Mapping[str, Any]]) -> list[Stored] | None:
    """The selection as stored events, or None if one of them was not read from an outbox."""
    stored: list[Stored] = []
    for item in selection:
        if type(item) is not PendingRow:
            return None
        stored.append(Stored(item, item.text))
    return stored


def _copies(selection: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A user's ``send_batch`` gets fresh deep copies (``_copy_of``)."""
    return [_copy_of(item) for item in selection]


def _copy_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh deep copy for a user's sender: of a row, its stored text parsed anew (one
    parse, where the parsed event and a copy of it were two walks of the event)."""
    return item.copy_event() if type(item) is PendingRow else _copy(item)


def dispatch_batch_marking(
    outbox: Source,
    send_batch: SendBatch,
    limit: int,
    after_delivery: Callable[[list[str]], object] | None,
    marking: Marking,
    *,
    send_stored: SendStored | None = None,
) -> list[str]:
    """``dispatch_batch`` with its marking strategy given as an object (``source.marking``).
    With ``send_stored`` (an own sender's), the selection goes to it as the outbox stored it
    (``wire/stored.py``) rather than as copies to ``send_batch``."""
    selection = marking.select_rows(outbox, limit)
    if not selection:
        marking.settle()  # nothing more to send: let the last marks land before going idle
        return []
    ids: list[str] = [item["id"] for item in selection]
    stored = None if send_stored is None else _as_stored(selection)
    try:
        with span(
            "send batch", kind="producer", attributes={"messaging.batch.message_count": len(ids)}
        ):
            if stored is not None and send_stored is not None:
                answer = send_stored(stored)
            else:
                answer = send_batch(_copies(selection))
    except Exception as exc:
        _failed(outbox, marking, ids[0], exc)
        raise
    if not is_int(answer) or not 0 <= answer <= len(ids):
        refusal = NotAcknowledged(
            f"send_batch returned {answer!r}; expected a count from 0 to {len(ids)}"
        )
        marking.settle()
        _note_failure(outbox, ids[0], refusal)
        raise refusal
    acked: Sequence[str] = ids[:answer]
    if acked and after_delivery is not None:
        after_delivery(list(acked))
    if answer == len(ids) and marking.hand_over(acked):
        return list(acked)
    marking.settle()
    if acked:
        outbox.mark_sent_many(acked, attempted=True)
    if answer < len(ids):
        refusal = NotAcknowledged(
            f"only {answer} of {len(ids)} events were acknowledged; "
            f"{ids[answer]!r} and the {len(ids) - answer - 1} after it stay pending"
        )
        _note_failure(outbox, ids[answer], refusal)
        raise refusal
    return list(acked)
