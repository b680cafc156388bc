"""The PostgreSQL dialect: backend.py (the pool, its transactions), tx.py (the operations its
SQL differs in), queries.py (that SQL). psycopg is imported only when a backend connects."""

from .backend import PostgresBackend, open_postgres, redact
from .tx import PostgresTx, to_pyformat

__all__ = ["PostgresBackend", "PostgresTx", "open_postgres", "redact", "to_pyformat"]
