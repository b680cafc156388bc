"""What the run was measured on: cores, CPU, kernel, Python, SQLite, PostgreSQL, libraries."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
import sys
from importlib import metadata

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
LIBRARIES = ("starlette", "uvicorn", "httptools", "uvloop", "prometheus-client")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def postgres_version() -> str:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return f"{row[0]} (server on 127.0.0.1:5432)" if row else "unknown"
    except Exception as exc:
        client = shutil.which("psql")
        if client:
            found = subprocess.run(
                [client, "--version"], capture_output=True, text=True, check=False
            )
            return f"server not reachable ({type(exc).__name__}); client {found.stdout.strip()}"
        return f"not reachable ({type(exc).__name__})"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def load_line() -> str:
    """The load average over 1, 5 and 15 minutes, as the run lines show it."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def describe() -> dict[str, str]:
    return {
        "cores": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "sqlite": sqlite3.sqlite_version,
        "postgresql": postgres_version(),
        "libraries": ", ".join(f"{name} {_version(name)}" for name in LIBRARIES),
        "load_before": load_line(),
    }
