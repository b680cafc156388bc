"""A service's Starlette app, whose unknown routes and methods are problem JSON too."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from .answers import problem_answer

_ROUTING_PROBLEMS = {
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
}


def build_app(routes: list[BaseRoute], **extra: Any) -> Starlette:
    """A service's Starlette app: problem JSON for unknown routes and methods (with the
    ``extra`` members every answer of the service carries), and no redirect from
    ``/events/`` to ``/events`` (a client that posts to the wrong path should hear so, not be
    sent elsewhere)."""

    async def routing_problem(request: Request, exc: Exception) -> Response:
        # Starlette's own answer is plain text.
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        kind, title = _ROUTING_PROBLEMS.get(status, ("http-error", "HTTP error"))
        path = request.url.path
        detail = (
            f"{request.method} is not allowed on {path}" if status == 405 else f"no route {path}"
        )
        response = problem_answer(status, kind, title, detail, **extra).response()
        if isinstance(exc, HTTPException) and exc.headers:
            response.headers.update(exc.headers)  # the Allow header of a 405
        return response

    app = Starlette(routes=routes, exception_handlers={HTTPException: routing_problem})
    app.router.redirect_slashes = False
    return app
