"""``python -m ackledger.relay``: run one partition worker until SIGTERM or SIGINT.

Prints ``partition worker OWNER running`` once started and, on exit, one JSON line with what it
did. Exits 0 when stopped by a signal (after the batch in flight, releasing its lease), 2 on
bad input.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from .._core.logline import install
from ..cli import Parser, UsageError, fail
from ..cli.common import (
    add_http_client,
    add_source,
    add_synchronous,
    existing_target,
    limit_arg,
    positive_float,
)
from ..source.outbox import Outbox
from ..store import database_errors
from ..wire.http import close_connections, send_http, send_http_batch
from ..wire.targets import check_target
from .leases import DEFAULT_TTL, check_owner
from .loop import logger as relay_logger
from .partition_worker import run_partition_worker


def build_parser() -> Parser:
    parser = Parser(
        prog="python -m ackledger.relay",
        description="One of N relays on one outbox: lease partitions, send each one's events "
        "in seq order, mark them sent only on an exact ACK and only while the lease holds.",
    )
    add_source(parser)
    parser.add_argument(
        "--to", required=True, metavar="URL", help="the sink, http://HOST:PORT/events"
    )
    parser.add_argument("--owner", required=True, help="this worker's name, unique among workers")
    parser.add_argument(
        "--lease-ttl", type=positive_float, default=DEFAULT_TTL, metavar="S",
        help=f"seconds a lease lasts without renewal (default {DEFAULT_TTL:g})",
    )  # fmt: skip
    parser.add_argument("--limit", type=limit_arg, default=16, help="events per batch, 1-16")
    parser.add_argument("--batch", action="store_true", help="send each batch in one request")
    add_http_client(parser)
    parser.add_argument(
        "--idle-wait", type=positive_float, default=0.5, metavar="S",
        help="seconds to wait when no partition can be leased (default 0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--max-backoff", type=positive_float, default=30.0, metavar="S",
        help="longest wait before a failed partition is tried again (default 30)",
    )  # fmt: skip
    parser.add_argument(
        "--stop-self-after-acks", type=int, metavar="N",
        help="drill: after the Nth ACK, before marking it sent, stop this process with SIGSTOP "
        "(as if paused by the system); it goes on when it gets SIGCONT",
    )  # fmt: skip
    add_synchronous(parser)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_owner(args.owner)
        check_target(args.to, "/events", args.allow_host)
        existing_target(args.source)
        if args.stop_self_after_acks is not None and args.stop_self_after_acks < 1:
            raise UsageError("--stop-self-after-acks: must be 1 or more")
        outbox = Outbox(args.source, synchronous=args.synchronous)
    except (UsageError, ValueError) as exc:
        fail(str(exc))
    except database_errors() as exc:
        fail(f"database: {exc}")

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    hosts = args.allow_host

    def send(event: dict[str, Any]) -> bool:
        return send_http(event, args.to, timeout=args.timeout, allowed_hosts=hosts)

    batch_url = args.to + "/batch"

    def send_batch(events: list[dict[str, Any]]) -> int:
        return send_http_batch(events, batch_url, timeout=args.timeout, allowed_hosts=hosts)

    install(relay_logger, "text")  # the worker's lines, as `ackledger relay` writes them
    print(f"partition worker {args.owner} running", flush=True)
    with outbox:
        report = run_partition_worker(
            outbox,
            owner=args.owner,
            send=None if args.batch else send,
            send_batch=send_batch if args.batch else None,
            lease_ttl=args.lease_ttl,
            limit=args.limit,
            stop=stop,
            idle_wait=args.idle_wait,
            max_backoff=args.max_backoff,
            after_delivery=_pause_after(args.stop_self_after_acks),
        )
    close_connections()
    print(json.dumps(asdict(report)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
