"""One schedule, start to verdict: accept, relay under the faults, restart, drain, judge.

The events are split into one phase per fault; each phase accepts its events, makes its fault
happen while the relay works on them, restarts what was killed and waits until the outbox has
nothing pending. Then (a broker's consumer may still be applying) the inventory is given time
to settle, every process is stopped, and both databases are read back and judged.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import warehouse
from ...envelope import new_event
from ...source.outbox import Outbox
from ...store import open_backend
from ...warehouse import TYPE
from . import schedules as s
from .faults import (
    DRILL_STOPPED,
    LEASE_LOST,
    OwnSink,
    Relays,
    Upstream,
    proxied_target,
    proxy_to,
    via,
)  # fmt: skip
from .judge import Counts, judge, read_sides
from .scratch import Databases, scratch

SOURCE = "urn:ackledger:verify"
PARTITIONS = 3
#: The longest a phase waits for the outbox to drain (then what is left counts as stuck).
PHASE_S = 30.0
#: With no pending left, how long the inventory must stay unchanged to count as settled.
SETTLE_S = 2.0
SETTLE_MAX_S = 30.0


@dataclass(frozen=True)
class Setup:
    """What the user's command line asked for, the same for every schedule."""

    source: str | None
    to: str | None
    sink_db: str | None
    handlers: str | None
    events: int
    run: str  # a random tag of this verify run: its events' ids start with it
    #: ``--session MODULE:ATTR`` for the sink verify starts (on ``sink_db``, the user's).
    session: str | None = None

    @property
    def own_sink(self) -> bool:
        return self.to is None

    @property
    def scratch_sink(self) -> bool:
        """verify's own sink on a scratch inbox (not on the user's ``sink_db``)."""
        return self.own_sink and self.sink_db is None

    def kinds(self) -> tuple[str, ...]:
        from ...store import is_database_url

        upstream = self.upstream()
        return s.kinds_for(
            own_sink=self.own_sink,
            http=upstream is not None and upstream.scheme == "http",
            cut=upstream is not None,
            partitioned=is_database_url(self.source),
        )

    def upstream(self) -> Upstream | None:
        """The user's sender when the proxy can stand in front of it (the own sink's is
        known once it runs)."""
        if self.to is None:
            return Upstream("127.0.0.1", 0, "http")
        return proxied_target(self.to)


@dataclass
class Outcome:
    schedule: s.Schedule
    counts: Counts
    kept_logs: Path | None = None
    notes: list[str] = field(default_factory=list)


def run_schedule(setup: Setup, schedule: s.Schedule) -> Outcome:
    with scratch(setup.source, setup.scratch_sink) as dbs:
        outcome = _Run(setup, schedule, dbs).run()
        if not outcome.counts.clean:
            outcome.kept_logs = _keep(dbs.logs, schedule.seed)
        return outcome


def _keep(logs: Path, seed: int) -> Path:
    kept = Path(tempfile.gettempdir()) / f"ackledger-verify-logs-{seed}"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(logs, kept, ignore=shutil.ignore_patterns("*.db*"))
    return kept


def event(tag: str, n: int) -> dict[str, Any]:
    """Event n of a schedule: 1 unit of a sku of its own (its id), in one of a few partitions."""
    event_id = f"{tag}-{n:05d}"
    return new_event(
        TYPE, {"sku": event_id, "qty": 1}, source=SOURCE, id=event_id, subject=event_id,
        partitionkey=f"{tag}-p{n % PARTITIONS}",
    )  # fmt: skip


def wait_until(done: Callable[[], bool], timeout: float, still: Callable[[], bool]) -> bool:
    """Poll ``done`` until it holds, ``timeout`` passes or ``still`` (anyone at work) fails."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if done():
            return True
        if not still():
            return done()
        time.sleep(0.05)
    return False


class _Run:
    def __init__(self, setup: Setup, schedule: s.Schedule, dbs: Databases) -> None:
        self.setup, self.schedule, self.dbs = setup, schedule, dbs
        self.tag = f"{setup.run}-{schedule.seed}"
        self.sink_db = dbs.sink if dbs.sink is not None else str(setup.sink_db)
        self.kills = 0
        self.published = 0
        self.notes: list[str] = []

    def run(self) -> Outcome:
        with ExitStack() as stack:
            Outbox(self.dbs.source).close()  # made (and migrated) before a relay opens it
            self.source = stack.enter_context(_Poller(self.dbs.source))
            self.sink: OwnSink | None = None
            to, upstream = self.setup.to, self.setup.upstream()
            if self.setup.own_sink:
                self.sink = stack.enter_context(
                    OwnSink(self.sink_db, self.setup.handlers, self.dbs.logs, self.setup.session)
                )
                to = f"http://127.0.0.1:{self.sink.port}/events"
                upstream = Upstream("127.0.0.1", self.sink.port, "http")
            assert to is not None
            self.proxy = None if upstream is None else stack.enter_context(proxy_to(upstream))
            self.event_mark = b"" if upstream is None else upstream.event_mark
            if self.proxy is not None:
                to = via(to, self.proxy.port)
            self.relays = stack.enter_context(Relays(self.dbs.source, to, self.dbs.logs))
            sizes = _split(self.setup.events, len(self.schedule.faults))
            for fault, size in zip(self.schedule.faults, sizes, strict=True):
                self._phase(fault, size)
            self._settle()
        counts = judge(read_sides(self.dbs.source, self.sink_db, self.tag), self.setup.events)
        counts.kills = self.kills
        return Outcome(self.schedule, counts, notes=self.notes)

    def _publish(self, size: int) -> None:
        with Outbox(self.dbs.source) as outbox, outbox.transaction() as tx:
            for n in range(self.published, self.published + size):
                tx.publish(event(self.tag, n))
        self.published += size

    def _drained(self) -> bool:
        rows = self.source.rows(self.tag)
        return len(rows) == self.published and all(r["sent"] for r in rows)

    def _wait_drained(self) -> None:
        if not self.relays.running:
            self.relays.start()
        if not wait_until(self._drained, PHASE_S, self.relays.alive):
            self.notes.append("the outbox did not drain")

    def _phase(self, fault: s.Fault, size: int) -> None:
        if size == 0:  # fewer events than faults: a fault with nothing to land on is skipped
            self.notes.append(f"{fault.text()}: skipped, no events left for it")
            return
        kind, count = fault.kind, min(fault.count, size)
        if kind in (s.RELAY_ACK_MARK, s.LEASE_STEAL):
            for child in list(self.relays.running):
                self.relays.stop(child)
            paused = self.relays.start(drill_after_acks=count)
            self._publish(size)
            if not paused.wait_for(DRILL_STOPPED, PHASE_S):
                self.notes.append(f"{kind}: the relay never reached its ACK {count}")
            elif kind == s.RELAY_ACK_MARK:
                self.relays.kill(paused)
                self.kills += 1
            else:
                self._steal(paused)
        elif kind == s.SINK_KILL and self.sink is not None:
            self._wait_drained()  # a running relay, so that the kill lands in its work
            self._kill_sink_at_work(self.sink, size, fault.after_s)
            self.kills += 1
            if self.proxy is not None:
                self.proxy.upstream = ("127.0.0.1", self.sink.port)
        elif kind == s.ANSWER_LOST and self.proxy is not None:
            self.proxy.drop_responses = count
            self._publish(size)
        elif kind == s.CUT and self.proxy is not None:
            self.proxy.arm_cut(self.event_mark, count)
            self._publish(size)
        else:
            self._publish(size)
        self._wait_drained()
        self._check_landed(kind, count)

    def _check_landed(self, kind: str, count: int) -> None:
        """A proxy fault the traffic never reached is said, not silently counted as passed."""
        if self.proxy is None:
            return
        if kind == s.ANSWER_LOST and self.proxy.drop_responses:
            self.notes.append(f"{kind}: {self.proxy.drop_responses} of {count} answers not dropped")
            self.proxy.drop_responses = 0
        if kind == s.CUT and not self.proxy.cuts:
            self.notes.append(f"{kind}: the connection was never cut")
            self.proxy.cuts = 1  # disarmed

    def _kill_sink_at_work(self, sink: OwnSink, size: int, after_s: float) -> None:
        """Kill the sink ``after_s`` after it applied the first of the phase's events: the
        relay is at work then, whatever the machine's load made of the time before."""
        with _Poller(self.sink_db) as reader:
            before = len(reader.stock(self.tag))
            self._publish(size)
            if not wait_until(
                lambda: len(reader.stock(self.tag)) > before, PHASE_S, self.relays.alive
            ):
                self.notes.append("sink-kill: the sink applied nothing before the kill")
        time.sleep(after_s)
        sink.kill_and_restart()

    def _steal(self, paused: Any) -> None:
        """Another relay takes the stopped one's partition once its lease has run out; then
        the stopped one goes on, and its mark under the lost lease must be refused."""
        taker = self.relays.start()
        if not wait_until(self._drained, PHASE_S, lambda: taker.process.poll() is None):
            self.notes.append("lease-steal: the other relay did not drain the outbox")
        paused.process.send_signal(signal.SIGCONT)
        if not paused.wait_for(LEASE_LOST, 10):
            self.notes.append("lease-steal: the stopped relay did not find its lease lost")
        self.relays.stop(paused)

    def _settle(self) -> None:
        """Wait until every event is applied, or the inventory stays unchanged for a while."""
        with _Poller(self.sink_db) as sink:
            last, since = sink.stock(self.tag), time.monotonic()
            end = time.monotonic() + SETTLE_MAX_S
            while len(last) < self.published and time.monotonic() < end:
                time.sleep(0.1)
                now = sink.stock(self.tag)
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since >= SETTLE_S:
                    return


def _split(total: int, parts: int) -> list[int]:
    """``total`` events over ``parts`` phases, the first ones taking the remainder."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class _Poller:
    """One open backend for the reads made while the processes run."""

    def __init__(self, target: str) -> None:
        self.backend = open_backend(target, migrate_schema=False)

    def __enter__(self) -> _Poller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.backend.close()

    def rows(self, tag: str) -> list[dict[str, Any]]:
        with self.backend.read() as tx:
            return tx.verify_outbox_rows(tag)

    def stock(self, tag: str) -> dict[str, int]:
        # The lab's tables, which a sink makes with its first event.
        self.backend.ensure_plugin(TYPE)
        with self.backend.read() as tx:
            return warehouse.stock_like(tx, tag)
