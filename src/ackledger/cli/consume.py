"""``ackledger consume``: apply a broker's messages through an inbox, acking what committed."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from .._core.logline import FORMATS, install
from ..sink.handler_call import describe_kinds
from .arguments import add_synchronous, handlers_arg, port_arg, positive_float
from .sessions import add_session_options, open_inbox

#: The driver each scheme needs, by module (``_core.extras.EXTRA_OF_MODULE`` names its extra).
if TYPE_CHECKING:
    from ..sink.consume import Consumer

_DRIVERS = {"amqp": "pika", "nats": "nats"}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    consume = commands.add_parser(
        "consume",
        help="apply a broker's messages through an inbox (RabbitMQ or NATS JetStream)",
        description="Consume structured-mode CloudEvents from amqp://USER:PASS@HOST:PORT/VHOST"
        "?queue=Q[&prefetch=N] or nats://HOST:PORT?stream=S&durable=D[&max_ack_pending=N] and "
        "apply each through the inbox; acknowledge only after the inbox committed. What can "
        "never be applied (invalid, a conflict, no handler, the handler's Rejected) is "
        "recorded in the inbox database first (`ackledger refused list`), then refused for "
        "good (reject without requeue, to the queue's dead-letter exchange if it has one / "
        "term). A transient failure is redelivered after a capped, jittered backoff of its "
        "own while the other messages go on: a failing message loses its place, so order "
        "is not kept across a transient failure (RabbitMQ requeues it after the backoff, "
        "NATS naks it with that delay). SIGTERM/SIGINT: finish the message in hand, exit 0.",
    )
    consume.add_argument("--from", dest="source", required=True, metavar="URL")
    consume.add_argument(
        "--db", required=True, metavar="PATH_OR_URL",
        help="the inbox: a SQLite file (created if missing) or a postgresql:// URL",
    )  # fmt: skip
    consume.add_argument(
        "--handlers", type=handlers_arg, metavar="MODULE:ATTR",
        help="a dict of event type -> handler(tx, event), as for `serve sink` (with "
        "--session or --django: handler(session, event))",
    )  # fmt: skip
    consume.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST",
        help="also allow this broker host (an explicit widening of the loopback allow-list)",
    )  # fmt: skip
    consume.add_argument(
        "--base-backoff", type=positive_float, default=0.1, metavar="SECONDS",
        help="first backoff ceiling after a transient failure (default 0.1)",
    )  # fmt: skip
    consume.add_argument(
        "--max-backoff", type=positive_float, default=30.0, metavar="SECONDS",
        help="backoff cap (default 30)",
    )  # fmt: skip
    consume.add_argument("--metrics-port", type=port_arg, metavar="N", help="serve /metrics here")
    consume.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)"
    )
    consume.add_argument("--log-format", choices=FORMATS, default="text", help="text or json")
    add_synchronous(consume)
    add_session_options(consume)
    # A crash drill only, so not in the help: after the first commit, before its ack, exit
    # at once (os._exit) with STATUS.
    consume.add_argument("--exit-after-commit", type=int, metavar="STATUS", help=argparse.SUPPRESS)
    # A crash drill too: after the first refusal is recorded, before its rejection, the
    # process sends itself SIGKILL (as `kill -9` would).
    consume.add_argument("--kill-after-refusal", action="store_true", help=argparse.SUPPRESS)
    consume.set_defaults(handler=cmd_consume)


def cmd_consume(args: argparse.Namespace) -> int:
    from .._core.backoff import Backoff
    from ..sink.consume import AmqpSource, Consumer, StopFlag, Verdict, logger, parse_source, run
    from . import UsageError

    # Everything that can be refused is refused before the inbox is opened.
    try:
        source = parse_source(args.source, tuple(args.allow_host))
    except ValueError as exc:
        raise UsageError(f"--from: {exc}") from None
    try:
        backoff = Backoff(args.base_backoff, args.max_backoff)
    except ValueError as exc:
        raise UsageError(f"--max-backoff: {exc}") from None
    scheme = "amqp" if isinstance(source, AmqpSource) else "nats"
    importlib.import_module(_DRIVERS[scheme])  # a missing extra is named before any write
    install(logger, args.log_format)
    crash = args.exit_after_commit

    def die_if_drilled(verdict: Verdict) -> None:
        print(f"drill: {verdict.event_id} committed, exiting with {crash} before the ack",
              flush=True)  # fmt: skip
        os._exit(crash)

    def kill_after_refusal(verdict: Verdict) -> None:
        print(f"drill: {verdict.event_id} refused and recorded, killed before the rejection",
              flush=True)  # fmt: skip
        os.kill(os.getpid(), signal.SIGKILL)

    # A stop asked for while it is still starting (opening the inbox, connecting; a Pod
    # deleted right after it started) is a clean stop too, not death by the signal.
    stop = StopFlag()
    restore = stop.install()
    try:
        with open_inbox(args) as inbox:
            drill = None if crash is None else die_if_drilled
            refusal_drill = kill_after_refusal if args.kill_after_refusal else None
            consumer = Consumer(
                inbox, backoff, stop=stop, after_commit=drill, after_refusal=refusal_drill
            )
            metrics = _metrics(consumer, args)
            if args.handlers:
                print(f"ackledger consume: handlers {describe_kinds(args.handlers)}",
                      file=sys.stderr, flush=True)  # fmt: skip
            print(f"ackledger consume: consuming {source.shown()}", flush=True)
            try:
                return run(source, consumer)
            finally:
                if metrics is not None:
                    metrics.close()
    finally:
        restore()


def _metrics(consumer: Consumer, args: argparse.Namespace) -> Any:
    if args.metrics_port is None:
        return None
    from ..sink.consume_metrics import ConsumeMetrics

    try:
        metrics = ConsumeMetrics(consumer.counts, args.metrics_host, args.metrics_port)
    except OSError as exc:
        raise ValueError(f"--metrics-port: cannot listen: {exc}") from None
    print(f"ackledger consume metrics listening on {metrics.url}", flush=True)
    return metrics
