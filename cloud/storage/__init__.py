"""Storage: the analyst's and the correction server's stores, SQLite by default, PostgreSQL to scale out.
May import: no other role.

    analyst = open_analyst_store("sqlite:///var/dpsense/analyst.db")        # relative path
    cs = open_correction_store("postgresql://cs@db.example:5432/corrections")

SQLite URLs follow SQLAlchemy's convention: ``sqlite:///relative/file.db``,
``sqlite:////absolute/file.db``, and ``sqlite://`` for a private in-memory database. A string
without a scheme is taken as the path of an SQLite file. The analyst and the correction server
must be given different databases; a store refuses to open a database of the other kind.
"""
from __future__ import annotations

from typing import Literal, overload
from urllib.parse import unquote, urlsplit

from .repository import (
    CONFLICTING_DUPLICATE,
    AnalystStore,
    Correction,
    CorrectionStore,
    DeadLetter,
    Gap,
    Reading,
    StorageError,
    StorageUnavailable,
    Window,
)
from .records import DeviceStatus, Event, Verdict, WindowRecord
from .stream import DEFAULT_GROUP

__all__ = [
    "CONFLICTING_DUPLICATE", "DEFAULT_GROUP", "AnalystStore", "Correction", "CorrectionStore", "DeadLetter",
    "DeviceStatus", "Event", "Gap", "Reading", "StorageError", "StorageUnavailable", "Verdict", "Window",
    "WindowRecord", "open_analyst_store", "open_correction_store", "open_store",
]

Role = Literal["analyst", "correction"]


def open_analyst_store(url: str) -> AnalystStore:
    """Open (creating if needed) the analyst's store at ``url``."""
    scheme, target = _parse(url)
    if scheme == "sqlite":
        from .sqlite import SqliteAnalystStore
        return SqliteAnalystStore(target)
    from .postgres import PostgresAnalystStore
    return PostgresAnalystStore(target)


def open_correction_store(url: str) -> CorrectionStore:
    """Open (creating if needed) the correction server's store at ``url``."""
    scheme, target = _parse(url)
    if scheme == "sqlite":
        from .sqlite import SqliteCorrectionStore
        return SqliteCorrectionStore(target)
    from .postgres import PostgresCorrectionStore
    return PostgresCorrectionStore(target)


@overload
def open_store(url: str, role: Literal["analyst"]) -> AnalystStore: ...
@overload
def open_store(url: str, role: Literal["correction"]) -> CorrectionStore: ...


def open_store(url: str, role: Role) -> AnalystStore | CorrectionStore:
    """Open the store of ``role`` ("analyst" or "correction") at ``url``."""
    if role == "analyst":
        return open_analyst_store(url)
    if role == "correction":
        return open_correction_store(url)
    raise ValueError("role must be 'analyst' or 'correction', got %r" % (role,))


def sqlite_file(url: str) -> str | None:
    """The file of an SQLite URL (None for PostgreSQL or an in-memory database)."""
    scheme, target = _parse(url)
    return target if scheme == "sqlite" and target != ":memory:" else None


def _parse(url: str) -> tuple[str, str]:
    """``("sqlite", path)`` or ``("postgresql", url)``."""
    if not isinstance(url, str) or not url:
        raise ValueError("a storage URL is required, e.g. sqlite:///dpsense.db")
    if "://" not in url:
        return "sqlite", url
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        path = unquote(url[len("sqlite://"):])
        if path == "":
            return "sqlite", ":memory:"
        if not path.startswith("/") or path == "/":
            raise ValueError("an SQLite URL is sqlite:///relative/path or sqlite:////absolute/path, got %r"
                             % url)
        return "sqlite", path[1:]
    if scheme in ("postgresql", "postgres"):
        return "postgresql", url
    raise ValueError("unsupported storage URL scheme %r (use sqlite:// or postgresql://)" % scheme)
