"""Canonical JSON of any value and its fingerprint: the ledger's requests, v1's events."""

from __future__ import annotations

import hashlib
import json


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and no whitespace: equal content, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(obj: object) -> str:
    """A SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
