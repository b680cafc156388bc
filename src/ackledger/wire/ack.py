"""What counts as an acknowledgement: pure rules over an answer's status and body.

A single event is acknowledged only by a 200 whose JSON object says ``"ack": true`` and names
that very event's identity (``id`` and ``source``); under ``ack="status"`` (receivers that
echo no identity) any 2xx is the ACK, body unread. A batch answer acknowledges the prefix of
items, in order, that each name the identity sent at their place with ``"ack": true``; an item
naming another ends the prefix there; an item that is not an object, or more items than were
sent, make the whole answer unusable. Nothing here touches a socket.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.json_text import loads
from ..errors import NotAcknowledged


@dataclass(frozen=True)
class BatchAnswer:
    #: How many leading events were acknowledged in order.
    acked: int
    #: The problem the sink reported for the first unacknowledged item, if any.
    error: dict[str, Any] | None


#: What an HTTP answer must be to acknowledge: v2's identity echo, or any 2xx.
ACK_MODES = ("exact", "status")
#: The statuses whose ``Retry-After`` says when to try again.
_WAIT_STATUSES = frozenset({429, 503})


def check_ack(value: object) -> str:
    if not isinstance(value, str) or value not in ACK_MODES:
        raise ValueError(f"ack: must be 'exact' or 'status', got {value!r}")
    return value


def retry_after_seconds(value: bytes | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` value in seconds from ``now``: delay-seconds or an HTTP-date (a
    date passed is 0); None when absent or neither."""
    if value is None:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(int(text[:12]))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a date without a zone is taken as such
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def refusal(
    status: int, data: bytes, retry_after: bytes | None = None, wanted: str = "200"
) -> NotAcknowledged:
    """The refusal that a status other than the ACK's (``wanted``) stands for, with a 429's or
    503's wait."""
    wait = retry_after_seconds(retry_after) if status in _WAIT_STATUSES else None
    return NotAcknowledged(status_message(status, data, wanted), status=status, retry_after=wait)


def status_ack(status: int, data: bytes, retry_after: bytes | None = None) -> bool:
    """``ack="status"``: any 2xx acknowledges, whatever the body; anything else is refused."""
    if not 200 <= status < 300:
        raise refusal(status, data, retry_after, "2xx")
    return True


def answer_json(status: int, data: bytes, retry_after: bytes | None = None) -> Any:
    """The parsed JSON of a 200 answer; any other status, or a body not JSON, is refused."""
    if status != 200:
        raise refusal(status, data, retry_after)
    try:
        return loads(data)
    except (ValueError, UnicodeDecodeError):
        raise NotAcknowledged("answer is not valid JSON", status=status) from None


def status_message(status: int, data: bytes, wanted: str = "200") -> str:
    """``HTTP <status> instead of 200``, with the problem's detail when the body has one."""
    detail = ""
    try:
        problem = json.loads(data)
        if isinstance(problem, dict) and isinstance(problem.get("detail"), str):
            detail = f": {problem['detail'][:200]}"
    except (ValueError, UnicodeDecodeError):
        pass
    return f"HTTP {status} instead of {wanted}{detail}"


def exact_ack(status: int, answer: Any, event: Mapping[str, Any]) -> bool:
    """True when ``answer`` acknowledges exactly ``event``; raises NotAcknowledged if not."""
    if not isinstance(answer, dict):
        raise NotAcknowledged("answer is not a JSON object", status=status)
    if answer.get("ack") is not True:
        raise NotAcknowledged(f"answer has ack={answer.get('ack')!r}, not true", status=status)
    if answer.get("id") != event["id"] or answer.get("source") != event["source"]:
        _same_identity(status, answer, event, "ACK")  # says which one differs
    return True


def _same_identity(status: int, ack: dict[str, Any], event: Mapping[str, Any], what: str) -> None:
    reason = _other_identity(ack, event, what)
    if reason is not None:
        raise NotAcknowledged(reason, status=status)


def _other_identity(ack: dict[str, Any], event: Mapping[str, Any], what: str) -> str | None:
    """Which identity attribute ``ack`` names differently from ``event``, in words; None if
    it names the same event."""
    for name in ("id", "source"):
        if ack.get(name) != event[name]:
            return f"{what} names {name} {ack.get(name)!r}, not {event[name]!r}"
    return None


def acked_prefix(status: int, answer: Any, sent: Sequence[Mapping[str, Any]]) -> BatchAnswer:
    """How many of ``sent`` the batch ``answer`` acknowledged in order, and the sink's error.

    The prefix ends at the first item that is not an exact ACK of the event at its place: an
    item naming another event acknowledges nothing, yet the items before it stay acknowledged.
    """
    if not isinstance(answer, dict) or not isinstance(answer.get("acks"), list):
        raise NotAcknowledged("batch answer has no 'acks' list", status=status)
    acks: list[Any] = answer["acks"]
    if len(acks) > len(sent):
        raise NotAcknowledged("batch answer acknowledges more items than were sent")
    acked = 0
    reason: str | None = None
    for item, ack in zip(sent, acks, strict=False):
        if not isinstance(ack, dict):
            raise NotAcknowledged(f"batch answer item {acked} is not an object", status=status)
        if ack.get("id") != item["id"] or ack.get("source") != item["source"]:
            # Only now the message's words: formatted for every item, they cost more than
            # the check itself.
            reason = _other_identity(ack, item, f"batch answer item {acked}")
            break
        if ack.get("ack") is not True:
            break
        acked += 1
    error = answer.get("error")
    if reason is not None:
        # The sink's error belongs to the item it failed on; a foreign ACK is our own finding.
        return BatchAnswer(acked, {"title": "not acknowledged", "detail": reason})
    return BatchAnswer(acked, error if isinstance(error, dict) else None)
