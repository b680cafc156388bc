"""``@ledger.idempotent``: an idempotency key for the user's own function (CONTRACT section 14).

The first call with a key runs the function and stores its JSON result under the key; a later
call with the same key and arguments returns the stored result without running it. Keys live in
``ackledger_idempotency_keys``, scoped by the function's qualified name.

Two ways of holding a key:

- on ackledger's own connection: the claim commits at once (others see the key in progress and
  get :class:`InFlight`), the process's lease keeper renews its lease while the function runs,
  and the result commits durably when it returns (``key_lease.OwnKeys`` says what waits for
  the disk);
- with ``using_arg``: on the caller's connection or session, inside the caller's transaction,
  so the key, its result and the function's own writes commit (or roll back) together. Another
  transaction claiming the same key meanwhile waits on the database's row lock and then finds
  the result, or the key free again if this one rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import Conflict, InFlight
from ..store import Backend, Tx
from ..store.idempotency_keys import Found, KeyClaim, claim_key, complete_key, release_key
from .key_lease import OwnKeys, as_seconds, new_token, retry_after
from .key_outcomes import KeyOutcomes

F = TypeVar("F", bound=Callable[..., Any])
MAX_KEY_CHARS = 255
#: The first pause between claims while waiting for a holder, and the longest.
FIRST_POLL, MAX_POLL = 0.02, 0.5


def check_function_key(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: the key function must return a str, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_KEY_CHARS:
        raise ValueError(f"{name}: the key must be 1-{MAX_KEY_CHARS} characters, got {len(value)}")
    return value


#: json.dumps with options builds an encoder per call; these are built once (same output).
_RESULT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
# Arguments compare by their JSON text; other objects by repr (give them one that names their
# content).
_ARGUMENTS = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)


def result_json(value: object, name: str) -> str:
    """The stored form of a result; TypeError for what JSON cannot hold exactly."""
    try:
        return _RESULT.encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name}: an idempotent function must return a JSON value (dict, list, str, int, "
            f"float, bool or None); {exc}; nothing was stored"
        ) from None


@dataclass(frozen=True)
class Settings:
    db: Backend
    key: Callable[..., object]
    using_arg: str | None
    ttl: float
    wait: float
    lease: float
    outcomes: KeyOutcomes


def idempotent(
    db: Backend,
    key: Callable[..., object],
    *,
    using_arg: str | None = None,
    ttl: object = "24h",
    wait: object = 0,
    lease: object = "30s",
    outcomes: KeyOutcomes | None = None,
) -> Callable[[F], F]:
    if not callable(key):
        raise TypeError(f"key: must be a function of the call's arguments, got {key!r}")
    if isinstance(wait, bool) or not isinstance(wait, (int, float, str)):
        raise TypeError(f"wait: must be a number of seconds, got {type(wait).__name__}")
    waits = 0.0 if wait == 0 else as_seconds(wait, "wait")
    settings = Settings(
        db, key, using_arg, as_seconds(ttl, "ttl"), waits, as_seconds(lease, "lease"),
        outcomes if outcomes is not None else KeyOutcomes(),
    )  # fmt: skip

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        if using_arg is not None and using_arg not in signature.parameters:
            raise ValueError(f"using_arg: {fn.__qualname__} has no parameter {using_arg!r}")
        call = _Call(settings, fn, signature)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await call.run_async(args, kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            return call.run(args, kwargs)

        return run  # type: ignore[return-value]

    return decorate


class _Turns:
    """The pauses between claims of a key that another call holds, until ``wait`` is over."""

    def __init__(self, wait: float) -> None:
        self.deadline = time.monotonic() + wait
        self._next = FIRST_POLL

    def pause(self) -> float:
        pause = min(self._next, max(0.0, self.deadline - time.monotonic()))
        self._next = min(self._next * 2, MAX_POLL)
        return pause


class _Call:
    def __init__(self, settings: Settings, fn: Callable[..., Any], sig: inspect.Signature) -> None:
        self.s = settings
        self.fn = fn
        self.sig = sig
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self.scope = f"fn:{self.name}"
        self.own = OwnKeys(settings.db, self.scope, lease=settings.lease, ttl=settings.ttl)

    # --- what a call is ---------------------------------------------------------------------

    def identify(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, object]:
        """(key, fingerprint, the caller's connection or None); nothing is written yet."""
        bound = self.sig.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        using = None
        if self.s.using_arg is not None:
            using = arguments.pop(self.s.using_arg)
            if using is None:
                raise TypeError(f"{self.name}: {self.s.using_arg} must be a connection or session")
        key = check_function_key(self.s.key(*args, **kwargs), self.name)
        text = _ARGUMENTS.encode(arguments)
        return key, hashlib.sha256(text.encode("utf-8")).hexdigest(), using

    def claim(self, tx: Tx, key: str, fp: str, token: str) -> KeyClaim:
        s = self.s
        return claim_key(
            tx, self.scope, key, fp, token=token, now=time.time(), lease=s.lease, ttl=s.ttl
        )

    def settle(self, found: KeyClaim, key: str, deadline: float) -> tuple[bool, Any]:
        """(done, the stored result) for a claim that did not take the key; raises Conflict,
        or InFlight once ``deadline`` (monotonic) has passed."""
        if found.found is Found.IN_FLIGHT and time.monotonic() < deadline:
            return False, None  # still waiting: only the call's final answer is counted
        self.s.outcomes.found(found.found)
        if found.found is Found.COMPLETED:
            return True, json.loads(found.result) if found.result is not None else None
        if found.found is Found.CONFLICT:
            raise Conflict(f"{self.name}: key {key!r} was used for a call with other arguments")
        after = retry_after(found.lease_expires_at, time.time())
        raise InFlight(
            f"{self.name}: key {key!r} is held by a call still running (retry in {after} s)",
            retry_after=float(after),
        )

    # --- plain functions --------------------------------------------------------------------

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key, fp, using = self.identify(args, kwargs)
        token = new_token()
        turns = _Turns(self.s.wait)

        def claim() -> KeyClaim:
            if using is None:
                return self.own.claim(key, fp, token)
            return self.claim(self.s.db.borrow(using), key, fp, token)

        while (found := claim()).found is not Found.CLAIMED:
            done, stored = self.settle(found, key, turns.deadline)
            if done:
                return stored
            time.sleep(turns.pause())
        self.s.outcomes.add("claimed")
        if using is not None:
            return self._run_borrowed(self.s.db.borrow(using), key, token, args, kwargs)
        held = self.own.hold(key, token)
        try:
            result = self.fn(*args, **kwargs)
            text = result_json(result, self.name)
        except BaseException:
            held.stop()
            self.own.release(key, token)
            raise
        held.stop()
        self._own_complete(key, token, text)
        return result

    def _run_borrowed(
        self, tx: Tx, key: str, token: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            result = self.fn(*args, **kwargs)
            text = result_json(result, self.name)
        except BaseException:
            self._release_borrowed(tx, key, token)
            raise
        if complete_key(tx, self.scope, key, token, result=text, body=None, now=time.time()):
            self.s.outcomes.add("completed")
        return result

    def _release_borrowed(self, tx: Tx, key: str, token: str) -> None:
        # The caller may catch the error and commit its transaction: the key must not stay.
        # If the transaction itself failed (PostgreSQL refuses every statement after an
        # error), only the caller's rollback is left, and it removes the key too.
        with contextlib.suppress(Exception):  # the caller's own error is the one to raise
            release_key(tx, self.scope, key, token)

    # --- async def --------------------------------------------------------------------------

    async def run_async(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key, fp, using = self.identify(args, kwargs)
        token = new_token()
        turns = _Turns(self.s.wait)

        async def claim() -> KeyClaim:
            if using is None:
                return await asyncio.to_thread(self.own.claim, key, fp, token)
            found: KeyClaim = await self._on(using, lambda tx: self.claim(tx, key, fp, token))
            return found

        while (found := await claim()).found is not Found.CLAIMED:
            done, stored = self.settle(found, key, turns.deadline)
            if done:
                return stored
            await asyncio.sleep(turns.pause())
        self.s.outcomes.add("claimed")
        if using is not None:
            return await self._run_borrowed_async(using, key, token, args, kwargs)
        held = self.own.hold(key, token)
        try:
            result = await self.fn(*args, **kwargs)
            text = result_json(result, self.name)
        except BaseException:
            held.stop()
            await asyncio.to_thread(self.own.release, key, token)
            raise
        held.stop()
        await asyncio.to_thread(self._own_complete, key, token, text)
        return result

    def _own_complete(self, key: str, token: str, text: str) -> None:
        if self.own.complete(key, token, text, None):  # not when its lease was taken over meanwhile
            self.s.outcomes.add("completed")

    async def _run_borrowed_async(
        self, using: object, key: str, token: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            result = await self.fn(*args, **kwargs)
            text = result_json(result, self.name)
        except BaseException:
            await self._on(using, lambda tx: self._release_borrowed(tx, key, token))
            raise
        now = time.time()
        done = await self._on(
            using,
            lambda tx: complete_key(tx, self.scope, key, token, result=text, body=None, now=now),
        )
        if done:
            self.s.outcomes.add("completed")
        return result

    async def _on(self, using: object, work: Callable[[Tx], Any]) -> Any:
        return await on_callers_connection(self.s.db, using, work)


async def on_callers_connection(db: Backend, using: object, work: Callable[[Tx], Any]) -> Any:
    """Run ``work`` on the caller's connection: a SQLAlchemy AsyncSession or AsyncConnection
    through its ``run_sync`` (the sync session it hands over is one ackledger writes with), any
    other kind of §12 directly."""
    run_sync = getattr(using, "run_sync", None)
    if run_sync is not None and inspect.iscoroutinefunction(run_sync):
        waiting: Awaitable[Any] = run_sync(lambda sync: work(db.borrow(sync)))
        return await waiting
    return work(db.borrow(using))
