"""The OpenAPI 3.1 document of a service, built from its routes.

Each route is declared as a :class:`DocumentedRoute`, with the OpenAPI operation of each of its
methods beside it. The document is made from the routes the app really has: paths come from
the route templates (``/events/{event_id}``), path parameters from the templates' own
parameters (so a declared parameter can never name one the path lacks), and what every
operation shares is added here once: the bearer scheme with its 401, the 421 of the ``Host``
check, the problem JSON schema. A route declared without an operation still appears, with a
bare 200, so the document never silently lacks a route.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from starlette.routing import BaseRoute, Route

Operation = dict[str, Any]

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "field": {"type": "string", "description": "the attribute or field that is wrong"},
    },
}
_SHARED_RESPONSES = {
    "Unauthorized": {
        "description": "missing or wrong bearer token, where the service has one (--token-file)",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        "content": {"application/problem+json": {"schema": PROBLEM_REF}},
    },
    "MisdirectedRequest": {
        "description": "a service bound to loopback was asked for a Host that is not a "
        "loopback name (DNS rebinding)",
        "content": {"application/problem+json": {"schema": PROBLEM_REF}},
    },
}
_PARAMETER_TYPES = {"IntegerConvertor": "integer", "FloatConvertor": "number"}


class DocumentedRoute(Route):
    """A Starlette route with the OpenAPI operation of each of its methods.

    ``public`` routes need no token: the probes ``/healthz`` and ``/readyz``, which a kubelet
    asks without one and which tell nothing but "alive" and "ready". Their operations have no
    security requirement and no 401.
    """

    def __init__(
        self,
        path: str,
        endpoint: Callable[..., Any],
        *,
        methods: Iterable[str],
        operations: Mapping[str, Operation] | None = None,
        public: bool = False,
    ) -> None:
        super().__init__(path, endpoint, methods=list(methods))
        self.operations = {method.lower(): op for method, op in (operations or {}).items()}
        self.public = public


def problem(description: str) -> dict[str, Any]:
    """A response whose body is problem JSON."""
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": PROBLEM_REF}},
    }


def json_response(description: str, schema: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": dict(schema)}},
        **extra,
    }


def replayed_header() -> dict[str, Any]:
    """The ``headers`` member of a response that can be a replay."""
    return {"Idempotent-Replayed": {"$ref": "#/components/headers/IdempotentReplayed"}}


def openapi_document(
    title: str,
    version: str,
    description: str,
    routes: Iterable[BaseRoute],
    *,
    guarded: bool = True,
) -> dict[str, Any]:
    """``guarded``: the service's token guards every route but the public ones (401 without
    it); else each operation says what it needs (the console checks its own token)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        item = paths.setdefault(route.path_format, {})
        declared = route.operations if isinstance(route, DocumentedRoute) else {}
        public = isinstance(route, DocumentedRoute) and route.public
        for method in sorted(m.lower() for m in route.methods or ()):
            if method == "head" and "head" not in declared:
                continue  # Starlette's implied HEAD of every GET
            operation = copy.deepcopy(declared.get(method)) or _bare(route)
            item[method] = _completed(operation, route, public=public, guarded=guarded)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        **({"security": [{"bearer": []}]} if guarded else {}),
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Problem": _PROBLEM_SCHEMA},
            "responses": _SHARED_RESPONSES,
            "headers": {
                "IdempotentReplayed": {
                    "description": "true when this answer replays an earlier one (a "
                    "duplicate): nothing was applied or created again",
                    "schema": {"const": "true"},
                }
            },
        },
    }


def _bare(route: Route) -> Operation:
    doc = (getattr(route.endpoint, "__doc__", None) or "").strip().splitlines()
    summary = doc[0] if doc else route.path_format
    return {"summary": summary, "responses": {"200": {"description": "OK"}}}


def _completed(operation: Operation, route: Route, *, public: bool, guarded: bool) -> Operation:
    """``operation`` with its path parameters taken from the template, and the answers every
    operation shares."""
    given = {p["name"]: p for p in operation.get("parameters", []) if p.get("in") == "path"}
    unknown = sorted(set(given) - set(route.param_convertors))
    if unknown:
        raise ValueError(f"{route.path}: parameter {unknown[0]!r} is not in the path")
    others = [p for p in operation.get("parameters", []) if p.get("in") != "path"]
    in_path = [
        given.get(name) or {"name": name, "in": "path", "required": True, "schema": _typed(conv)}
        for name, conv in route.param_convertors.items()
    ]
    if in_path or others:
        operation["parameters"] = in_path + others
    responses = operation.setdefault("responses", {})
    responses.setdefault("421", {"$ref": "#/components/responses/MisdirectedRequest"})
    if public:
        operation["security"] = []
    elif guarded:
        responses.setdefault("401", {"$ref": "#/components/responses/Unauthorized"})
    return operation


def _typed(convertor: object) -> dict[str, str]:
    """The JSON schema of a path parameter, from the route's convertor (``{n:int}``)."""
    return {"type": _PARAMETER_TYPES.get(type(convertor).__name__, "string")}


#: The operations both services share.
READYZ: Operation = {
    "summary": "Readiness: one read of the service's database answers",
    "responses": {
        "200": json_response(
            "ready", {"type": "object", "properties": {"status": {"const": "ready"}}}
        ),
        "503": problem("the database does not answer: route requests elsewhere for now"),
    },
}


def _text(summary: str, description: str, media: str) -> Operation:
    """An operation whose one answer is text (not JSON) of ``media``."""
    answer = {"description": description, "content": {media: {"schema": {"type": "string"}}}}
    return {"summary": summary, "responses": {"200": answer}}


METRICS = _text(
    "Prometheus metrics (docs/operations.md names them)", "the Prometheus text format", "text/plain"
)
OPENAPI: Operation = {
    "summary": "This document",
    "responses": {"200": json_response("OpenAPI 3.1", {"type": "object"})},
}
DOCS = _text(
    "This document as a page to read", "HTML, rendered on the server (no script)", "text/html"
)
