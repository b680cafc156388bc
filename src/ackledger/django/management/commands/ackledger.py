"""``python manage.py ackledger COMMAND ...``: ackledger's command line on the database of
``settings.ACKLEDGER["DATABASE"]`` (``ackledger.django.commands``)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from ackledger.django.commands import run


class Command(BaseCommand):
    help = (
        "Run an ackledger command (relay, serve sink, consume, status, trace, reconcile, "
        "quarantine, requeue, refused, ...) on the database of settings.ACKLEDGER['DATABASE']; its "
        "--source/--db/--target is filled in from settings unless given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("words", nargs="*", metavar="COMMAND ...")

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        # Every word after "ackledger" is the command line's own (its options too); Django's
        # --settings and --pythonpath were read by manage.py before this is called.
        sys.exit(run(_without_django_options(argv[2:])))

    def handle(self, *args: Any, **options: Any) -> None:
        code = run([*args, *options.get("words", [])])
        if code:
            raise SystemExit(code)


def _without_django_options(words: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in ("--settings", "--pythonpath"):
            skip = True
        elif not word.startswith(("--settings=", "--pythonpath=")):
            kept.append(word)
    return kept
