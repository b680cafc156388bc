"""JSON from outside, read strictly: one unambiguous value, no key given twice."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return found


#: Parses JSON text refusing an object with a key given twice: json.loads keeps the last one,
#: and another parser might keep the first, so such a body could mean two different events.
_STRICT_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys)


def parse_strict_json(text: str) -> Any:
    """``json.loads`` for input from outside; raises ValueError (RecursionError when nested
    past the parser's stack) for anything that is not one unambiguous JSON value."""
    # ``decode`` is two Python frames and two whitespace matches around the C scanner: a
    # text that starts with its value and ends with it (what every sender here writes) is
    # scanned directly; anything else takes ``decode``, which also words any error.
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _STRICT_JSON.decode(text)
    if end != len(text):
        return _STRICT_JSON.decode(text)
    return value


#: The decoder's C scanner (set by ``JSONDecoder.__init__``; typeshed does not declare it).
_SCAN: Callable[[str, int], tuple[Any, int]] = _STRICT_JSON.scan_once  # type: ignore[attr-defined]
