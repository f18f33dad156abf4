"""Fixtures shared across the suites: a throw-away PostgreSQL server (tests/pgserver.py) for the
storage tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: runs against a throw-away PostgreSQL server (Debian package postgresql)")
    # pytest-xdist registers it too; here so that a run without xdist keeps --strict-markers.
    config.addinivalue_line(
        "markers", "xdist_group(name): tests of one group run on one pytest -n worker, one after another")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a private PostgreSQL server for this test session; skips when it is not installed."""
    from tests.pgserver import PostgresNotFound, find_bindir, temporary_postgres

    try:
        find_bindir()
    except PostgresNotFound as err:
        pytest.skip(str(err))
    # fsync off: the server never outlives the session, and no test here measures a power cut.
    with temporary_postgres(fsync=False) as url:
        yield url
