"""Run one relay as a process: stop signals, /metrics, its log lines and its last words.

SIGTERM and SIGINT only request a stop: the relay looks at the request between sends, so the
send in flight finishes (and is marked if acknowledged) and the process exits 0. Exit 3 is a
stop on a poison event under ``--on-poison stop``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from types import FrameType
from typing import Any, TypeVar

from .._core.logline import install
from ..source.outbox import Outbox
from ..store import without_password
from ..wire.sender import sender
from ..wire.targets import base_url
from .loop import Relay, RelayCounts, logger
from .partitions import PartitionWorker
from .pickers import WholeOutbox
from .policy import EXIT_POISON, EXIT_STOPPED
from .settings import RelaySettings

T = TypeVar("T")

#: Where /metrics is served: (host, port); port 0 picks a free one.
Address = tuple[str, int]


def run(
    settings: RelaySettings,
    source: str,
    *,
    synchronous: str = "FULL",
    log_format: str = "text",
    metrics_at: Address | None = None,
    pause_after_acks: int | None = None,
) -> int:
    """Relay from ``source`` until a stop signal (0) or a poison event (EXIT_POISON).

    ``pause_after_acks`` is a drill (``verify``, docs/postgres.md): after that many ACKs,
    before the mark, the process stops itself with SIGSTOP (as if paused by the system).
    """
    install(logger, log_format)
    # A stop asked for while the relay is still starting (opening the outbox, a Pod deleted
    # right after it started) is a clean stop too, not death by the signal (exit -15).
    early = threading.Event()
    restore_early = _on_stop_signals(early.set)
    wire = sender(
        settings.url,
        timeout=settings.timeout,
        allowed_hosts=settings.allowed_hosts,
        token=settings.token,
        ack=settings.ack,
    )
    try:
        with Outbox(source, synchronous=synchronous) as outbox:
            outbox.record_target(settings.url, ack=settings.ack)
            after = _pause_after(pause_after_acks)
            # --pipeline: the marks' own connection (a second Outbox on the same database).
            marker = Outbox(source, synchronous=synchronous) if settings.pipeline else None
            try:
                if settings.owner is not None:
                    worker = PartitionWorker(
                        outbox, settings, wire, after_delivery=after, marker=marker
                    )
                    return _leasing(worker, outbox, (metrics_at, early))
                relay = Relay(
                    WholeOutbox(outbox, settings, marker), wire=wire, after_delivery=after
                )
                code = _serving(
                    outbox, relay.counts, relay.request_stop, relay.run, (metrics_at, early)
                )
            finally:
                if marker is not None:
                    marker.close()
    finally:
        wire.close()
        restore_early()
    if relay.poisoned is not None:
        event_id = relay.poisoned.event_id or "?"
        # A broker is no sink to ask: its consumer's inbox is named by whoever runs it.
        http = settings.url.startswith(("http://", "https://"))
        command = ["ackledger", "trace", event_id, "--source", without_password(source)]
        if http:
            command += ["--sink", base_url(settings.url)]
        more = "" if http else " (add --sink with the consumer's inbox database)"
        print(
            f"ackledger relay: stopped on poison event {event_id}: {relay.poisoned.message}; "
            f"see `{shlex.join(command)}`{more}",
            file=sys.stderr,
        )
    return code


def _leasing(
    worker: PartitionWorker, outbox: Outbox, serving: tuple[Address | None, threading.Event]
) -> int:
    """One of N relays: the partition worker, its report printed as one JSON line."""
    report = _serving(outbox, worker.counts, worker.relay.request_stop, worker.run, serving)
    print(json.dumps(asdict(report)), flush=True)
    if report.poisoned is not None:
        print(f"ackledger relay: stopped on poison event {report.poisoned}", file=sys.stderr)
        return EXIT_POISON
    return EXIT_STOPPED


def _serving(
    outbox: Outbox,
    counts: RelayCounts,
    stop: Callable[[], None],
    run: Callable[[], T],
    serving: tuple[Address | None, threading.Event],
) -> T:
    """``run()`` with /metrics up (if asked) and SIGTERM/SIGINT calling ``stop``; a stop
    signalled before (the event) stops it at once."""
    metrics_at, early = serving
    metrics = _metrics(outbox, counts, metrics_at)
    restore = _on_stop_signals(stop)
    if early.is_set():
        stop()
    try:
        return run()
    finally:
        restore()
        if metrics is not None:
            metrics.close()


def _metrics(outbox: Outbox, counts: RelayCounts, at: Address | None) -> Any:
    """Start the relay's /metrics endpoint if asked; returns it (or None) to close later."""
    if at is None:
        return None
    from .metrics import MetricsServer  # the server extra, only when metrics are asked for

    try:
        metrics = MetricsServer(outbox.stats, counts, *at)
    except OSError as exc:
        raise ValueError(f"--metrics-port: cannot listen: {exc}") from None
    print(f"ackledger relay metrics listening on {metrics.url}", flush=True)
    return metrics


def _on_stop_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Make SIGTERM and SIGINT request a stop (never interrupt); returns the undo."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()  # only a flag: the relay looks at it between sends

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _pause_after(count: int | None) -> Callable[[str], object] | None:
    if count is None:
        return None
    seen = 0

    def pause(event_id: str) -> None:
        nonlocal seen
        seen += 1
        if seen == count:
            print(f"drill: ACK for {event_id} received; stopping before the mark", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            print(f"drill: resumed; marking {event_id}", flush=True)

    return pause
