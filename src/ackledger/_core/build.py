"""Which release of ackledger this is, as the installed distribution says."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version


@cache
def version() -> str:
    """The installed version (``0.1.0``), or ``unknown`` when run from a tree that was never
    installed (the build-info metric still says so, rather than failing)."""
    try:
        return _distribution_version("ackledger")
    except PackageNotFoundError:
        return "unknown"
