"""Ledger commands: ``deliver`` (the worker, ``--run`` its work) and ``ledger purge`` (key
retention)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import uuid

from ..ledger.client import deliveries_target
from ..ledger.ledger import DEFAULT_RETENTION_SECONDS, MODES, LedgerRequest, check_request
from .arguments import add_http_client, duration_arg, existing_target, json_arg, positive_float
from .exits import EXIT_FAIL_AFTER_SAVE, EXIT_STOPPED
from .exits import EXIT_UNREACHABLE as EXIT_UNAVAILABLE  # worth retrying
from .exposure import add_client_token, token_of
from .run_work import DEFAULT_CLAIM_TTL, run_work


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deliver = commands.add_parser(
        "deliver",
        help="ask a ledger for the delivery of a business key (the Job worker)",
        description="Send one request to a ledger's /deliveries and print its answer as JSON. "
        "The business key (--case-id, --work-id) decides the delivery; --pod-uid only traces "
        "which execution asked. Exit 0 on an answer, 2 on bad input or a refusal (400, 422), "
        f"{EXIT_UNAVAILABLE} if the ledger is unreachable or (--run) the key is in flight (409). "
        "With --run CMD: 0 when the work is completed (now or before), else CMD's own status.",
    )
    deliver.add_argument(
        "--ledger", required=True, metavar="URL",
        help="the ledger: its base URL http://HOST:PORT or its /deliveries URL",
    )  # fmt: skip
    deliver.add_argument("--case-id", required=True, help="the business scope")
    deliver.add_argument("--work-id", required=True, help="the logical piece of work in it")
    deliver.add_argument(
        "--pod-uid",
        help="this execution (default: $POD_UID, else a fresh random UUID per process)",
    )
    deliver.add_argument("--mode", choices=MODES, default="idempotent", help="default idempotent")
    deliver.add_argument(
        "--payload", metavar="JSON", help="a JSON object; the same key with another payload is "
        "refused (422)"
    )  # fmt: skip
    add_http_client(deliver, "the ledger (e.g. the ledger's Service name in a cluster)")
    add_client_token(deliver)
    deliver.add_argument(
        "--fail-after-save",
        action="store_true",
        help=f"drill: once the ledger has answered, exit {EXIT_FAIL_AFTER_SAVE} without "
        "printing success (the post-save failure that makes a Job retry)",
    )
    deliver.add_argument(
        "--run",
        metavar="CMD",
        help="the work, one shell-quoted command: requested with a claim, run only if the "
        "delivery is not completed, completed when CMD exits 0; a failing CMD releases the "
        "claim and its exit status is deliver's",
    )
    deliver.add_argument(
        "--claim-ttl",
        type=seconds_arg,
        metavar="DURATION",
        help="with --run: a claim younger than this holds the key (409 -> exit "
        f"{EXIT_UNAVAILABLE}); an older one is taken over, its Pod died (default "
        f"{DEFAULT_CLAIM_TTL:g}s; seconds or e.g. 5m)",
    )
    deliver.set_defaults(handler=cmd_deliver)

    ledger = commands.add_parser("ledger", help="maintain a ledger database")
    actions = ledger.add_subparsers(dest="action", metavar="ACTION", required=True)
    purge = actions.add_parser(
        "purge",
        help="forget business keys nobody asked for in DURATION",
        description="Delete every key (its deliveries and attempts) with no request for longer "
        "than --older-than. A purged key starts fresh: the next request for it gets a NEW "
        "delivery number, so purge only keys that can no longer be retried. Keys with any "
        "recent request are kept whole. Idempotency keys (of idempotent functions and the "
        "HTTP middleware) past their ttl are deleted too.",
    )
    purge.add_argument(
        "--db", required=True, metavar="PATH_OR_URL",
        help="the ledger database: a SQLite file or a postgresql:// URL",
    )  # fmt: skip
    purge.add_argument(
        "--older-than",
        type=duration_arg,
        default=DEFAULT_RETENTION_SECONDS,
        metavar="DURATION",
        help="e.g. 30d, 12h, 90m (default 30d, the documented key retention)",
    )
    purge.set_defaults(handler=cmd_ledger_purge)


def _delivery_request(args: argparse.Namespace) -> LedgerRequest:
    """The request ``deliver`` makes, checked before any connection: bad input names its flag."""
    from ..errors import InvalidEvent, UnsafeTarget
    from . import UsageError

    try:
        deliveries_target(args.ledger, args.allow_host)
    except UnsafeTarget as exc:
        raise UsageError(f"--ledger: {exc}") from None
    payload = None
    if args.payload is not None:
        payload = json_arg(args.payload, "--payload")
    # An empty --pod-uid is bad input like any other (check_request names it), not a
    # request for the default.
    pod_uid = (
        args.pod_uid if args.pod_uid is not None else os.environ.get("POD_UID") or str(uuid.uuid4())
    )
    if args.claim_ttl is not None and args.run is None:
        raise UsageError("--claim-ttl: only with --run (a claim is taken for work deliver runs)")
    claim_ttl = None if args.run is None else args.claim_ttl or DEFAULT_CLAIM_TTL
    try:
        return check_request(
            args.case_id, args.work_id, pod_uid, args.mode, payload, claim_ttl=claim_ttl
        )
    except InvalidEvent as exc:
        raise UsageError(f"--{(exc.field or 'input').replace('_', '-')}: {exc}") from None


def cmd_deliver(args: argparse.Namespace) -> int:
    from ..errors import NotAcknowledged
    from ..ledger.client import request_delivery
    from ..ledger.outcomes import InFlight
    from . import UsageError

    req = _delivery_request(args)
    command = None if args.run is None else _command(args.run)
    try:
        answer = request_delivery(
            args.ledger,
            req,
            timeout=args.timeout,
            allowed_hosts=args.allow_host,
            token=token_of(args),
        )
    except InFlight as exc:
        # Another Pod may be doing this work right now: running it too is what the claim
        # prevents. Worth a retry later (Retry-After), so not bad input.
        print(f"ackledger: in flight: {exc}", file=sys.stderr)
        return EXIT_STOPPED  # CONTRACT v2 §10: exit 1, the answer is "not now"
    except (OSError, NotAcknowledged) as exc:
        # A refusal (Conflict, InvalidEvent) is not caught here: one line, exit 2, as retrying
        # it cannot help; a ledger that did not answer may be worth another try.
        if isinstance(exc, NotAcknowledged) and exc.status == 413:
            # Too large is bad input too: the same request would be refused every time.
            raise UsageError("--payload: the ledger refused the request as too large") from None
        print(f"ackledger: ledger unavailable: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.fail_after_save:
        print(
            f"drill: the ledger saved delivery {answer['delivery_no']} (attempt "
            f"{answer.get('attempt')}); exiting {EXIT_FAIL_AFTER_SAVE} before reporting success",
            file=sys.stderr,
        )
        return EXIT_FAIL_AFTER_SAVE
    if command is not None:
        return run_work(args, req, answer, command)
    print(json.dumps(answer))
    return 0


def _command(text: str) -> list[str]:
    from . import UsageError

    try:
        command = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--run: not a shell-quoted command ({exc})") from None
    if not command:
        raise UsageError("--run: empty command")
    return command


def seconds_arg(text: str) -> float:
    """An argparse type: plain seconds (``300``) or a duration (``5m``)."""
    if text.strip().isascii() and text.strip().replace(".", "", 1).isdigit():
        return positive_float(text)
    return duration_arg(text)


def cmd_ledger_purge(args: argparse.Namespace) -> int:
    from ..ledger.ledger import Ledger

    existing_target(args.db, "db")
    with Ledger(args.db) as ledger:
        removed = ledger.purge(args.older_than)
        expired = ledger.purge_keys()
    print(
        f"purged {removed['deliveries']} deliveries and {removed['attempts']} attempts of keys "
        f"idle for over {args.older_than:g} s, and {expired} expired idempotency keys"
    )
    return 0
