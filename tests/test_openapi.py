"""The services' OpenAPI documents: generated from the routes the apps really have, valid
(openapi-spec-validator), and the answers the services give match the schemas declared."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ackledger import Outbox, new_event
from ackledger.ledger.app import create_ledger_app
from ackledger.ledger.ledger import Ledger
from ackledger.ops.console.app import Console, create_console_app
from ackledger.sink.app import create_sink_app
from ackledger.sink.inbox import Inbox
from ackledger.web.guard import Guard
from ackledger.web.openapi import DocumentedRoute, openapi_document
from ackledger.wire.token import Token

from .inprocess import InProcess

Spec = dict[str, Any]


@pytest.fixture(params=["sink", "ledger"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[InProcess]:
    if request.param == "sink":
        with Inbox(tmp_path / "sink.db") as inbox, InProcess(create_sink_app(inbox)) as app:
            yield app
    else:
        with Ledger(tmp_path / "ledger.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
            yield app


def _spec(app: InProcess) -> Spec:
    status, headers, body = app.request("GET", "/openapi.json")
    assert status == 200 and headers["content-type"] == "application/json"
    spec: Spec = json.loads(body)
    return spec


def _operations(spec: Spec) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_each_document_is_valid_openapi(service: InProcess) -> None:
    spec = _spec(service)
    validate(spec)  # raises on any error; the hand-written documents failed here
    assert spec["openapi"].startswith("3.1") and spec["info"]["version"]


def test_every_route_is_documented_with_its_parameters_and_shared_answers(
    service: InProcess,
) -> None:
    spec = _spec(service)
    for path, method, operation in _operations(spec):
        names = re.findall(r"{(\w+)}", path)
        declared = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
        assert declared == names, (path, method)
        responses = operation["responses"]
        assert "421" in responses  # the loopback Host check answers every route
        if path in ("/healthz", "/readyz"):  # the probes: a kubelet has no token
            assert operation["security"] == [] and "401" not in responses
        else:
            assert "security" not in operation and "401" in responses, (path, method)
        for status, answer in responses.items():
            if status.startswith("2"):  # every success says what its body is
                assert all("schema" in c for c in answer["content"].values()), (path, status)
    assert spec["security"] == [{"bearer": []}]
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"} <= set(spec["paths"])


def test_the_sink_declares_replays_batch_refusals_and_503(tmp_path: Path) -> None:
    with Inbox(tmp_path / "sink.db") as inbox, InProcess(create_sink_app(inbox)) as app:
        paths = _spec(app)["paths"]
    post = paths["/events"]["post"]["responses"]
    assert "Idempotent-Replayed" in post["200"]["headers"]
    assert {"400", "413", "422", "503"} <= set(post)
    assert {"400", "413", "503"} <= set(paths["/events/batch"]["post"]["responses"])
    assert set(paths) >= {"/events", "/events/batch", "/events/{event_id}"}


def test_the_ledger_declares_replays_and_its_503(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
        paths = _spec(app)["paths"]
    post = paths["/deliveries"]["post"]["responses"]
    assert "Idempotent-Replayed" in post["200"]["headers"]
    assert {"201", "400", "413", "422", "503"} <= set(post)
    assert "503" in paths["/deliveries"]["get"]["responses"]
    assert set(paths["/deliveries"]) == {"get", "post"}


def _checker(spec: Spec, path: str, method: str, status: int) -> Draft202012Validator:
    """A validator for the declared JSON body of that answer, ``$ref``s resolved in ``spec``."""
    registry: Registry[Any] = Registry().with_resource("urn:api", DRAFT202012.create_resource(spec))
    answer = spec["paths"][path][method]["responses"][str(status)]
    media = next(iter(answer["content"]))
    pointer = "/".join(
        part.replace("~", "~0").replace("/", "~1")
        for part in ("paths", path, method, "responses", str(status), "content", media, "schema")
    )
    return Draft202012Validator({"$ref": f"urn:api#/{pointer}"}, registry=registry)


def _lab(event_id: str, qty: int = 1) -> dict[str, Any]:
    return new_event("warehouse.stock.added", {"sku": "tea", "qty": qty}, source="/wh", id=event_id)


def test_the_sinks_answers_match_the_schemas_it_declares(tmp_path: Path) -> None:
    with Inbox(tmp_path / "sink.db") as inbox, InProcess(create_sink_app(inbox)) as app:
        spec = _spec(app)
        answers = [
            ("/events", "post", app.call("POST", "/events", json.dumps(_lab("a")).encode())),
            ("/events", "post", app.call("POST", "/events", json.dumps(_lab("a")).encode())),
            ("/events", "post", app.call("POST", "/events", json.dumps(_lab("a", 2)).encode())),
            ("/events", "post", app.call("POST", "/events", b"{")),
            ("/events/batch", "post", app.post("/events/batch", [_lab("b"), _lab("a", 3)])),
            ("/events/{event_id}", "get", app.call("GET", "/events/a")),
            ("/events/{event_id}", "get", app.call("GET", "/events/never")),
            ("/healthz", "get", app.call("GET", "/healthz")),
            ("/readyz", "get", app.call("GET", "/readyz")),
        ]
    statuses = [(path, status) for path, _, (status, _, _) in answers]
    assert statuses == [
        ("/events", 200), ("/events", 200), ("/events", 422), ("/events", 400),
        ("/events/batch", 200), ("/events/{event_id}", 200), ("/events/{event_id}", 404),
        ("/healthz", 200), ("/readyz", 200),
    ]  # fmt: skip
    for path, method, (status, _, body) in answers:
        _checker(spec, path, method, status).validate(body)
    assert answers[1][2][1]["idempotent-replayed"] == "true"
    assert "error" in answers[4][2][2]  # the batch's second item conflicted


def test_the_ledgers_answers_match_the_schemas_it_declares(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
        spec = _spec(app)
        answers = [
            ("/deliveries", "post", app.deliver(case_id="c", work_id="w")),
            ("/deliveries", "post", app.deliver(case_id="c", work_id="w")),
            ("/deliveries", "post", app.deliver(case_id="c", work_id="w", payload={"x": 1})),
            ("/deliveries", "post", app.call("POST", "/deliveries", b"[]")),
            ("/deliveries", "get", app.call("GET", "/deliveries?case_id=c")),
            ("/attempts", "get", app.call("GET", "/attempts")),
            ("/healthz", "get", app.call("GET", "/healthz")),
        ]
    assert [status for _, _, (status, _, _) in answers] == [201, 200, 422, 400, 200, 200, 200]
    for path, method, (status, _, body) in answers:
        _checker(spec, path, method, status).validate(body)


def test_the_docs_page_lists_every_operation_and_loads_nothing_from_elsewhere(
    service: InProcess,
) -> None:
    spec = _spec(service)
    status, headers, body = service.request("GET", "/docs")
    page = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/html")
    for path, method, operation in _operations(spec):
        anchor = f"id='{method}-{path}'"
        assert anchor in page, anchor
        assert operation["summary"].replace("'", "&#x27;") in page
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert not re.search(r"(src|href)=['\"]?https?:", page)  # no CDN, no font, no tracker


async def _plain(request: Request) -> Response:
    """A route nobody documented."""
    return Response()


def test_a_route_without_an_operation_still_appears_and_a_wrong_parameter_is_refused() -> None:
    spec = openapi_document("t", "1", "d", [Route("/plain/{n:int}", _plain, methods=["GET"])])
    validate(spec)
    operation = spec["paths"]["/plain/{n}"]["get"]
    assert operation["summary"] == "A route nobody documented."
    assert operation["parameters"][0]["schema"] == {"type": "integer"}
    wrong = DocumentedRoute(
        "/items/{item_id}", _plain, methods=["GET"],
        operations={"GET": {"parameters": [{"name": "id", "in": "path", "required": True}]}},
    )  # fmt: skip
    with pytest.raises(ValueError, match="'id' is not in the path"):
        openapi_document("t", "1", "d", [wrong])


class ConsoleUnderTest(NamedTuple):
    client: InProcess
    routes: list[BaseRoute]  #: the console app's own routes


@pytest.fixture
def console(tmp_path: Path) -> Iterator[ConsoleUnderTest]:
    """The console as the command serves it (the app checking its token) with a ledger and
    no sink."""
    with Outbox(tmp_path / "source.db") as outbox, Ledger(tmp_path / "ledger.db") as ledger:
        given = Console(
            str(tmp_path / "source.db"), outbox, ledger=ledger, token=Token("console-token-1")
        )
        app = create_console_app(given)
        with InProcess(Guard(app, loopback=False)) as client:
            yield ConsoleUnderTest(client, app.routes)


def test_the_console_documents_every_route_and_its_token_as_it_checks_it(
    console: ConsoleUnderTest,
) -> None:
    spec = _spec(console.client)
    validate(spec)
    served = {
        (route.path, method.lower())
        for route in console.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert served == {(path, method) for path, method, _ in _operations(spec)}
    # No token guards the whole console: pages are read without one, and a button refused
    # for its token is a 403 page, never the services' 401.
    assert "security" not in spec
    for path, method, operation in _operations(spec):
        assert "401" not in operation["responses"], (path, method)
        if method == "post":
            assert operation["security"] == [{"bearer": []}, {}]
            form = operation["requestBody"]["content"]["application/x-www-form-urlencoded"]
            assert "token" in form["schema"]["properties"]
    status, _, page = console.client.request("GET", "/docs")
    assert status == 200 and b"every route but the probes" not in page


def test_the_consoles_answers_are_the_ones_it_declares(console: ConsoleUnderTest) -> None:
    spec = _spec(console.client)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    asked = [
        ("/", "get", None, {}),
        ("/events", "get", None, {}),
        ("/trace", "get", None, {}),
        ("/trace?id=never", "get", None, {}),
        ("/reconcile", "get", None, {}),
        ("/ledger", "get", None, {}),
        ("/ledger?limit=0", "get", None, {}),
        ("/quarantine", "post", b"id=a&reason=r", form),
        ("/quarantine", "post", b"id=a&reason=r&token=console-token-1", form),
        ("/requeue", "post", b"id=a", {"Content-Type": "text/plain"}),
        ("/requeue-group", "post", b"token=console-token-1", form),
    ]
    answered = []
    for target, method, body, headers in asked:
        status, _, _ = console.client.request(method.upper(), target, body, headers)
        path = target.partition("?")[0]
        assert str(status) in spec["paths"][path][method]["responses"], (target, status)
        answered.append(status)
    assert answered == [200, 200, 400, 404, 404, 200, 400, 403, 404, 415, 400]
    status, _, body = console.client.request("GET", "/samples.json")
    _checker(spec, "/samples.json", "get", status).validate(json.loads(body))


#: Values tried in every field of the ledger's request bodies: each edge of what its checks
#: allow (bounds, integers as floats, nulls, lengths, characters).
_TRIED: list[Any] = [
    None, True, 0, 1, -1, 1.0, 2.5, 255, 256, -256, 86400, 86400.5, 1e300, 2**70,
    "", "a", "x" * 129, "é", "0" * 32, [], {}, {"n": 1},
]  # fmt: skip


def _request_schema(spec: Spec, path: str) -> Draft202012Validator:
    body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator(body)


def test_the_ledger_accepts_exactly_the_bodies_its_document_allows(tmp_path: Path) -> None:
    """Each field of each POST body, set to each of ``_TRIED`` or left out: the document allows
    it if and only if the ledger does not answer 400 (a 404, 409 or 422 judges the state)."""
    with Ledger(tmp_path / "l.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
        spec = _spec(app)
        claim = app.deliver(case_id="c", work_id="w", claim_ttl=30)[2]["claim"]["token"]
        bases = {
            "/deliveries": {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "control"},
            "/deliveries/complete": {"case_id": "c", "work_id": "w"},
            "/deliveries/release": {"case_id": "c", "work_id": "w", "claim": claim},
        }
        disagree = []
        for path, base in bases.items():
            schema = _request_schema(spec, path)
            fields = schema.schema["properties"]
            bodies = [{k: v for k, v in base.items() if k != name} for name in fields]
            bodies += [{**base, name: value} for name in fields for value in _TRIED]
            for body in bodies:
                status = app.call("POST", path, json.dumps(body).encode())[0]
                if (status != 400) != schema.is_valid(body):
                    disagree.append((path, body, status))
    assert disagree == [], "\n".join(map(str, disagree))


@pytest.mark.parametrize("path", ["/deliveries", "/attempts"])
def test_the_ledgers_listings_take_exactly_the_query_their_document_allows(
    tmp_path: Path, path: str
) -> None:
    with Ledger(tmp_path / "l.db") as ledger, InProcess(create_ledger_app(ledger)) as app:
        spec = _spec(app)
        declared = {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"]}
        assert set(declared) == {"case_id", "after", "limit"}
        tried = ["0", "1", "10000", "10001", "-1", "1.0", "x", str(2**63 - 1), str(2**63)]
        for name in ("after", "limit"):
            check = Draft202012Validator(declared[name])
            for text in tried:
                allowed = text.lstrip("-").isdigit() and check.is_valid(int(text))
                status = app.call("GET", f"{path}?{name}={text}")[0]
                assert (status == 200) == allowed, (name, text, status)
