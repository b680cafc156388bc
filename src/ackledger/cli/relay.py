"""``ackledger relay``: the long-running relay's arguments; ``relay.runner`` runs it."""

from __future__ import annotations

import argparse

from .._core.logline import FORMATS
from ..relay import runner
from ..relay.leases import DEFAULT_TTL, check_owner, default_owner
from ..relay.policy import DEFAULT_ON_POISON, POISON_POLICIES
from ..relay.settings import DEFAULT_INFLIGHT, RelaySettings
from ..source.inflight import MAX_INFLIGHT
from ..source.marking import MARK_SYNCS
from ..store import is_database_url
from ..wire.sender import is_broker
from .arguments import (
    TO_HELP,
    add_ack,
    add_http_client,
    add_source,
    add_synchronous,
    existing_target,
    limit_arg,
    port_arg,
    positive_float,
    whole_arg,
)
from .exposure import add_client_token, token_of


def _count_arg(text: str) -> int:
    return whole_arg(text, 1)


def _inflight_arg(text: str) -> int:
    return whole_arg(text, 1, MAX_INFLIGHT)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    relay = commands.add_parser(
        "relay",
        help="the long-running relay: send what is pending, back off on failures",
        description="Send pending events in order, marking each only on its ACK (the exact "
        "ACK, unless --ack status); poll when idle; wait out transient failures (no "
        "connection, time-out, 5xx) with capped, jittered exponential backoff, at least as "
        "long as a 429's or 503's Retry-After (capped by --max-backoff); alert on a "
        "permanent one (a 4xx from the sink, but 408, 425 and 429; a broker's return of an "
        "unroutable message) and hold it (retried every --max-backoff seconds), stop (exit 3) "
        "or quarantine it. SIGTERM/SIGINT: finish the send in flight, release any leases, "
        "exit 0. To amqp:// and nats:// it publishes batches of up to --limit events, up to "
        f"{DEFAULT_INFLIGHT} of them in flight (--inflight), and marks each batch's confirmed "
        "prefix in order: a kill -9 re-sends at most the batches not yet marked (--per-item: "
        "one event). To an HTTP sink it sends one event a request unless --batch.",
    )
    add_source(relay)
    relay.add_argument(
        "--to", required=True, metavar="URL",
        help=TO_HELP,
    )  # fmt: skip
    rounds = relay.add_mutually_exclusive_group()
    rounds.add_argument(
        "--batch", dest="batch", action="store_const", const=True,
        help="send each selection (up to --limit events) in one request and mark its "
        "acknowledged prefix in one transaction; the default to amqp:// and nats://, where a "
        "kill -9 re-sends at most the batches in flight (see --inflight)",
    )  # fmt: skip
    rounds.add_argument(
        "--per-item", dest="batch", action="store_const", const=False,
        help="send one event at a time, each marked on its own ACK before the next is sent "
        "(a kill -9 re-sends at most one event); the default to http(s):// sinks",
    )  # fmt: skip
    relay.add_argument(
        "--pipeline", action="store_true",
        help="commit the marks on a second connection while the next event (in batch rounds: "
        "the next batch) is sent; each mark is still durable, a kill -9 re-sends one more "
        "event or batch (a leasing relay's marks still check its lease)",
    )  # fmt: skip
    relay.add_argument(
        "--inflight", type=_inflight_arg, default=None, metavar="N",
        help=f"batch rounds to amqp:// or nats://: publish up to N batches (1-{MAX_INFLIGHT}) "
        "before awaiting the oldest one's confirms; each is marked on its own confirms, in "
        f"order, and the first failure stops (then one batch at a time until a round "
        f"succeeds). Default {DEFAULT_INFLIGHT} there, without --pipeline. A kill -9 re-sends "
        "up to N x --limit events; --inflight 1 keeps it to one batch",
    )  # fmt: skip
    relay.add_argument("--limit", type=limit_arg, default=16, help="events per round, 1-16")
    relay.add_argument(
        "--mark-sync", choices=MARK_SYNCS, default="each",
        help="per-item rounds: fsync every mark (each, default) or only the last of each "
        "round (last: one fsync per round; marks lost to a power cut are re-sent as duplicates)",
    )  # fmt: skip
    relay.add_argument(
        "--base-backoff", type=positive_float, default=0.1, metavar="SECONDS",
        help="first backoff ceiling (default 0.1)",
    )  # fmt: skip
    relay.add_argument(
        "--max-backoff", type=positive_float, default=30.0, metavar="SECONDS",
        help="backoff cap, also of a 429's or 503's Retry-After, and the wait between tries "
        "of a held poison event (default 30)",
    )  # fmt: skip
    relay.add_argument("--seed", type=whole_arg, help="seed the jitter (reproducible waits)")
    relay.add_argument(
        "--poll-interval", type=positive_float, default=0.5, metavar="SECONDS",
        help="wait between looks when nothing is pending (default 0.5)",
    )  # fmt: skip
    relay.add_argument(
        "--no-listen", dest="listen", action="store_false",
        help="PostgreSQL: poll only, do not LISTEN for publishes (e.g. behind PgBouncer's "
        "transaction pooling, where LISTEN does not work)",
    )  # fmt: skip
    relay.add_argument(
        "--on-poison", choices=POISON_POLICIES, default=DEFAULT_ON_POISON,
        help="on a permanent failure (a poison event): hold (default: stay up, alert and try "
        "it again every --max-backoff seconds; its partition waits, others go on; a fix or a "
        "quarantine lets it go on), stop (exit 3: under a restarting supervisor, a crash "
        "loop) or quarantine it and go on (a reorder)",
    )  # fmt: skip
    relay.add_argument("--metrics-port", type=port_arg, metavar="N", help="serve /metrics here")
    relay.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)"
    )
    relay.add_argument("--log-format", choices=FORMATS, default="text", help="text or json")
    add_http_client(relay)
    add_ack(relay)
    add_client_token(relay)
    lease = relay.add_argument_group(
        "PostgreSQL: one of N relays",
        "With a postgresql:// source the relay leases partitions (the event's partitionkey) "
        "so that several relays can run at once: order is kept within each partition, not "
        "across them, and a failure stops only its partition.",
    )
    lease.add_argument(
        "--owner", metavar="NAME",
        help="this relay's name in lease rows, unique among running relays "
        "(default: $POD_NAME, else HOSTNAME-PID)",
    )  # fmt: skip
    lease.add_argument(
        "--lease-ttl", type=positive_float, default=DEFAULT_TTL, metavar="SECONDS",
        help="how long a lease lasts unrenewed: a killed relay's partitions wait at most this "
        "long for another relay (a clean stop releases them at once). Every mark renews it, "
        "so it must outlast one send (--timeout) with room to spare (default "
        f"{DEFAULT_TTL:g}: twice the default time-out)",
    )  # fmt: skip
    lease.add_argument(
        "--single", action="store_true",
        help="run the single loop instead (one global order; run only one such relay)",
    )  # fmt: skip
    # Drills only (docs/postgres.md, verify), so not in the help.
    lease.add_argument("--stop-self-after-acks", type=_count_arg, help=argparse.SUPPRESS)
    add_synchronous(relay)
    relay.set_defaults(handler=cmd_relay)


def cmd_relay(args: argparse.Namespace) -> int:
    from . import UsageError

    # Everything that can be refused is refused before the database is opened.
    per_item = args.batch is False or (args.batch is None and not is_broker(args.to))
    if args.pipeline and per_item and args.mark_sync != "each":
        raise UsageError(
            "--pipeline: every mark committed behind the next send is durable; it does not "
            "combine with --mark-sync last"
        )
    # A name given is checked even where it is not used (a SQLite source, --single).
    owner = check_owner(args.owner) if args.owner is not None else None
    leasing = is_database_url(args.source) and not args.single
    settings = RelaySettings(
        url=args.to,
        batch=args.batch,
        limit=args.limit,
        poll_interval=args.poll_interval,
        listen=args.listen,
        on_poison=args.on_poison,
        timeout=args.timeout,
        mark_sync=args.mark_sync,
        pipeline=args.pipeline,
        inflight=args.inflight,
        allowed_hosts=tuple(args.allow_host),
        token=token_of(args),
        ack=args.ack,
        base_backoff=args.base_backoff,
        max_backoff=args.max_backoff,
        seed=args.seed,
        owner=(owner or default_owner()) if leasing else None,
        lease_ttl=args.lease_ttl,
    )
    try:
        settings.backoff()
    except ValueError as exc:
        raise UsageError(f"--max-backoff: {exc}") from None
    existing_target(args.source)
    return runner.run(
        settings, args.source, synchronous=args.synchronous, log_format=args.log_format,
        metrics_at=None if args.metrics_port is None else (args.metrics_host, args.metrics_port),
        pause_after_acks=args.stop_self_after_acks,
    )  # fmt: skip
