"""The worker's side of the ledger service: ask for the delivery of a business key over HTTP.

Same safety rules as ``send_http``: the URL is checked before any connection (loopback unless
a host is allowed explicitly; the ledger's base URL ``http://HOST:PORT`` or its ``/deliveries``
URL, nothing else), no proxy variables are read nor redirects followed, and answers are read
up to a cap. Each call is one request on its own connection: a worker asks once.

What is sent and how an answer is read is written once, in ``protocol`` (sans-IO);
:class:`LedgerClient` carries those calls over a blocking socket and
:class:`AsyncLedgerClient` over an asyncio stream (``transport``), so the two clients differ
only in how they wait.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from typing import Any, TypeVar

from ..wire.targets import check_timeout
from ..wire.token import Token
from .ledger import LedgerRequest, check_report, check_request
from .outcomes import Report
from .protocol import (
    DELIVERIES_PATH,
    MAX_LISTING_BYTES,
    Call,
    deliveries_target,
    delivery_call,
    read_call,
    report_call,
)
from .transport import send, send_async

__all__ = [
    "DELIVERIES_PATH",
    "MAX_LISTING_BYTES",
    "AsyncLedgerClient",
    "LedgerClient",
    "complete_delivery",
    "deliveries_target",
    "read_ledger",
    "release_delivery",
    "request_delivery",
]

T = TypeVar("T")

#: A claim lasts this long unless the caller asks otherwise (``deliver --claim-ttl``'s default).
DEFAULT_CLAIM_TTL = 300.0


def request_delivery(
    url: str,
    req: LedgerRequest,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, Any]:
    """POST one request; returns the ledger's answer (``delivery_no``, ``duplicate``,
    ``attempt``, ``state``, ``ledger``; ``claim`` when one was asked for and taken). A 409
    raises :class:`InFlight`, a 422 :class:`Conflict`, a 400 :class:`InvalidEvent`, any
    other failure :class:`NotAcknowledged` (or an ``OSError`` for the connection)."""
    call = delivery_call(url, req, allowed_hosts)
    return send(call, timeout=check_timeout(timeout), token=token)


def complete_delivery(
    url: str,
    report: Report,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, Any]:
    """POST ``/deliveries/complete``: the work of a key (or of a claim's delivery) finished.
    Returns the delivery's state and result; a 404 raises :class:`UnknownDelivery`."""
    call = report_call(url, "complete", report, allowed_hosts)
    return send(call, timeout=check_timeout(timeout), token=token)


def release_delivery(
    url: str,
    report: Report,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> dict[str, Any]:
    """POST ``/deliveries/release``: the claim's work failed with ``report.exit_status``."""
    call = report_call(url, "release", report, allowed_hosts)
    return send(call, timeout=check_timeout(timeout), token=token)


def read_ledger(
    url: str,
    what: str,
    case_id: str | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
) -> Any:
    """GET ``healthz``, ``deliveries`` or ``attempts`` from the ledger whose ``/deliveries``
    URL (or base URL) is ``url``; returns the parsed JSON."""
    call = read_call(url, what, case_id, allowed_hosts)
    return send(call, timeout=check_timeout(timeout), token=token)


class _Calls:
    """The checks and calls both clients share: every method here raises on bad input
    before anything is sent, and returns the :class:`Call` to make."""

    def __init__(
        self,
        url: str,
        *,
        pod_uid: str | None = None,
        timeout: float = 5.0,
        allowed_hosts: Iterable[str] | None = None,
        token: Token | str | None = None,
    ) -> None:
        self._hosts = None if allowed_hosts is None else tuple(allowed_hosts)
        deliveries_target(url, self._hosts)  # UnsafeTarget now, not at the first request
        self.url = url
        self.timeout = check_timeout(timeout)
        self.pod_uid = (
            pod_uid if pod_uid is not None else os.environ.get("POD_UID") or str(uuid.uuid4())
        )
        check_request("x", "x", self.pod_uid, "idempotent", None)  # InvalidEvent naming pod_uid
        self._token = token if token is None or isinstance(token, Token) else Token(token)

    def _request_call(
        self, case_id: str, work_id: str, mode: str, payload: dict[str, Any] | None
    ) -> Call[dict[str, Any]]:
        req = check_request(case_id, work_id, self.pod_uid, mode, payload)
        return delivery_call(self.url, req, self._hosts)

    def _claim_call(
        self,
        case_id: str,
        work_id: str,
        pod_uid: str | None,
        claim_ttl: float,
        payload: dict[str, Any] | None,
    ) -> Call[dict[str, Any]]:
        if claim_ttl is None:
            raise TypeError("claim_ttl: must be a number of seconds, got None")
        who = self.pod_uid if pod_uid is None else pod_uid
        req = check_request(case_id, work_id, who, "idempotent", payload, claim_ttl=claim_ttl)
        return delivery_call(self.url, req, self._hosts)

    def _complete_call(
        self, case_id: str, work_id: str, result: object, claim: str | None
    ) -> Call[dict[str, Any]]:
        report = check_report(case_id, work_id, claim=claim, pod_uid=self.pod_uid, result=result)
        return report_call(self.url, "complete", report, self._hosts)

    def _release_call(
        self, case_id: str, work_id: str, claim: str, exit_status: int | None
    ) -> Call[dict[str, Any]]:
        if claim is None:
            raise TypeError("claim: release needs the token of the claim to give back, got None")
        report = check_report(case_id, work_id, claim=claim, exit_status=exit_status)
        return report_call(self.url, "release", report, self._hosts)

    def _read_call(self, what: str, case_id: str | None) -> Call[Any]:
        if case_id is not None:
            check_request(case_id, "x", "x", "idempotent", None)  # InvalidEvent naming case_id
        return read_call(self.url, what, case_id, self._hosts)


class LedgerClient(_Calls):
    """A worker's handle on a ledger service: ``request`` asks for the delivery of a business
    key (one HTTP request, as ``ackledger deliver`` makes); ``claim``, ``complete`` and
    ``release`` are the protocol of ``ackledger deliver --run``, for a Job written in Python;
    ``deliveries``, ``attempts`` and ``health`` read what the ledger holds.

    ``url`` is the ledger's base URL (``http://HOST:PORT``) or its ``/deliveries`` URL, checked
    here, before any connection. ``pod_uid`` names this execution in the ledger's attempts:
    by default ``$POD_UID`` (the Kubernetes downward API), else a random UUID for this client.
    ``token`` is sent as ``Authorization: Bearer`` to a ledger that requires one.
    """

    def request(
        self,
        case_id: str,
        work_id: str,
        *,
        mode: str = "idempotent",
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The delivery of ``(case_id, work_id)``: ``{"delivery_no", "duplicate", "attempt",
        "ledger"}``. Bad arguments raise InvalidEvent before any request; the same key with
        another payload raises Conflict; an unreachable or failing ledger OSError or
        NotAcknowledged (worth retrying)."""
        return self._send(self._request_call(case_id, work_id, mode, payload))

    def claim(
        self,
        case_id: str,
        work_id: str,
        *,
        pod_uid: str | None = None,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``request`` that also takes the claim of the key's work: the answer has ``"state"``;
        while it is ``"in_progress"`` it has ``"claim": {"token", "taken_over", "ttl"}`` too,
        and this execution may do the work, then ``complete`` or ``release`` it with that
        token. A ``"completed"`` answer has no claim: the work is done (``"result"``). A live
        claim of another execution, younger than ``claim_ttl`` seconds, raises
        :class:`ackledger.InFlight` (its ``retry_after`` says when it could be taken over)."""
        return self._send(self._claim_call(case_id, work_id, pod_uid, claim_ttl, payload))

    def complete(
        self, case_id: str, work_id: str, *, result: object = None, claim: str | None = None
    ) -> dict[str, Any]:
        """Record the key's work as finished, with an optional JSON ``result``; returns the
        delivery's ``state`` and ``result`` (the first completion's, when it was already
        completed, with ``"duplicate": true``). Unknown key or claim: UnknownDelivery."""
        return self._send(self._complete_call(case_id, work_id, result, claim))

    def release(
        self, case_id: str, work_id: str, *, claim: str, exit_status: int | None = None
    ) -> dict[str, Any]:
        """Give the claim back (the work failed, ``exit_status`` optionally says how): the
        work stays in progress and the next ``claim`` takes it at once."""
        return self._send(self._release_call(case_id, work_id, claim, exit_status))

    def deliveries(self, case_id: str | None = None) -> Any:
        """The deliveries of one business scope, or every one (``GET /deliveries``)."""
        return self._send(self._read_call("deliveries", case_id))

    def attempts(self, case_id: str | None = None) -> Any:
        """Every request made, by which execution, for one scope or all (``GET /attempts``)."""
        return self._send(self._read_call("attempts", case_id))

    def health(self) -> Any:
        """The ledger's identity (``GET /healthz``: ``pod_uid``, ``boot_id``...)."""
        return self._send(self._read_call("healthz", None))

    def _send(self, call: Call[T]) -> T:
        return send(call, timeout=self.timeout, token=self._token)


class AsyncLedgerClient(_Calls):
    """:class:`LedgerClient` for asyncio: the same arguments, checks, requests and answers,
    each method a coroutine that waits on an asyncio stream, never blocking the event loop."""

    async def request(
        self,
        case_id: str,
        work_id: str,
        *,
        mode: str = "idempotent",
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """:meth:`LedgerClient.request`, awaited."""
        return await self._send(self._request_call(case_id, work_id, mode, payload))

    async def claim(
        self,
        case_id: str,
        work_id: str,
        *,
        pod_uid: str | None = None,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """:meth:`LedgerClient.claim`, awaited."""
        return await self._send(self._claim_call(case_id, work_id, pod_uid, claim_ttl, payload))

    async def complete(
        self, case_id: str, work_id: str, *, result: object = None, claim: str | None = None
    ) -> dict[str, Any]:
        """:meth:`LedgerClient.complete`, awaited."""
        return await self._send(self._complete_call(case_id, work_id, result, claim))

    async def release(
        self, case_id: str, work_id: str, *, claim: str, exit_status: int | None = None
    ) -> dict[str, Any]:
        """:meth:`LedgerClient.release`, awaited."""
        return await self._send(self._release_call(case_id, work_id, claim, exit_status))

    async def deliveries(self, case_id: str | None = None) -> Any:
        """:meth:`LedgerClient.deliveries`, awaited."""
        return await self._send(self._read_call("deliveries", case_id))

    async def attempts(self, case_id: str | None = None) -> Any:
        """:meth:`LedgerClient.attempts`, awaited."""
        return await self._send(self._read_call("attempts", case_id))

    async def health(self) -> Any:
        """:meth:`LedgerClient.health`, awaited."""
        return await self._send(self._read_call("healthz", None))

    async def _send(self, call: Call[T]) -> T:
        return await send_async(call, timeout=self.timeout, token=self._token)
