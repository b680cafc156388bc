"""The services' listening socket turns Nagle's algorithm off for every connection it accepts.

Without it, asyncio leaves Nagle on (it only sets TCP_NODELAY on sockets whose proto says TCP)
and uvicorn's two writes per answer wait ~40 ms for the client's delayed ACK on every
keep-alive request.
"""

from __future__ import annotations

import socket

import pytest

from ackledger.web.server import bind


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_accepted_connections_have_nodelay(host: str) -> None:
    try:
        listener = bind(host, 0)
    except OSError:
        pytest.skip(f"{host} is not available on this machine")
    with listener:
        assert listener.proto == socket.IPPROTO_TCP
        client = socket.create_connection(listener.getsockname()[:2], timeout=10)
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.proto == socket.IPPROTO_TCP
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
