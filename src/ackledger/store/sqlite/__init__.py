"""The SQLite dialect: backend.py (the connection, its transactions), tx.py (the operations
its SQL differs in), queries.py (that SQL)."""

from .backend import PAGE_SIZE, SqliteBackend, foreign_file
from .tx import SqliteTx

__all__ = ["PAGE_SIZE", "SqliteBackend", "SqliteTx", "foreign_file"]
