"""Bearer tokens (CONTRACT v2 section 9): read from a file, checked once, never shown.

A token is what a service compares every request's ``Authorization: Bearer`` against and what
a client sends. Only RFC 6750's ``token68`` characters are taken: anything else (a space, a
CR or LF) could not travel in one header line, or would split it. Error messages name the
file and what is wrong with it, never its content.
"""

from __future__ import annotations

import re
from pathlib import Path

_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")
#: A token longer than this is a wrong file (a key, a certificate), not a bearer token.
MAX_TOKEN_CHARS = 4096


class Token:
    """A bearer token whose ``repr`` and ``str`` hide it (it is passed around in argparse
    namespaces and settings objects, which get printed in tracebacks and debug output)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = check_token(value)

    def __repr__(self) -> str:
        return "Token(***)"

    __str__ = __repr__

    def header(self) -> bytes:
        """The ``Authorization`` header's value."""
        return b"Bearer " + self.value.encode("ascii")


def check_token(value: object, what: str = "token") -> str:
    """The token as it is, or ValueError naming ``what`` (never echoing the value)."""
    if not isinstance(value, str):
        raise ValueError(f"{what}: must be a string, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what}: is empty")
    if len(value) > MAX_TOKEN_CHARS:
        raise ValueError(f"{what}: longer than {MAX_TOKEN_CHARS} characters")
    if _TOKEN68.fullmatch(value) is None:
        raise ValueError(
            f"{what}: holds characters a bearer token cannot carry "
            "(allowed: letters, digits and -._~+/ with trailing =)"
        )
    return value


def read_token_file(path: str | Path) -> Token:
    """The token held by the file at ``path``: its text without the line end(s) around it."""
    what = f"--token-file {path}"
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{what}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOKEN_CHARS + 2:
        raise ValueError(f"{what}: longer than {MAX_TOKEN_CHARS} characters")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{what}: not ASCII text") from None
    # A Secret written by `kubectl create secret --from-file` or an editor may end in a newline.
    return Token(check_token(text.strip("\r\n"), what))


def as_token(value: Token | str | None) -> Token | None:
    """A library caller's ``token=`` (a string or a Token) as a Token."""
    if value is None or isinstance(value, Token):
        return value
    return Token(value)
