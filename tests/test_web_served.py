"""``web.direct.Served``: the steps around a direct route, composed once by the Guard and
``Observed`` (no wrapper per request). The Guard's check comes before a check of the app it
wraps, both hold, and the route and its timing are the wrapped app's."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import Receive, Scope, Send

from ackledger.web.answers import Answer, problem_answer
from ackledger.web.direct import Headers, Outcome, Served
from ackledger.web.guard import Guard
from ackledger.wire.token import Token

TOKEN = "served-steps-token.1a2b3c"


class _Inner:
    """An app whose one direct route has its own check (a refusal for ``x-inner: no``)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("the ASGI path is not used here")

    def _refuse(self, headers: Headers) -> Answer | None:
        self.seen.append("inner check")
        if (b"x-inner", b"no") in headers:
            return problem_answer(403, "inner", "Inner refusal", "the inner check")
        return None

    def _answer(self, headers: Headers, body: bytes | None) -> Outcome:
        self.seen.append("route")
        return Answer(200, body or b"", "text/plain")

    def _observe(self, status: int, started: float) -> None:
        self.seen.append(f"timed {status}")

    def direct_routes(self) -> Mapping[str, Served]:
        return {"/in": Served(77, self._answer, self._refuse, self._observe)}


def _check(route: Served, headers: Headers) -> int | None:
    assert route.refuse is not None
    refusal = route.refuse(headers)
    return None if refusal is None else refusal.status


def test_the_guard_checks_before_the_wrapped_apps_check_and_keeps_its_route() -> None:
    seen: list[str] = []
    inner = _Inner(seen)
    route = Guard(inner, token=Token(TOKEN), loopback=True).direct_routes()["/in"]
    assert isinstance(route, Served) and route.cap == 77
    assert route.answer == inner._answer and route.observe == inner._observe
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    host = (b"host", b"127.0.0.1:9")
    # The Guard refuses first: the inner check never runs.
    assert _check(route, [host]) == 401
    assert _check(route, [(b"host", b"rebound.example"), auth]) == 421
    assert seen == []
    # Past the Guard, the inner check still holds.
    assert _check(route, [host, auth, (b"x-inner", b"no")]) == 403
    assert _check(route, [host, auth]) is None
    assert seen == ["inner check", "inner check"]
