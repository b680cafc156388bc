"""Ledger commands: ``deliver`` (the worker) and ``ledger purge`` (key retention)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

from ..ledger.client import deliveries_target
from ..ledger.ledger import DEFAULT_RETENTION_SECONDS, MODES, LedgerRequest, check_request
from .arguments import add_http_client, duration_arg, existing_target, json_arg
from .exits import EXIT_FAIL_AFTER_SAVE
from .exits import EXIT_UNREACHABLE as EXIT_UNAVAILABLE  # worth retrying
from .exposure import add_client_token, token_of


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deliver = commands.add_parser(
        "deliver",
        help="ask a ledger for the delivery of a business key (the Job worker)",
        description="Send one request to a ledger's /deliveries and print its answer as JSON. "
        "The business key (--case-id, --work-id) decides the delivery; --pod-uid only traces "
        "which execution asked. Exit 0 on an answer, 2 on bad input or a refusal (400, 422), "
        f"{EXIT_UNAVAILABLE} if the ledger is unreachable.",
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
    deliver.set_defaults(handler=cmd_deliver)

    ledger = commands.add_parser("ledger", help="maintain a ledger database")
    actions = ledger.add_subparsers(dest="action", metavar="ACTION", required=True)
    purge = actions.add_parser(
        "purge",
        help="forget business keys nobody asked for in DURATION",
        description="Delete every key (its deliveries and attempts) with no request for longer "
        "than --older-than. A purged key starts fresh: the next request for it gets a NEW "
        "delivery number, so purge only keys that can no longer be retried. Keys with any "
        "recent request are kept whole.",
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
    try:
        return check_request(args.case_id, args.work_id, pod_uid, args.mode, payload)
    except InvalidEvent as exc:
        raise UsageError(f"--{(exc.field or 'input').replace('_', '-')}: {exc}") from None


def cmd_deliver(args: argparse.Namespace) -> int:
    from ..errors import NotAcknowledged
    from ..ledger.client import request_delivery
    from . import UsageError

    req = _delivery_request(args)
    try:
        answer = request_delivery(
            args.ledger,
            req,
            timeout=args.timeout,
            allowed_hosts=args.allow_host,
            token=token_of(args),
        )
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
    print(json.dumps(answer))
    return 0


def cmd_ledger_purge(args: argparse.Namespace) -> int:
    from ..ledger.ledger import Ledger

    existing_target(args.db, "db")
    with Ledger(args.db) as ledger:
        removed = ledger.purge(args.older_than)
    print(
        f"purged {removed['deliveries']} deliveries and {removed['attempts']} attempts of keys "
        f"idle for over {args.older_than:g} s"
    )
    return 0
