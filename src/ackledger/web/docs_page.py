"""``/openapi.json`` and ``/docs``: a service's OpenAPI document, and the same as a page.

The page is plain HTML rendered here from the document once, when the app is made: no script,
no stylesheet or font from elsewhere, so it reads the same offline and inside a cluster.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute

from .._core.build import version
from .answers import Answer, json_answer
from .openapi import DOCS, OPENAPI, DocumentedRoute, openapi_document

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "pre{background:#f4f4f4;padding:.5rem;overflow-x:auto}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;"
    "text-align:left;vertical-align:top}.method{font-weight:bold;text-transform:uppercase}"
)


def api_routes(
    prefix: str,
    title: str,
    description: str,
    routes: Sequence[BaseRoute],
    *,
    guarded: bool = True,
) -> list[DocumentedRoute]:
    """The two routes that describe ``routes`` and themselves (``guarded``: as in
    ``openapi_document``)."""

    async def openapi(request: Request) -> Answer:
        return document

    async def docs(request: Request) -> Answer:
        return page

    own = [
        DocumentedRoute(
            prefix + "/openapi.json", openapi, methods=["GET"], operations={"GET": OPENAPI}
        ),
        DocumentedRoute(prefix + "/docs", docs, methods=["GET"], operations={"GET": DOCS}),
    ]
    spec = openapi_document(title, version(), description, [*routes, *own], guarded=guarded)
    document = json_answer(spec)
    page = Answer(200, render(spec).encode(), "text/html; charset=utf-8")
    return own


def render(spec: dict[str, Any]) -> str:
    info = spec["info"]
    esc = html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{esc(info['title'])}"
        f"</title><style>{_STYLE}</style></head><body><h1>{esc(info['title'])}</h1>"
        f"<p>{esc(info['description'])} Version {esc(info['version'])}. The machine-readable "
        "form is <a href=openapi.json>openapi.json</a> (OpenAPI 3.1)."
    ]
    if "security" in spec:
        parts.append(
            " Where the service has a token (<code>--token-file</code>), every route but the "
            "probes <code>/healthz</code> and <code>/readyz</code> needs "
            "<code>Authorization: Bearer TOKEN</code>."
        )
    parts.append("</p><ul>")
    operations = [
        (path, method, op) for path, item in spec["paths"].items() for method, op in item.items()
    ]
    for path, method, op in operations:
        anchor = esc(f"{method}-{path}", quote=True)
        parts.append(
            f"<li><a href='#{anchor}'><span class=method>{esc(method)}</span> {esc(path)}</a>"
            f" {esc(op.get('summary', ''))}</li>"
        )
    parts.append("</ul>")
    for path, method, op in operations:
        parts.append(_operation(spec, path, method, op))
    parts.append("</body></html>")
    return "".join(parts)


def _operation(spec: dict[str, Any], path: str, method: str, op: dict[str, Any]) -> str:
    esc = html.escape
    anchor = esc(f"{method}-{path}", quote=True)
    out = [
        f"<h2 id='{anchor}'><span class=method>{esc(method)}</span> {esc(path)}</h2>",
        f"<p>{esc(op.get('summary', ''))}</p>",
    ]
    if "description" in op:
        out.append(f"<p>{esc(op['description'])}</p>")
    if op.get("parameters"):
        rows = "".join(
            f"<tr><td><code>{esc(p['name'])}</code></td><td>{esc(p['in'])}</td>"
            f"<td>{'required' if p.get('required') else 'optional'}</td>"
            f"<td><code>{esc(json.dumps(p.get('schema', {})))}</code></td></tr>"
            for p in op["parameters"]
        )
        out.append(
            f"<h3>Parameters</h3><table><tr><th>name</th><th>in</th><th></th><th>schema</th>"
            f"</tr>{rows}</table>"
        )
    body = op.get("requestBody")
    if body:
        out.append("<h3>Request body</h3>")
        for media, content in body["content"].items():
            out.append(f"<p><code>{esc(media)}</code></p>{_schema(content)}")
    out.append("<h3>Answers</h3><table><tr><th>status</th><th>meaning</th><th>body</th></tr>")
    for status, answer in op["responses"].items():
        shown = _resolved(spec, answer)
        media = ", ".join(shown.get("content", {})) or "-"
        headers = ", ".join(shown.get("headers", {}))
        extra = f" Headers: {esc(headers)}." if headers else ""
        out.append(
            f"<tr><td>{esc(status)}</td><td>{esc(shown.get('description', ''))}{extra}</td>"
            f"<td><code>{esc(media)}</code></td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _schema(content: dict[str, Any]) -> str:
    schema = content.get("schema")
    if not schema:
        return f"<p>{html.escape(content.get('description', 'any JSON'))}</p>"
    return f"<pre>{html.escape(json.dumps(schema, indent=2))}</pre>"


def _resolved(spec: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """A response, or the shared one its ``$ref`` names (``#/components/responses/X``)."""
    ref = answer.get("$ref")
    if not ref:
        return answer
    found: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        found = found[part]
    return dict(found)
