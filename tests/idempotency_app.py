"""A small Starlette shop behind ``IdempotencyMiddleware``, for the middleware's tests: in
process (``build``) and as real uvicorn processes (``uvicorn --factory
tests.idempotency_app:from_env``). Every route that does something records it in the table
``idem_effects`` of the same database, so a test counts how often the app really ran."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ackledger import IdempotencyMiddleware, Ledger
from ackledger.ledger.idempotency_middleware import MAX_BYTES, held_key

EFFECTS = "CREATE TABLE IF NOT EXISTS idem_effects (route TEXT NOT NULL, body TEXT NOT NULL)"


def connect(target: str) -> Any:
    if target.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(target)
    return sqlite3.connect(target, timeout=30)


def build(
    target: str, *, required: bool = False, lease: str = "30s", sleep: float = 0.0
) -> IdempotencyMiddleware:
    mark = "%s" if target.startswith("postgresql://") else "?"
    insert = f"INSERT INTO idem_effects (route, body) VALUES ({mark}, {mark})"

    def record(route: str, body: bytes) -> None:
        conn = connect(target)
        try:
            conn.execute(insert, (route, body.decode()))
            conn.commit()
        finally:
            conn.close()

    async def effect(request: Request, route: str) -> bytes:
        body = await request.body()
        await asyncio.to_thread(record, route, body)
        return body

    async def orders(request: Request) -> Response:
        body = await effect(request, "orders")
        await asyncio.sleep(sleep)
        headers = {"Location": "/orders/1", "ETag": '"v1"', "X-Not-Kept": "x"}
        return JSONResponse({"ordered": json.loads(body or b"null")}, 201, headers)

    async def hang(request: Request) -> Response:
        await effect(request, "hang")
        await asyncio.sleep(3600)
        return Response(status_code=204)  # pragma: no cover - killed before

    async def big(request: Request) -> Response:
        await effect(request, "big")
        return Response(b"x" * (MAX_BYTES + 1), media_type="application/octet-stream")

    async def stream(request: Request) -> Response:
        await effect(request, "stream")

        async def chunks() -> Any:
            for _ in range(3):
                yield b"y" * (MAX_BYTES // 2)

        return StreamingResponse(chunks(), media_type="text/plain")

    async def boom(request: Request) -> Response:
        await effect(request, "boom")
        raise RuntimeError("the app failed")

    async def unavailable(request: Request) -> Response:
        await effect(request, "unavailable")
        return JSONResponse({"error": "try later"}, 503)

    def in_transaction(request: Request) -> Response:
        # The endpoint writes its effect and the key's completion in one transaction of its
        # own; a rollback (?rollback=1, answered 500; ?rollback=refuse, answered 422) leaves
        # neither. ?answer=other commits both, then answers other than what it stored.
        held = held_key(request.scope)
        assert held is not None
        answer = json.dumps({"paid": True}).encode()
        rollback = request.query_params.get("rollback")
        conn = connect(target)
        try:
            conn.execute(insert, ("in_tx", "paid"))
            held.complete(
                conn, status=201, body=answer, headers={"Content-Type": "application/json"}
            )
            if rollback:
                conn.rollback()
                if rollback == "refuse":
                    return JSONResponse({"error": "refused"}, 422)
                return JSONResponse({"error": "rolled back"}, 500)
            conn.commit()
        finally:
            conn.close()
        if request.query_params.get("answer") == "other":
            return JSONResponse({"paid": "otherwise"}, 200)
        return Response(answer, 201, media_type="application/json")

    async def read(request: Request) -> Response:
        return JSONResponse({"read": True})

    routes = [
        Route("/orders", orders, methods=["POST", "PATCH", "PUT"]),
        Route("/hang", hang, methods=["POST"]),
        Route("/big", big, methods=["POST"]),
        Route("/stream", stream, methods=["POST"]),
        Route("/boom", boom, methods=["POST"]),
        Route("/unavailable", unavailable, methods=["POST"]),
        Route("/in-tx", in_transaction, methods=["POST"]),
        Route("/read", read, methods=["GET"]),
    ]
    return IdempotencyMiddleware(
        Starlette(routes=routes),
        Ledger(target),
        required=required,
        lease=lease,
        scope=lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode(),
    )


def from_env() -> IdempotencyMiddleware:
    return build(
        os.environ["IDEM_DB"],
        lease=os.environ.get("IDEM_LEASE", "30s"),
        sleep=float(os.environ.get("IDEM_SLEEP", "0")),
    )
