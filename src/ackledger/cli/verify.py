"""``ackledger verify``: the seeded fault campaign (``ops.verify``) and its verdict."""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from ..store import is_database_url
from .arguments import whole_arg
from .exits import EXIT_OK, EXIT_STOPPED

DEFAULT_SCHEDULES = 8
DEFAULT_EVENTS = 40
MAX_EVENTS = 10_000


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = commands.add_parser(
        "verify",
        help="a seeded fault campaign on scratch databases, and a verdict",
        description="Accept warehouse.stock.added events, relay them while the relay is killed "
        "between ACK and mark, the sink's answer is lost after its commit, the sink is killed "
        "mid-batch, the connection is cut mid-batch and (PostgreSQL) a lease is stolen; then "
        "judge by the inventory: lost, double-applied, stuck, reordered within a partition. "
        f"Exit {EXIT_OK} only if all are 0, {EXIT_STOPPED} otherwise. Every failing schedule "
        "prints the command that replays it.",
    )
    verify.add_argument(
        "--source", metavar="PATH_OR_URL",
        help="where the scratch databases go: a folder for SQLite files, or a postgresql:// "
        "server (databases ackledger_verify_* are made and dropped); default a temporary folder",
    )  # fmt: skip
    verify.add_argument(
        "--to", metavar="URL",
        help="relay to this sender of yours (a sink's /events URL, amqp:// or nats:// with your "
        "consumer running) instead of a sink verify starts itself; needs --sink-db",
    )  # fmt: skip
    verify.add_argument(
        "--sink-db", metavar="PATH_OR_URL",
        help="with --to: the inbox database your sink or consumer applies into, read to judge "
        "(verify's events have ids and skus of their own, so other rows are left alone); "
        "with --session: the database your session factory reaches, which the sink verify "
        "starts applies into",
    )  # fmt: skip
    verify.add_argument(
        "--session", metavar="MODULE:ATTR",
        help="run the sink verify starts with your session factory (as serve sink --session: "
        "each transaction in your SQLAlchemy session, handlers called with it); needs "
        "--sink-db, the database it reaches",
    )  # fmt: skip
    verify.add_argument(
        "--handlers", metavar="MODULE:ATTR",
        help="your handlers for the sink verify starts (they override the reference handler "
        "for the types they name); a warehouse.stock.added handler must add qty to inventory",
    )  # fmt: skip
    verify.add_argument(
        "--schedules", type=lambda t: whole_arg(t, 1, 1000), default=DEFAULT_SCHEDULES,
        metavar="N", help=f"schedules to run (default {DEFAULT_SCHEDULES})",
    )  # fmt: skip
    verify.add_argument(
        "--seed", type=lambda t: whole_arg(t, 0), metavar="S",
        help="the first schedule's seed (the next ones take S+1, ...); default a random one",
    )  # fmt: skip
    verify.add_argument(
        "--events", type=lambda t: whole_arg(t, 1, MAX_EVENTS), default=DEFAULT_EVENTS,
        metavar="N", help=f"events per schedule (default {DEFAULT_EVENTS})",
    )  # fmt: skip
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.set_defaults(handler=cmd_verify)


def _check(args: argparse.Namespace) -> list[str]:
    """Everything that can be refused, before a database or process is made; returns the
    event types of the user's handlers (none without ``--handlers``)."""
    from ..ops.databases import existing_database
    from ..sink.handlers import HandlerSpecError, load_handlers
    from ..wire.sender import sender
    from . import UsageError
    from .arguments import on_import_path

    if args.source is not None and not is_database_url(args.source):
        if "://" in args.source:
            raise UsageError(f"--source: a folder or a postgresql:// server, got {args.source!r}")
        if not os.path.isdir(args.source):
            raise UsageError(f"--source: no folder at {args.source!r}")
    if args.to is None:
        if args.sink_db is not None and args.session is None:
            raise UsageError(
                "--sink-db: only with --to or --session (without them verify runs its own "
                "sink on a scratch inbox)"
            )
        if args.session is not None:
            _check_session(args.session, args.sink_db)
    else:
        if args.handlers is not None:
            raise UsageError("--handlers: only without --to (your consumer has its own)")
        if args.session is not None:
            raise UsageError("--session: only without --to (your consumer has its own)")
        if args.sink_db is None:
            raise UsageError(
                "--to: needs --sink-db, the inbox your sender applies into (verify judges by it)"
            )
        sender(args.to, timeout=2).close()
        existing_database(args.sink_db, "sink-db")
    if args.handlers is not None:
        on_import_path()
        try:
            return sorted(load_handlers(args.handlers))
        except HandlerSpecError as exc:
            raise UsageError(f"--handlers: {exc}") from None
    return []


def _check_session(spec: str, sink_db: str | None) -> None:
    """The session factory loads, and its session reaches ``--sink-db``."""
    from ..sink.handlers import HandlerSpecError
    from ..sink.session_factory import SqlAlchemySessions, load_session_factory
    from . import UsageError
    from .arguments import on_import_path

    if sink_db is None:
        raise UsageError("--session: needs --sink-db, the database your session factory reaches")
    on_import_path()
    try:
        sessions = SqlAlchemySessions(load_session_factory(spec))
        sessions.check(sink_db)
    except (HandlerSpecError, TypeError, ValueError) as exc:
        raise UsageError(f"--session: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    from ..ops.verify import report
    from ..ops.verify.campaign import Setup, run_schedule
    from ..ops.verify.schedules import draw
    from ..warehouse import TYPE

    yours = _check(args)
    if yours:
        # Said plainly: the campaign's events are the lab's, and its judge is the inventory.
        others = [name for name in yours if name != TYPE]
        judged = "your handler of it" if TYPE in yours else "the reference handler"
        note = f"verify: judges {TYPE} events only, by the lab's inventory ({judged})"
        if others:
            note += f"; your handlers of {', '.join(others)} are loaded and checked, not exercised"
        print(note, file=sys.stderr)
    first = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    setup = Setup(
        source=args.source, to=args.to, sink_db=args.sink_db, handlers=args.handlers,
        events=args.events, run="v" + secrets.token_hex(4), session=args.session,
    )  # fmt: skip
    kinds = setup.kinds()
    progress = report.Progress(args.schedules)
    if not args.json:
        many = "s" if args.schedules != 1 else ""
        faults = ", ".join(kinds)
        print(f"verify: {args.schedules} schedule{many} from seed {first}, faults {faults}")
    outcomes = []
    for seed in range(first, first + args.schedules):
        progress.schedule_started(seed)
        outcome = run_schedule(setup, draw(seed, kinds))
        outcomes.append(outcome)
        progress.schedule_done(outcome)
    argv = ["verify", *sys.argv[2:]] if sys.argv[1:2] == ["verify"] else ["verify"]
    if args.json:
        print(report.as_json(outcomes, argv))
    else:
        print(report.table(outcomes))
        print(report.verdict(outcomes, argv))
    return EXIT_OK if all(o.counts.clean for o in outcomes) else EXIT_STOPPED
