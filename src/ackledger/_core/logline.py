"""One line per event of note, as text for people or JSON for log pipelines.

Long-running commands log through the standard ``logging`` module (so an embedding program can
route the lines itself); ``install`` gives the command line its stderr handler in either form.
Each record carries an ``event`` name (``sent``, ``send-failed``, ``poison`` ...) and a dict of
``fields`` that the JSON form emits as keys and the text form as ``key=value`` pairs.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

FORMATS = ("text", "json")


def _timestamp(created: float) -> str:
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def _parts(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    event = getattr(record, "event", record.name)
    fields = getattr(record, "fields", None)
    return str(event), dict(fields) if isinstance(fields, dict) else {}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event, fields = _parts(record)
        extras = "".join(f" {key}={_text(value)}" for key, value in fields.items())
        return (
            f"{_timestamp(record.created)} {record.levelname:<7} {event}: "
            f"{record.getMessage()}{extras}"
        )


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


def abridged_ids(ids: Iterable[str], keep: int = 16) -> list[str]:
    """The first ``keep`` ids and a "+N more" for the rest: a log field stays one line."""
    listed = list(ids)
    return listed if len(listed) <= keep else [*listed[:keep], f"+{len(listed) - keep} more"]
