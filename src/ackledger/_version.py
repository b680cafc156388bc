"""``ackledger.__version__``: the installed distribution's version, read from its metadata so
that pyproject.toml stays the one place it is written."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: What a copy of the sources that was never installed (on ``sys.path`` by hand) reports.
UNKNOWN = "0+unknown"

try:
    __version__ = version("ackledger")
except PackageNotFoundError:
    __version__ = UNKNOWN
