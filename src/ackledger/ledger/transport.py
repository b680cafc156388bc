"""Carrying a ledger :class:`~.protocol.Call` over the network: a blocking socket or asyncio.

Both only connect, write the call's request bytes at once and feed the answer's bytes to an
``AnswerReader`` until it is complete or the server closes; what is sent and how the answer
is judged is the call's (``protocol``). One connection per call, Nagle's algorithm off, no
proxy variables read, no redirects followed. ``timeout`` bounds the whole call; connection
failures and time-outs raise ``OSError`` (``TimeoutError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import TypeVar

from ..wire.token import Token
from .http_message import AnswerReader
from .protocol import Call

T = TypeVar("T")

_READ_SIZE = 64 * 1024


def send(call: Call[T], *, timeout: float, token: Token | str | None = None) -> T:
    """Make ``call`` on a socket of its own, blocking for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    reader = AnswerReader(call.cap)
    target = call.target
    with socket.create_connection((target.host, target.port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(_left(deadline))
        sock.sendall(call.request(token))
        while True:
            sock.settimeout(_left(deadline))
            data = sock.recv(_READ_SIZE)
            if not data or reader.feed(data):
                break
    return call.finish(*reader.answer())


async def send_async(call: Call[T], *, timeout: float, token: Token | str | None = None) -> T:
    """``send`` on an asyncio stream: the event loop runs on while the ledger answers."""
    reader = AnswerReader(call.cap)
    target = call.target
    async with asyncio.timeout(timeout):
        stream, writer = await asyncio.open_connection(target.host, target.port)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            writer.write(call.request(token))
            await writer.drain()
            while True:
                data = await stream.read(_READ_SIZE)
                if not data or reader.feed(data):
                    break
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return call.finish(*reader.answer())


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the ledger did not answer in time")
    return left
