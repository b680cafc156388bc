"""OpenTelemetry, only where the process already has it (CONTRACT v2 §10 "Trace context").

Nothing here imports OpenTelemetry on its own. A span can only be active if the application
imported ``opentelemetry.trace`` itself, so the hot paths ask ``sys.modules`` (one dict
lookup) and do nothing when it is absent. The services, the relay and the consumers import and
configure the SDK only when ``OTEL_TRACES_EXPORTER`` asks for an exporter (``configure``).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

_API = "opentelemetry.trace"
#: The instrumentation scope our spans are reported under.
SCOPE = "ackledger"


def _api() -> Any | None:
    return sys.modules.get(_API)


def current_context() -> dict[str, str]:
    """The active span's W3C ``traceparent`` (and ``tracestate``), or ``{}`` when there is
    no OpenTelemetry in the process or no valid span is active."""
    trace = _api()
    if trace is None:
        return {}
    span = trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    found = {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-"
        f"{int(context.trace_flags):02x}"
    }
    state = context.trace_state.to_header() if context.trace_state else ""
    if state:
        found["tracestate"] = state
    return found


def with_trace_context(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """``event`` with the active trace context added, unless it names a ``traceparent`` of
    its own (which is kept as given and wins)."""
    if "traceparent" in event or _api() is None:
        return event
    found = current_context()
    return {**event, **found} if found else event


_NOTHING = nullcontext()


def tracing() -> bool:
    """Whether a span can be made (OpenTelemetry's API is imported): a per-event path asks
    this before it builds what only a span would use."""
    return _API in sys.modules


def span(
    name: str,
    event: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
) -> AbstractContextManager[None]:
    """A span named ``name`` while the block runs: a child of ``event``'s ``traceparent``
    when one is given (the producer's context travels in the event), else of the current
    span; ``kind`` is ``internal``, ``producer`` or ``consumer``. Without OpenTelemetry in
    the process, one shared do-nothing context (this sits on the per-event paths)."""
    trace = _api()
    if trace is None:
        return _NOTHING
    return _span(trace, name, event, kind, attributes)


@contextmanager
def _span(
    trace: Any,
    name: str,
    event: Mapping[str, Any] | None,
    kind: str,
    attributes: Mapping[str, Any] | None,
) -> Iterator[None]:
    parent = None
    if event is not None and isinstance(event.get("traceparent"), str):
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier = {"traceparent": event["traceparent"]}
        if isinstance(event.get("tracestate"), str):
            carrier["tracestate"] = event["tracestate"]
        parent = TraceContextTextMapPropagator().extract(carrier)
    given = dict(attributes or {})
    if event is not None:
        given.update(
            {
                "messaging.message.id": str(event.get("id")),
                "cloudevents.event_id": str(event.get("id")),
                "cloudevents.event_source": str(event.get("source")),
                "cloudevents.event_type": str(event.get("type")),
            }
        )
    tracer = trace.get_tracer(SCOPE)
    span_kind = getattr(trace.SpanKind, kind.upper())
    with tracer.start_as_current_span(name, context=parent, kind=span_kind, attributes=given):
        yield


class TelemetryUnavailable(ValueError):
    """``OTEL_TRACES_EXPORTER`` names an exporter that is unknown or not installed (a
    configuration error: the command line reports it as bad input)."""


def configure(service: str) -> bool:
    """Set up the SDK from the standard ``OTEL_*`` variables when ``OTEL_TRACES_EXPORTER``
    names exporters (``console``, ``otlp``; ``none`` or unset: nothing, nothing imported).
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` are read by the SDK itself;
    ``service`` is the name used when neither gives one. True if tracing was configured."""
    wanted = [
        name.strip()
        for name in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")
        if name.strip() and name.strip() != "none"
    ]
    if not wanted:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as exc:
        raise TelemetryUnavailable(
            "OTEL_TRACES_EXPORTER is set but OpenTelemetry is not installed: "
            "pip install 'ackledger[otel]'"
        ) from exc
    resource = Resource.create({"service.name": service} | _resource_from_env())
    provider = TracerProvider(resource=resource)
    for name in wanted:
        if name == "console":
            # One JSON line per span on stderr, beside the service's own log lines.
            exporter = ConsoleSpanExporter(
                out=sys.stderr, formatter=lambda s: s.to_json(indent=None) + os.linesep
            )
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
        else:
            raise TelemetryUnavailable(
                f"OTEL_TRACES_EXPORTER: {name!r} is not one of console, otlp, none"
            )
    trace.set_tracer_provider(provider)
    return True


def _resource_from_env() -> dict[str, str]:
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over what it is
    # given only for attributes it is not given; let the environment's service name win.
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip()
    return {"service.name": name} if name else {}


def _otlp_exporter() -> Any:
    # Either OTLP exporter package will do; neither is an ackledger dependency.
    for module in ("http", "grpc"):
        try:
            found = importlib.import_module(
                f"opentelemetry.exporter.otlp.proto.{module}.trace_exporter"
            )
        except ImportError:
            continue
        return found.OTLPSpanExporter()
    raise TelemetryUnavailable(
        "OTEL_TRACES_EXPORTER=otlp needs an OTLP exporter: "
        "pip install opentelemetry-exporter-otlp-proto-http"
    )


def shutdown() -> None:
    """Flush what the SDK holds (a service calls it before it exits)."""
    trace = _api()
    if trace is None:
        return
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if callable(flush):
        flush()


class RoundSpan:
    """A span over one relay round that had something to send. It starts at the round's
    start but is only made at its first send, so an idle poll (twice a second by default)
    leaves no span; the send spans stay children of their producers' spans, not of this."""

    __slots__ = ("_span", "_started")

    def __init__(self) -> None:
        self._span: Any = None
        self._started = 0

    def new_round(self) -> bool:
        """A round starts; True if tracing is on (else ``sending`` would do nothing)."""
        self._started = time.time_ns() if _api() is not None else 0
        return self._started != 0

    def sending(self, partition: str | None) -> None:
        """The round sends something: make its span now (once), if tracing is on."""
        trace = _api()
        if self._span is not None or trace is None or not self._started:
            return
        attributes = {} if partition is None else {"ackledger.partition": partition}
        self._span = trace.get_tracer(SCOPE).start_span(
            "relay round", start_time=self._started, attributes=attributes
        )

    def end(self, acknowledged: int, error: BaseException | None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attribute("ackledger.acknowledged", acknowledged)
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
        span.end()
