"""``ackledger demo``: the whole story with real processes, and a verdict."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the end-to-end story on SQLite and print a verdict",
        description="Start real services in a temporary directory, crash a relay right after "
        "an ACK, lose a response after the sink's commit, re-run a Job's worker in new Pods "
        "against the ledger, and show from independent reads that nothing is lost and nothing "
        "is applied twice. Exit 0 only if every check held.",
    )
    demo.add_argument("--keep", action="store_true", help="keep the temporary directory")
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from .._dev.demo import run
    from . import require_extra

    require_extra("server")  # the services it starts need it: say so instead of a FAIL

    return run(keep=args.keep)
