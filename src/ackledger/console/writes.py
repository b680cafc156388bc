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
from urllib.parse import parse_qs

from starlette.requests import Request

from ..wire.token import Token

#: A form here holds a token and a reason (at most 1000 characters): 16 KiB is ample.
MAX_FORM_BYTES = 16 * 1024


class Refused(Exception):
    """A write that is not allowed; ``status`` is the answer's code, the text says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (one value a field); Refused for anything else.
    Parsed here rather than with Starlette's form parser, which needs python-multipart."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "the console takes application/x-www-form-urlencoded forms only")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise Refused(400, "the form is not UTF-8") from None
    form: dict[str, str] = {}
    for name, values in fields.items():
        if len(values) > 1:
            raise Refused(400, f"{name}: given more than once")
        form[name] = values[0]
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


def check_token(request: Request, form: dict[str, str], expected: Token | None) -> None:
    """Refused (403) unless the form's ``token`` or the Bearer header is the console's."""
    if expected is None:
        raise Refused(
            403,
            "this console was started without --token-file: it is read-only "
            "(restart it with --token-file F to quarantine and requeue)",
        )
    given = form.get("token")
    if not given:
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        given = credentials if scheme.lower() == "bearer" else ""
    if not given:
        raise Refused(403, "the console's token is missing: type it into the token field")
    want = expected.value.encode("ascii")
    if not hmac.compare_digest(given.encode("utf-8", "replace"), want):
        raise Refused(403, "that is not the console's token: nothing was written")
