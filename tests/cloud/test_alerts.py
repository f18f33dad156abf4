"""The webhook: one POST per window with candidates, against a local http.server on 127.0.0.1;
a slow, failing or absent endpoint never holds up the caller."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dpsense.cloud.ops.alerts import Alerts, check_webhook
from dpsense.cloud.storage import Verdict, WindowRecord

WINDOW = WindowRecord(3, "hall-a", 1, "time", 1000.0, 1005.0, 1005.0, 250, "done", 1, 9, None, 5, 1, 1, 5, 0,
                      0.01, 0.1, 1005.8)
CANDS = [Verdict(3, "hall-a", 40, 7, 2, 118, 1001.5, True, False, False, True),
         Verdict(3, "hall-a", 41, 8, 2, 120, 1001.6, False, False, True, True)]


class Endpoint:
    def __init__(self, status: int = 200, delay: float = 0.0) -> None:
        self.bodies: list[tuple[str, dict]] = []
        self.got = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                time.sleep(delay)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append((self.headers["Content-Type"], json.loads(body)))
                self.send_response(status)
                self.end_headers()
                outer.got.set()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


def test_a_window_with_candidates_is_posted_once(endpoint: Endpoint) -> None:
    logs: list[str] = []
    published: list[tuple[str, bytes]] = []
    a = Alerts(lambda t, b: published.append((t, b)), endpoint.url, log=logs.append)
    a.window_done(WINDOW, CANDS)
    a.window_done(WINDOW, [])                    # nothing new: nothing sent
    assert endpoint.got.wait(5)
    a.close()
    ((ctype, doc),) = endpoint.bodies
    assert ctype == "application/json"
    assert (doc["window"], doc["group"], doc["readings"]) == (3, "hall-a", 250)
    assert doc["start"] == "1970-01-01T00:16:40.000Z"
    assert [(c["device"], c["boot"], c["seq"], c["verdict"]) for c in doc["candidates"]] == \
        [(7, 2, 118, "candidate"), (8, 2, 120, "added_fn")]
    assert [(t, json.loads(b)) for t, b in published] == [("dpsense/alerts/hall-a", doc)]
    assert logs == [] and (a.posted, a.failed) == (1, 0)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", ["http 500", "no server", "slow"])
def test_a_failing_endpoint_is_logged_and_never_blocks(kind: str) -> None:
    e = Endpoint(status=500) if kind == "http 500" else Endpoint(delay=3.0) if kind == "slow" else None
    url = e.url if e is not None else "http://127.0.0.1:%d/hook" % _dead_port()
    logs: list[str] = []
    a = Alerts(None, url, log=logs.append, timeout=1.0)
    t0 = time.monotonic()
    for _ in range(3):
        a.window_done(WINDOW, CANDS)
    assert time.monotonic() - t0 < 0.2          # the caller never waits for the endpoint
    deadline = time.monotonic() + 10
    while len(logs) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    a.close(timeout=1.0)
    if e is not None:
        e.close()
    assert len(logs) == 3 and all("window 3 not delivered" in line for line in logs), logs
    assert a.failed == 3


def test_a_publish_error_is_logged() -> None:
    logs: list[str] = []

    def broken(topic: str, body: bytes) -> None:
        raise OSError("broker gone")

    Alerts(broken, None, log=logs.append).window_done(WINDOW, CANDS)
    assert logs == ["analyst: alert for window 3 not published: broker gone"]


@pytest.mark.parametrize("url", ["ftp://x/y", "http://", "127.0.0.1:8080", "file:///etc/passwd"])
def test_webhook_urls_are_http(url: str) -> None:
    with pytest.raises(ValueError):
        check_webhook(url)


def test_an_alert_over_the_broker_packet_limit_is_split_into_parts() -> None:
    from dpsense.cloud.ops.alerts import ALERT_LIMIT, alert_document, mqtt_parts
    many = [Verdict(3, "hall-a", 40 + i, 7, 2, i, 1001.5, True, False, False, True) for i in range(2000)]
    body = json.dumps(alert_document(WINDOW, many), separators=(",", ":")).encode()
    assert len(body) > ALERT_LIMIT
    parts = [json.loads(p) for p in mqtt_parts(WINDOW, many, body)]
    assert all(len(p) <= ALERT_LIMIT for p in mqtt_parts(WINDOW, many, body))
    assert [p["part"] for p in parts] == list(range(1, len(parts) + 1)) and {p["parts"] for p in parts} == {len(parts)}
    assert [c["seq"] for p in parts for c in p["candidates"]] == list(range(2000))
    assert all(p["window"] == 3 for p in parts)
    small = json.dumps(alert_document(WINDOW, CANDS), separators=(",", ":")).encode()
    assert mqtt_parts(WINDOW, CANDS, small) == [small]
