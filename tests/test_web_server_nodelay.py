"""The services' listening socket: accepted connections must get TCP_NODELAY from asyncio."""

from __future__ import annotations

import socket

from ackledger.web.server import bind


def test_bound_socket_says_tcp_so_asyncio_disables_nagle() -> None:
    # asyncio sets TCP_NODELAY only when sock.proto == IPPROTO_TCP; an answer written as
    # headers then body would otherwise wait for the client's delayed ACK (~40 ms each).
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        client = socket.create_connection(sock.getsockname()[:2], timeout=10)
        accepted, _ = sock.accept()
        with client, accepted:
            assert accepted.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
