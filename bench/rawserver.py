"""The HTTP floor's server: the least a server can do to answer a keep-alive POST.

It reads a request head, reads ``Content-Length`` bytes of body and writes a fixed 200 with a
small JSON body, on a plain blocking socket, one connection at a time. Whatever our sink costs
beyond this is the sink's own overhead. Run as ``python rawserver.py [--commit DB]``; prints its
URL. With ``--commit DB`` it first makes a one-row commit (WAL, synchronous=FULL) in DB for every
request: the least a durable sink can do.
"""

from __future__ import annotations

import socket
import sqlite3
import sys
from collections.abc import Callable

ANSWER_BODY = b'{"ack":true,"id":"floor","status":"applied"}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(ANSWER_BODY)).encode()
    + b"\r\n\r\n"
    + ANSWER_BODY
)


#: The one row of a one-row commit, and its statement.
ONE_ROW = "INSERT INTO t (v) VALUES (?)"
ROW = ("x" * 40,)


def one_row_connection(path: str) -> sqlite3.Connection:
    """A connection to ``path`` (WAL, synchronous=FULL, autocommit) with the one-row table."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    return db


def one_row_committer(path: str) -> Callable[[], None]:
    """A function that makes one one-row commit in ``path`` (WAL, synchronous=FULL)."""
    db = one_row_connection(path)

    def commit() -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute(ONE_ROW, ROW)
        db.execute("COMMIT")

    return commit


def _serve_connection(conn: socket.socket, before_answer: Callable[[], None] | None) -> None:
    buffer = b""
    while True:
        head_end = buffer.find(b"\r\n\r\n")
        while head_end < 0:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
            head_end = buffer.find(b"\r\n\r\n")
        length = 0
        for line in buffer[:head_end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        end = head_end + 4 + length
        while len(buffer) < end:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
        buffer = buffer[end:]
        if before_answer is not None:
            before_answer()
        conn.sendall(ANSWER)


def listen(serve: Callable[[socket.socket], None]) -> None:
    """Listen on a free loopback port, print its URL, and ``serve`` each connection in turn
    (Nagle off)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            serve(conn)


def main() -> None:
    commit = None
    if "--commit" in sys.argv:
        commit = one_row_committer(sys.argv[sys.argv.index("--commit") + 1])
    listen(lambda conn: _serve_connection(conn, commit))


if __name__ == "__main__":
    main()
