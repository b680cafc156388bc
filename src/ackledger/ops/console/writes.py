"""Who may press the console's buttons: the token, and no other site's page.

A write (quarantine, requeue) is a POST form that carries the console's token in its
``token`` field (a password field on the page), or an ``Authorization: Bearer`` header;
either is compared in constant time. That field is the defence against cross-site request
forgery: another site's page can make a browser post a form here but cannot know the token.
A request whose ``Origin`` (or ``Sec-Fetch-Site``) says it comes from another site is
refused as well, before the token is looked at. A console started without ``--token-file``
is read-only: it has no token to compare with, so every write is refused.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect, Request

from ...wire.token import Token

#: A form here holds a token and a reason (at most 1000 characters): 16 KiB is ample.
MAX_FORM_BYTES = 16 * 1024


class Refused(Exception):
    """A write that is not allowed; ``status`` is the answer's code, the text says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: A form here has three fields or so (token, id, reason): more is not one of ours.
MAX_FORM_FIELDS = 16


async def authorized_form(request: Request, expected: Token | None) -> dict[str, str]:
    """The urlencoded form of a POST, read only as far as its token allows: Refused otherwise.

    The token is checked before the form is interpreted: a read-only console refuses at once,
    a Bearer header is compared before the body is read, and a form's ``token`` field (the
    page's own way) is read from a body capped at ``MAX_FORM_BYTES`` and compared before any
    other field is decoded. Parsed here rather than with Starlette's form parser, which needs
    python-multipart."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "the console takes application/x-www-form-urlencoded forms only")
    if expected is None:
        raise Refused(
            403,
            "this console was started without --token-file: it is read-only "
            "(restart it with --token-file F to quarantine and requeue)",
        )
    bearer = _bearer(request)
    if bearer:
        _compare(bearer, expected)
    body = await _capped_body(request)
    if not bearer:
        # Only the token field, found however the rest is encoded: whoever lacks the token
        # learns nothing of how the rest of the form would have been judged.
        token = _token_field(body)
        if not token:
            raise Refused(403, "the console's token is missing: type it into the token field")
        _compare(token, expected)
    try:
        # Strict: a reason sent as invalid UTF-8 (raw or percent-encoded) is refused, never
        # stored with U+FFFD in place of what was meant.
        return _fields(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused(400, "the form is not UTF-8") from None


async def _capped_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise Refused(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise Refused(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    except ClientDisconnect:
        # The client left mid-body: nothing to answer and nothing worth an error line.
        raise Refused(400, "the client left before sending the whole form") from None
    return body


def _token_field(body: bytes) -> str:
    """The form's one ``token`` value ("" if none, or several), whatever else it holds."""
    pairs = parse_qsl(body.decode("latin-1"), keep_blank_values=True, errors="replace")
    tokens = [value for name, value in pairs if name == "token"]
    return tokens[0] if len(tokens) == 1 else ""


def _fields(text: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(
            text, keep_blank_values=True, encoding="utf-8", errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )  # fmt: skip
    except ValueError:  # more fields than max_num_fields
        raise Refused(400, f"the form has more than {MAX_FORM_FIELDS} fields") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise Refused(400, f"{name}: given more than once")
        form[name] = value
    return form


def same_origin(request: Request) -> None:
    """Refused (403) when the browser says the request comes from another site's page."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise Refused(403, f"a write from another site's page is refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = request.headers.get("host", "")
    if origin != f"{request.url.scheme}://{host}":
        raise Refused(403, "a write from another origin is refused (the Origin header names it)")


def _bearer(request: Request) -> str:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials if scheme.lower() == "bearer" else ""


def _compare(given: str, expected: Token) -> None:
    """Refused (403) unless ``given`` is the console's token (compared in constant time)."""
    want = expected.value.encode("ascii")
    if not hmac.compare_digest(given.encode("utf-8", "replace"), want):
        raise Refused(403, "that is not the console's token: nothing was written")
