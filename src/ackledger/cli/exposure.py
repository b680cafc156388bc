"""``--token-file`` and ``--insecure-no-token``: who may talk to a service (CONTRACT v2 §9)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

    from starlette.types import ASGIApp

    from ..wire.token import Token


def token_of(args: argparse.Namespace) -> Token | None:
    """The token in the file ``--token-file`` names, or None; a file that cannot be read or
    holds no token is bad input (one line naming the file, never its content). Read by the
    command, not the parser: parsing a command line (as the manifests' tests do) reads no file."""
    from ..wire.token import read_token_file
    from . import UsageError

    if args.token_file is None:
        return None
    try:
        return read_token_file(args.token_file)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


_CLIENT_HELP = (
    "a file holding the bearer token of the service(s) called (sent as Authorization: Bearer; "
    "never printed)"
)
_SERVICE_HELP = (
    "a file holding the bearer token every request but /healthz and /readyz must carry "
    "(compared in constant time); required to bind beyond loopback"
)


def add_client_token(parser: argparse.ArgumentParser, help: str = _CLIENT_HELP) -> None:
    """``--token-file`` of a command that calls a service (or, with its own help, serves)."""
    parser.add_argument("--token-file", metavar="PATH", help=help)


def add_exposure(parser: argparse.ArgumentParser, token_help: str = _SERVICE_HELP) -> None:
    """A service's ``--token-file`` (``token_help``: what it guards, when not every request)
    and ``--insecure-no-token``."""
    add_client_token(parser, token_help)
    parser.add_argument(
        "--insecure-no-token", action="store_true",
        help="bind beyond loopback without a token (anyone who can reach the port can write)",
    )  # fmt: skip


def check_exposure(args: argparse.Namespace) -> None:
    """Refuse to listen beyond loopback without a token unless told to, before binding."""
    from ..web.guard import is_loopback_address
    from . import UsageError

    if args.token_file is not None and args.insecure_no_token:
        raise UsageError("--insecure-no-token: contradicts --token-file; give one of them")
    args.token = token_of(args)
    host = args.host.strip().strip("[]")
    if is_loopback_address(host) or args.token is not None:
        return
    if not args.insecure_no_token:
        raise UsageError(
            f"--host {args.host}: binding beyond loopback needs --token-file PATH "
            "(or --insecure-no-token to accept requests from anyone who can reach it)"
        )
    print(
        f"ackledger: warning: listening on {args.host} without a token: anyone who can reach "
        "this port can read and write",
        file=sys.stderr,
        flush=True,
    )


def guarded(
    app: ASGIApp, sock: socket.socket, args: argparse.Namespace, *, token: bool = True
) -> ASGIApp:
    """``app`` behind the token and, on loopback, the Host check (``web.guard``).

    ``token=False``: the app checks the token itself, on the requests that need it (the
    console: a browser cannot send a Bearer header with a page it navigates to, so its pages
    are read without one and its buttons carry the token in their form)."""
    from ..web.guard import Guard, is_loopback_address

    host = sock.getsockname()[0]
    return Guard(app, token=args.token if token else None, loopback=is_loopback_address(host))
