"""Canonical JSON of any value and its fingerprint: one text for events, ledger requests and
v1's events alike."""

from __future__ import annotations

import hashlib
import json


def canonical_json(obj: object) -> str:
    """JSON with sorted keys, no whitespace and numbers as ``json.dumps`` writes them: equal
    content, equal text.

    Non-ASCII text is written as itself (``ensure_ascii=False``), not as ``\\u`` escapes: the
    text is smaller, a size limit counts the bytes a reader really gets, and it is the choice
    v1's canonical JSON made. NaN and infinities raise ValueError: they are not JSON.
    """
    return _ENCODER.encode(obj)


# One encoder for every call: json.dumps with these options builds a new one each time.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def fingerprint(obj: object) -> str:
    """A SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
