"""Exact types for the numbers callers hand the library.

A subclass of ``int`` or ``float`` can define its own comparisons, so a range check on it
proves nothing about the number SQL is given (an ``int`` whose ``<=`` always says yes passed
``1 <= qty <= MAX`` with -5). Only the built-in types themselves are numbers here, and
``bool``, an ``int`` to Python, is never one.
"""

from __future__ import annotations

from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


def is_number(value: object) -> TypeGuard[int | float]:
    kind = type(value)
    return kind is int or kind is float
