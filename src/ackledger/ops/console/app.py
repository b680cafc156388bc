"""The console's Starlette app: the pages (``pages``), the buttons (``buttons``), and what
both need (``Console``: the databases it reads, its token, its templates)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.responses import HTMLResponse

from ..._core.timestamps import utc_timestamp
from ...sink.inbox import DEFAULT_NAME
from ...web.docs_page import api_routes
from ...web.openapi import DocumentedRoute, Operation
from .samples import Samples

if TYPE_CHECKING:
    from ...ledger.ledger import Ledger
    from ...source.outbox import Outbox
    from ...wire.token import Token


def _templates() -> jinja2.Environment:
    # Autoescape everywhere: event ids, reasons and errors are other programs' text.
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ackledger.ops.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    # Jinja's own urlencode keeps "/" as it is; a query value must not.
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["when"] = lambda value: "-" if value is None else utc_timestamp(value)
    return env


@dataclass
class Console:
    """What the pages read and the buttons write.

    ``source`` is the outbox's target (path or URL) as given, for the library calls that open
    their own (``trace``, ``reconcile``); ``outbox`` and ``ledger`` stay open while the
    console runs. ``token`` is None for a read-only console."""

    source: str
    outbox: Outbox
    sink: str | None = None
    #: With an inbox database as ``sink``: which of the inboxes sharing it is read.
    inbox_name: str = DEFAULT_NAME
    ledger: Ledger | None = None
    token: Token | None = None
    samples: Samples = field(init=False)
    templates: jinja2.Environment = field(default_factory=_templates)

    def __post_init__(self) -> None:
        self.samples = Samples(self.outbox.stats)

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        values.setdefault("title", name.removesuffix(".html"))
        values["has_sink"] = self.sink is not None
        values["has_ledger"] = self.ledger is not None
        values["writable"] = self.token is not None
        values["outbox_location"] = self.outbox.backend.location
        values["nonce"] = nonce = secrets.token_urlsafe(16)
        body = self.templates.get_template(name).render(**values)
        headers = {"Content-Security-Policy": _POLICY.format(nonce=nonce), **_HEADERS}
        return HTMLResponse(body, status, headers=headers)

    def message(self, status: int, title: str, text: str) -> HTMLResponse:
        return self.page("message.html", status, title=title, text=text)


# Only the page's own inline script runs (its nonce is new on every answer, so text that got
# into a page cannot run even if escaping failed); nothing is loaded from anywhere else, and
# no other site may frame the page (a framed button is a click-jacked button).
_POLICY = (
    "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # "same-origin", not "no-referrer": under no-referrer a browser sends "Origin: null" with
    # the page's own forms, and the origin check below could not tell them from a foreign one.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def create_console_app(console: Console) -> Starlette:
    from . import buttons, pages

    def bind(handler: Any) -> Any:
        async def endpoint(request: Any) -> Any:
            return await handler(console, request)

        return endpoint

    from . import openapi as api

    def get(path: str, handler: Any, operation: Operation) -> DocumentedRoute:
        return DocumentedRoute(path, bind(handler), methods=["GET"], operations={"GET": operation})

    def post(path: str, handler: Any, operation: Operation) -> DocumentedRoute:
        return DocumentedRoute(
            path, bind(handler), methods=["POST"], operations={"POST": operation}
        )

    routes = [
        get("/", pages.overview, api.OVERVIEW),
        get("/samples.json", pages.samples, api.SAMPLES),
        get("/events", pages.events, api.EVENTS),
        get("/trace", pages.trace_page, api.TRACE),
        get("/reconcile", pages.reconcile_page, api.RECONCILE),
        get("/ledger", pages.ledger_page, api.LEDGER),
        get("/healthz", pages.healthz, api.HEALTHZ),
        post("/quarantine", buttons.quarantine, api.QUARANTINE),
        post("/requeue", buttons.requeue, api.REQUEUE),
        post("/requeue-group", buttons.requeue_group, api.REQUEUE_GROUP),
    ]
    routes += api_routes("", "ackledger console", _DESCRIPTION, routes, guarded=False)
    return Starlette(routes=list(routes))


_DESCRIPTION = (
    "The operator's page: status figures, pending and quarantined events, traces, reconcile and "
    "the ledger's keys. The pages are read without a token; the buttons (POST) need the "
    "console's token (--token-file), in the form's token field or as Authorization: Bearer."
)
