"""Fixtures of the HTTP API tests: one fresh PostgreSQL database per test module, migrated with
the Alembic migrations, an app over it, and helpers that store realistic rows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session

from bench.api_rows import make_settings
from monitor.api import create_app
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import Base
from tests.support.databases import postgres_database


@pytest.fixture(scope="module")
def database_url(postgres_admin: Engine) -> Iterator[str]:
    """A fresh PostgreSQL database for the module, migrated to head, dropped afterwards."""
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="module")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session on the module's database, whose tables were emptied before the test."""
    with engine.begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(delete(table))
    with session_factory(engine)() as session:
        yield session


@pytest.fixture(scope="module")
def app(database_url: str) -> FastAPI:
    return create_app(make_settings(database_url))


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client
