"""The moving parts a schedule breaks: the sink verify runs itself, the relays, the proxy.

Each is a real process or a real socket: the sink is ``ackledger serve sink`` and can be
killed with SIGKILL and started again (the proxy then forwards to its new port); a relay is
``ackledger relay``, and its drill option stops it with SIGSTOP after its N-th ACK, before
that mark, where verify kills it or lets another relay take its lease.
"""

from __future__ import annotations

import itertools
import signal
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..._core.closing import Closing
from ...store import is_database_url
from ..faultproxy import FaultProxy
from ..processes import Child, Service, start_service

#: What a relay prints when its drill has stopped it between the ACK and the mark.
DRILL_STOPPED = "drill: ACK for"
LEASE_LOST = "lease lost"
#: The relay's first log line once its loop runs.
STARTED = " started: "
START_S = 60.0
#: A short lease: a relay that died or was stopped holds its partitions this long.
LEASE_TTL_S = 1.5
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Where an event begins on the wire, per scheme: the proxy cuts a batch before one of them
#: (a CloudEvent in a batch's JSON body; AMQP's basic.publish method; NATS's HPUB).
EVENT_MARKS = {"http": b'"specversion"', "amqp": b"\x00\x3c\x00\x28", "nats": b"HPUB "}


@dataclass(frozen=True)
class Upstream:
    """What the fault proxy stands in front of."""

    host: str
    port: int
    scheme: str

    @property
    def event_mark(self) -> bytes:
        return EVENT_MARKS[self.scheme]


def proxied_target(url: str) -> Upstream | None:
    """Where a proxy in front of the user's sender forwards to; None when the proxy cannot
    stand there (another scheme, no port, or not on loopback: the proxy speaks to loopback
    only)."""
    parts = urlsplit(url)
    if parts.scheme not in EVENT_MARKS or parts.hostname not in LOOPBACK:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return None if port is None else Upstream(parts.hostname, port, parts.scheme)


def via(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's, on 127.0.0.1 (its user,
    path and query kept)."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class OwnSink(Closing):
    """``ackledger serve sink`` on the inbox, with the user's handlers and session factory
    if given."""

    def __init__(
        self, db: str, handlers: str | None, logs: Path, session: str | None = None
    ) -> None:
        self.args = ["serve", "sink", "--db", db, "--port", "0"]
        if handlers is not None:
            self.args += ["--handlers", handlers]
        if session is not None:
            self.args += ["--session", session]
        self.logs = logs
        self._starts = itertools.count()
        self.service: Service = self._start()

    def _start(self) -> Service:
        log = self.logs / f"sink-{next(self._starts)}.log"
        return start_service(self.args, stderr_path=log, timeout=60)

    @property
    def port(self) -> int:
        return self.service.port

    def kill_and_restart(self) -> None:
        self.service.stop(signal.SIGKILL)
        self.service = self._start()

    def close(self) -> None:
        self.service.stop()


class Relays(Closing):
    """The relays of one schedule: usually one; two while a lease is being stolen."""

    def __init__(self, source: str, to: str, logs: Path) -> None:
        self.args = ["relay", "--source", source, "--to", to, "--batch",
                     "--limit", "4", "--poll-interval", "0.05", "--timeout", "2",
                     "--base-backoff", "0.05", "--max-backoff", "0.5"]  # fmt: skip
        self.leasing = is_database_url(source)
        self.logs = logs
        self._starts = itertools.count()
        self.running: list[Child] = []

    def start(self, drill_after_acks: int | None = None) -> Child:
        n = next(self._starts)
        args = list(self.args)
        if self.leasing:
            args += ["--owner", f"verify-relay-{n}", "--lease-ttl", str(LEASE_TTL_S)]
        if drill_after_acks is not None:
            args += ["--stop-self-after-acks", str(drill_after_acks)]
        child = Child(args, self.logs / f"relay-{n}.log")
        self.running.append(child)
        # Started means at work: a fault drawn for this phase then lands in its sends, not
        # in its imports (a relay takes a second or more to start on a loaded machine).
        child.wait_for(STARTED, START_S)
        return child

    def kill(self, child: Child) -> None:
        child.kill()
        self.running.remove(child)

    def stop(self, child: Child) -> None:
        child.stop()
        self.running.remove(child)

    def alive(self) -> bool:
        return any(child.process.poll() is None for child in self.running)

    def close(self) -> None:
        for child in list(self.running):
            self.stop(child)


def proxy_to(upstream: Upstream) -> FaultProxy:
    proxy = FaultProxy(upstream.port)
    proxy.upstream = (upstream.host, upstream.port)
    return proxy
