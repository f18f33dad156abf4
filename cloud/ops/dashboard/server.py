"""The dashboard's HTTP server: one page, five JSON endpoints and ``/metrics``; GET only.

    server = DashboardServer(("127.0.0.1", 8765), source, store_label="sqlite:///dpsense-data/analyst.db")
    server.serve_forever()

    GET /                                   the page (polls the endpoints below)
    GET /api/summary                        {"now": t, "summary": {...}}
    GET /api/windows?limit=N                {"now": t, "windows": [...]}, most recent first
    GET /api/devices                        {"now": t, "devices": [...]}, epsilons as numbers
    GET /api/events?limit=N                 {"now": t, "events": [...]}, newest first
    GET /api/candidates?window=N[&group=G]  {"now": t, ...WindowCandidates}
    GET /api/aggregates?column=C[&window=S&span=S]
                                            {"now": t, "aggregates": {...} or null}: each group's
                                            mean of column C per window, with its interval
    GET /api/histogram?group=G&column=C[&window=S&span=S]
                                            {"now": t, "histogram": {...} or null}: the group's
                                            latest window, released counts and estimates per bin
    GET /metrics                            Prometheus text format

Any other method is answered 405. Bound to a loopback address, the server also refuses
requests whose Host header names another host, so a web page elsewhere cannot read it
through a DNS name that resolves to 127.0.0.1 (DNS rebinding).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import socket
import sys
import threading
import time
from fractions import Fraction
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dpsense.cloud.storage.repository import StorageError

from . import page
from .data import AGGREGATE_SPAN_S, AGGREGATE_WINDOW_S, RATE_WINDOW_S, DashboardSource
from .metrics import metrics_registry

MAX_WINDOWS = 500
MAX_EVENTS = 100
_STORE_PATHS = ("/metrics", "/api/summary", "/api/windows", "/api/devices", "/api/events", "/api/candidates",
                "/api/aggregates", "/api/histogram")
MAX_SPAN_S = 31 * 24 * 3600
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


class DashboardServer(ThreadingHTTPServer):
    """Serves ``source`` read-only; ``store_label`` is the storage location the page names."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], source: DashboardSource, *, store_label: str,
                 refresh_s: float = 2.0) -> None:
        host, port = address
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        self.address_family = infos[0][0]
        self.source = source
        self.loopback = is_loopback(host)
        self.page = page.render(store_label, refresh_s, RATE_WINDOW_S).encode("utf-8")
        self.csp = page.content_security_policy()
        self.registry = metrics_registry(source)
        self._store_error: str | None = None
        self._error_lock = threading.Lock()
        super().__init__((str(infos[0][4][0]), port), _Handler)

    def note_store_error(self, message: str | None) -> None:
        """Log when the store becomes unreadable, with why, and when it is readable again."""
        with self._error_lock:
            if message != self._store_error:
                if message is not None:
                    sys.stderr.write("dashboard: cannot read the store: %s\n" % message)
                elif self._store_error is not None:
                    sys.stderr.write("dashboard: the store can be read now\n")
                sys.stderr.flush()
                self._store_error = message

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        return "http://%s:%d/" % ("[%s]" % host if ":" in host else host, port)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "dpsense-dashboard"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        if self.server.loopback and not self._host_is_loopback():
            self._error(HTTPStatus.MISDIRECTED_REQUEST, "this dashboard answers only to a loopback host name")
            return
        url = urlsplit(self.path)
        try:
            query = parse_qs(url.query, strict_parsing=bool(url.query), max_num_fields=10)
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "malformed query string")
            return
        try:
            if url.path == "/":
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", self.server.page)
            elif url.path == "/favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, "image/x-icon", b"")     # browsers ask; there is none
            elif url.path == "/metrics":
                self._send(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
            elif url.path == "/api/summary":
                self._json({"summary": self.server.source.summary()})
            elif url.path == "/api/windows":
                limit = _whole(query, "limit", 20)
                if limit is None or limit > MAX_WINDOWS:
                    self._error(HTTPStatus.BAD_REQUEST, "limit must be a whole number up to %d" % MAX_WINDOWS)
                    return
                self._json({"windows": self.server.source.windows(limit)})
            elif url.path == "/api/devices":
                self._json({"devices": self.server.source.devices()})
            elif url.path == "/api/events":
                limit = _whole(query, "limit", 10)
                if limit is None or limit > MAX_EVENTS:
                    self._error(HTTPStatus.BAD_REQUEST, "limit must be a whole number up to %d" % MAX_EVENTS)
                    return
                self._json({"events": self.server.source.events(limit)})
            elif url.path == "/api/candidates":
                window = _whole(query, "window", None)
                if window is None:
                    self._error(HTTPStatus.BAD_REQUEST, "give ?window=N, N a whole number")
                    return
                groups = query.get("group")
                found = self.server.source.candidates(window, groups[0] if groups else None)
                if found is None:
                    self._error(HTTPStatus.NOT_FOUND, "no done window %d%s"
                                % (window, " in group %s" % groups[0] if groups else ""))
                    return
                self._json(_plain(found))
            elif url.path == "/api/aggregates":
                column = _whole(query, "column", 0)
                window = _whole(query, "window", AGGREGATE_WINDOW_S)
                span = _whole(query, "span", AGGREGATE_SPAN_S)
                if column is None or window is None or span is None or not 1 <= window <= span <= MAX_SPAN_S:
                    self._error(HTTPStatus.BAD_REQUEST, "give whole numbers: column, window (s) and span (s), "
                                "1 <= window <= span <= %d" % MAX_SPAN_S)
                    return
                bands = self.server.source.aggregates(column, float(window), float(span))
                self._json({"aggregates": None if bands is None else _plain(bands)})
            elif url.path == "/api/histogram":
                column = _whole(query, "column", 0)
                window = _whole(query, "window", AGGREGATE_WINDOW_S)
                span = _whole(query, "span", AGGREGATE_SPAN_S)
                groups = query.get("group")
                if (not groups or column is None or window is None or span is None
                        or not 1 <= window <= span <= MAX_SPAN_S):
                    self._error(HTTPStatus.BAD_REQUEST, "give group=G, and whole numbers: column, window (s) and "
                                "span (s), 1 <= window <= span <= %d" % MAX_SPAN_S)
                    return
                hist = self.server.source.histogram(groups[0], column, float(window), float(span))
                self._json({"histogram": None if hist is None else _plain(hist)})
            else:
                self._error(HTTPStatus.NOT_FOUND, "no such page: %s" % url.path)
        except StorageError as e:
            self.server.note_store_error(str(e))
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(e))
            return
        except (ValueError, KeyError, TypeError) as e:
            # A stored result this reader does not understand: say so, keep serving.
            sys.stderr.write("dashboard: %s: %s: %s\n" % (url.path, type(e).__name__, e))
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "cannot read the store's results: %s" % e)
            return
        if url.path in _STORE_PATHS:
            self.server.note_store_error(None)

    def _refuse(self) -> None:
        self.close_connection = True
        body = b"read-only: only GET\n"
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _refuse  # noqa: N815

    def _host_is_loopback(self) -> bool:
        host = self.headers.get("Host")
        if host is None:
            return True             # HTTP/1.0 clients; browsers always send Host
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.strip("[]").lower() in _LOOPBACK_NAMES

    def _json(self, body: dict[str, Any]) -> None:
        data = {"now": time.time(), **{k: _plain(v) for k, v in body.items()}}
        self._send(HTTPStatus.OK, "application/json", json.dumps(data, allow_nan=False).encode("utf-8"))

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, "application/json", json.dumps({"error": message}).encode("utf-8"))

    def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", self.server.csp)
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # A page polling every few seconds would fill the journal: only failed requests are
        # logged, and an unreadable store once per change (note_store_error).
        if isinstance(code, int) and code >= 400 and code != HTTPStatus.SERVICE_UNAVAILABLE:
            super().log_request(code, size)


def _whole(query: dict[str, list[str]], name: str, default: int | None) -> int | None:
    """The query parameter ``name`` as an int >= 0; ``default`` when absent; None when malformed."""
    values = query.get(name)
    if not values:
        return default
    text = values[0]
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None


def _plain(v: Any) -> Any:
    """Dataclasses as dicts; an exact epsilon (``Fraction``) as the nearest float, for the page."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, Fraction):
        return float(v)
    return v
