"""The one failure classifier: what the relay, the consumers and the sink's answers all ask."""

from __future__ import annotations

import pytest

from ackledger import Conflict, InvalidEvent, NoHandler, Rejected
from ackledger._core.failures import (
    CONFLICT,
    PERMANENT,
    TRANSIENT,
    kind_of_error,
    kind_of_status,
    refusal_of,
)


@pytest.mark.parametrize(
    ("error", "kind", "status", "slug"),
    [
        (InvalidEvent("id: missing", field="id"), PERMANENT, 400, "invalid"),
        (Conflict("other content"), CONFLICT, 422, "conflict"),
        (NoHandler("no handler"), PERMANENT, 422, "no-handler"),
        (Rejected("never"), PERMANENT, 422, "rejected"),
        (RuntimeError("the database is away"), TRANSIENT, 503, "handler-failed"),
        (TimeoutError(), TRANSIENT, 503, "handler-failed"),
    ],
)
def test_each_error_has_one_class_and_one_answer(
    error: Exception, kind: str, status: int, slug: str
) -> None:
    refusal = refusal_of(error)
    assert (refusal.kind, refusal.status, refusal.slug) == (kind, status, slug)
    assert kind_of_error(error) == kind
    assert refusal.permanent == (kind != TRANSIENT)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(None, TRANSIENT), (200, TRANSIENT), (400, PERMANENT), (409, PERMANENT), (422, PERMANENT),
     (408, TRANSIENT), (425, TRANSIENT), (429, TRANSIENT), (499, PERMANENT), (500, TRANSIENT),
     (503, TRANSIENT)],
)  # fmt: skip
def test_a_receivers_status_is_classed_as_the_relay_did(status: int | None, kind: str) -> None:
    assert kind_of_status(status) == kind
