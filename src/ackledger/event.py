"""The names v1 published here, importable as before from where each rule now lives: the
identifier rule and strict JSON in ``_core``, canonical JSON and its fingerprint in
``_core.canonical``, the lab's flat order in ``warehouse.v1``. Nothing inside ackledger
imports this module."""

from __future__ import annotations

from ._core.canonical import canonical_json, fingerprint
from ._core.identifier import check_identifier
from ._core.strict_json import parse_strict_json
from .warehouse.v1 import (
    EVENT_KEYS,
    MAX_QTY,
    check_keys,
    check_quantity,
    event_fingerprint,
    event_json,
    validate_event,
)

__all__ = [
    "EVENT_KEYS",
    "MAX_QTY",
    "canonical_json",
    "check_identifier",
    "check_keys",
    "check_quantity",
    "event_fingerprint",
    "event_json",
    "fingerprint",
    "parse_strict_json",
    "validate_event",
]
