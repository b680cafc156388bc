"""The user's own code the user's-code sections run: a SQLAlchemy model, session factories on
the database named by ``BENCH_SHOP_DB`` (sync on psycopg, async on asyncpg) and a handler that
saves the model. ``consume --session bench.usershop:Session`` imports it in its own process."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import String, create_engine
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

TYPE = "com.example.shipment.requested"
#: ``done_at`` is the database's clock at the insert: rates are read from these marks.
SHIPMENTS = (
    "CREATE TABLE shipments (id VARCHAR(64) PRIMARY KEY, sku VARCHAR(64) NOT NULL, "
    "done_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
)
ORDERS = "CREATE TABLE shop_orders (id VARCHAR(64) PRIMARY KEY, total INTEGER NOT NULL)"


class Base(DeclarativeBase):
    pass


class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sku: Mapped[str] = mapped_column(String(64))


class Order(Base):
    __tablename__ = "shop_orders"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    total: Mapped[int]


def driver_url(url: str, driver: str) -> str:
    return url.replace("postgresql://", f"postgresql+{driver}://", 1)


def ship(session: Any, event: dict[str, Any]) -> None:
    session.add(Shipment(id=event["id"], sku=event["data"]["sku"]))


HANDLERS = {TYPE: ship}

_url = os.environ.get("BENCH_SHOP_DB")
#: The zero-argument factory ``--session`` takes (None where no database is named).
Session = sessionmaker(create_engine(driver_url(_url, "psycopg"))) if _url else None


def async_sessions(url: str) -> Any:
    """An ``async_sessionmaker`` on asyncpg, and its engine to dispose of."""
    engine = create_async_engine(driver_url(url, "asyncpg"))
    return async_sessionmaker(engine, expire_on_commit=False), engine
