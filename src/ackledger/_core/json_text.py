"""JSON text parsed without ``json.loads``'s Python layers, where the text is exactly one value.

``json.loads`` detects a byte string's encoding, decodes it, and skips white space on both
sides with two regular-expression matches around the C scanner that does the parse: for a
lab event's 170 characters that is half of the parse (~1 µs of ~2), paid per event by the
relay's selection and per batch by its answer check. Text that is exactly one value with no
white space around it (the outbox's canonical JSON, a sink's compact answer) goes to that
scanner directly; anything else goes to ``json.loads``, which parses it or raises as it would.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any

#: The decoder's own scanner (C where ``_json`` is), as ``json.loads`` uses it.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``: the same value, or the same error."""
    try:
        string = text if type(text) is str else text.decode("utf-8")  # type: ignore[union-attr]
        value, end = _scan(string, 0)
    except (StopIteration, ValueError):  # not at the start, or invalid UTF-8 or JSON
        return json.loads(text)
    if end != len(string):  # white space or more after the value: the full rules decide
        return json.loads(text)
    return value
