"""Which release of ackledger this is: ``ackledger.__version__`` (``_version``), as a call for
the build-info metric and the docs page."""

from __future__ import annotations

from .._version import __version__


def version() -> str:
    """The installed version (``0.1.0``), or ``0+unknown`` when run from a tree that was never
    installed (the build-info metric still says so, rather than failing)."""
    return __version__
