"""One line per event of note, as text for people or JSON for log pipelines.

Long-running commands log through the standard ``logging`` module (so an embedding program can
route the lines itself); ``install`` gives the command line its stderr handler in either form.
Each record carries an ``event`` name (``sent``, ``send-failed``, ``poison`` ...) and a dict of
``fields`` that the JSON form emits as keys and the text form as ``key=value`` pairs.

A record logged with an exception (``logger.exception``, ``exc_info=``: uvicorn's "Exception in
ASGI application") keeps it: the exception's type and message as ``error``, and its traceback,
which the text form prints below the line and the JSON form keeps in ``traceback``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")


def _timestamp(created: float) -> str:
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def _parts(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    event = getattr(record, "event", record.name)
    fields = getattr(record, "fields", None)
    return str(event), dict(fields) if isinstance(fields, dict) else {}


def _error(record: logging.LogRecord) -> str | None:
    """``Type: message`` of the exception the record carries, or None."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None:
        return None
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    """The record's traceback (and stack, if asked for) as ``logging`` formats them."""
    parts = []
    if record.exc_info and record.exc_info[1] is not None:
        parts.append(formatter.formatException(record.exc_info))
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return "\n".join(parts) or None


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event, fields = _parts(record)
        error = _error(record)
        if error is not None:
            fields["error"] = error
        extras = "".join(f" {key}={_text(value)}" for key, value in fields.items())
        line = (
            f"{_timestamp(record.created)} {record.levelname:<7} {event}: "
            f"{record.getMessage()}{extras}"
        )
        trace = _traceback(self, record)
        return line if trace is None else f"{line}\n{trace}"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event, fields = _parts(record)
        line = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": event,
            "message": record.getMessage(),
            **fields,
        }
        error = _error(record)
        if error is not None:
            line["error"] = error
        trace = _traceback(self, record)
        if trace is not None:
            line["traceback"] = trace
        return json.dumps(line, default=str, separators=(",", ":"))


def _text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value) or "-"
    text = str(value)
    return json.dumps(text) if (not text or any(ch.isspace() for ch in text)) else text


def install(logger: logging.Logger, fmt: str, stream: TextIO | None = None) -> None:
    """Send ``logger``'s lines (info and up) to ``stream`` (stderr) in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def log_event(logger: logging.Logger, level: int, event: str, message: str, **fields: Any) -> None:
    """Log one named event (``sent``, ``poison`` ...) with its fields."""
    logger.log(level, message, extra={"event": event, "fields": fields})
