"""Handlers for tests/test_verify.py, loaded by the sink that ``verify`` starts."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import psycopg

from ackledger.warehouse import INVENTORY_ADD

from . import pg


def _apply_outside_the_inbox(tx: Any, event: dict[str, Any]) -> None:
    """Wrong on purpose: the effect is committed on a connection of its own, before the
    inbox's transaction (and its receipt) commits; then it dawdles, so a sink killed now
    has applied the event without a receipt, and the re-send applies it again."""
    database = tx.execute("SELECT current_database()")[0][0]
    with psycopg.connect(pg.url_for(database), autocommit=True) as conn:
        conn.execute(INVENTORY_ADD.replace("?", "%s"), (event["data"]["sku"], event["data"]["qty"]))
    time.sleep(0.3)


BROKEN = {"warehouse.stock.added": _apply_outside_the_inbox}


async def _add_stock_async(tx: Any, event: dict[str, Any]) -> None:
    """Right, and async: the sink awaits it inside the receipt's transaction."""
    tx.execute(INVENTORY_ADD, (event["data"]["sku"], event["data"]["qty"]))


def _ship(tx: Any, event: dict[str, Any]) -> None:
    """A handler of another type: loaded and checked, never exercised by verify."""


ASYNC = {"warehouse.stock.added": _add_stock_async, "com.example.order.placed": _ship}


@functools.cache
def _sessions() -> Any:
    """Made on first use: only the tests of ``verify --session`` set ``SHOP_DB``."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    url = os.environ["SHOP_DB"].replace("postgresql://", "postgresql+psycopg://", 1)
    return sessionmaker(create_engine(url))


def session() -> Any:
    """``verify --session tests.verify_handlers:session``: a SQLAlchemy Session on SHOP_DB."""
    return _sessions()()


def _add_stock_in_the_session(session: Any, event: dict[str, Any]) -> None:
    """Right, through the user's session: it commits with the receipt."""
    from sqlalchemy import text

    session.execute(text(INVENTORY_ADD.replace("?, ?", ":sku, :qty")), event["data"])


SESSION = {"warehouse.stock.added": _add_stock_in_the_session}
