"""``--session MODULE:ATTR`` and ``--django SETTINGS_MODULE`` of ``serve sink`` and
``consume``: the inbox's transactions held in the user's own session (``sink.session_factory``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sink.inbox import Inbox


def session_arg(text: str) -> object:
    """An argparse type for ``--session``: the loaded factory, or why not (exit 2)."""
    from ..sink.handlers import HandlerSpecError
    from ..sink.session_factory import load_session_factory
    from .arguments import on_import_path

    on_import_path()
    try:
        return load_session_factory(text)
    except HandlerSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_session_options(parser: argparse.ArgumentParser) -> None:
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument(
        "--session", type=session_arg, metavar="MODULE:ATTR",
        help="a zero-argument callable returning a SQLAlchemy Session, AsyncSession or "
        "Connection on the --db database (e.g. shop.db:Session): one is opened per "
        "transaction, handlers get it as handler(session, event), and it commits with the "
        "event's receipt (a raising handler rolls both back)",
    )  # fmt: skip
    chosen.add_argument(
        "--django", metavar="SETTINGS_MODULE",
        help="run the inbox on Django's connection of settings.ACKLEDGER['DATABASE'] (the "
        "--db database) inside transaction.atomic(); handlers are "
        "settings.ACKLEDGER['HANDLERS'] unless --handlers names others, called as "
        "handler(connection, event) so they can save Django models",
    )  # fmt: skip


def open_inbox(args: argparse.Namespace) -> Inbox:
    """The inbox ``args`` ask for: on ackledger's own transactions, the user's sessions, or
    Django's connection. A session on another database than ``--db`` is refused here."""
    from ..sink.inbox import Inbox
    from . import UsageError

    if getattr(args, "django", None):
        from ..django.serving import django_inbox

        try:
            return django_inbox(args.django, args.db, args.handlers, args.synchronous)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"--django {args.django}: {exc}") from None
    if getattr(args, "session", None) is None:
        return Inbox(args.db, handlers=args.handlers, synchronous=args.synchronous)
    from ..sink.session_factory import SessionInbox, SqlAlchemySessions

    sessions = SqlAlchemySessions(args.session)
    try:
        sessions.check(args.db)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--session: {exc}") from None
    return SessionInbox(
        args.db, transactions=sessions, handlers=args.handlers, synchronous=args.synchronous
    )
