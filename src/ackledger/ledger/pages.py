"""Pages of the ledger's listings: ``limit`` rows numbered after an ``after`` cursor.

The cursor is the last row's own number (``delivery_no``, ``attempt_no``), so a page starts
with one index look-up however deep it is, and rows written meanwhile never shift a page.
The service always pages (a listing of 300,000 keys was 64 MB in one answer and stalled the
other requests for seconds); the Python API returns everything unless asked to page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ..errors import InvalidEvent

if TYPE_CHECKING:
    from starlette.requests import Request

#: The service's page when ``limit`` is not given, and the largest it gives.
DEFAULT_PAGE = 1000
MAX_PAGE = 10000
#: Row numbers are SQL integers (64-bit on both databases).
MAX_NUMBER = 2**63 - 1


def _whole(value: object, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidEvent(f"{name}: must be a whole number from {low} to {high}", field=name)
    return value


def check_page(after: object, limit: object) -> tuple[int | None, int | None]:
    """``(after, limit)`` as given, each None or a whole number in range (InvalidEvent)."""
    return (
        None if after is None else _whole(after, "after", 0, MAX_NUMBER),
        None if limit is None else _whole(limit, "limit", 1, MAX_PAGE),
    )


def page_from_query(query: Mapping[str, Sequence[str]]) -> tuple[int | None, int]:
    """``after`` and ``limit`` of a listing's query (values as lists), with the default page;
    InvalidEvent naming the parameter for a value given twice or not a number in range."""
    found: dict[str, int] = {}
    for name in ("after", "limit"):
        values = query.get(name, ())
        if len(values) > 1:
            raise InvalidEvent(f"{name}: given more than once", field=name)
        if values:
            text = values[0]
            # int() would take spaces, signs, underscores and other scripts' digits.
            if not (text.isascii() and text.isdigit() and len(text) <= 19):
                raise InvalidEvent(f"{name}: must be a whole number, got {text[:40]!r}", field=name)
            found[name] = int(text)
    after, limit = check_page(found.get("after"), found.get("limit", DEFAULT_PAGE))
    assert limit is not None
    return after, limit


def next_link(
    request: Request, rows: Sequence[Mapping[str, Any]], number: str, limit: int
) -> dict[str, str] | None:
    """The ``Link: <…>; rel="next"`` header of a full page (RFC 8288): the same query with
    ``after`` set to the page's last number. A page shorter than ``limit`` is the last."""
    if len(rows) < limit:
        return None
    last = rows[-1][number]
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "after"]
    url = f"{request.url.path}?{urlencode([*query, ('after', str(last))])}"
    return {"Link": f'<{url}>; rel="next"'}
