"""Alerts: a done window's candidates on ``dpsense/alerts/<group>`` and, optionally, to a webhook.

    alerts = Alerts(publish=lambda topic, body: client.publish(topic, body, qos=1),
                    webhook="http://127.0.0.1:8080/dpsense", log=print)
    alerts.window_done(window_record, candidate_verdicts)    # never blocks, never raises
    alerts.close()

One JSON document per window with at least one candidate (on MQTT, a window with more
candidates than fit under the broker's packet limit goes out as several documents with
``part`` and ``parts``): the window (id, group, interval,
readings), each candidate's identity (device, boot, seq, arrival, verdict) and, when the
analyst has a profile, the window's mean per column with its 95% interval, estimated from the
released readings (no privacy budget spent). No reading's value, noise or distance difference:
an operator looks a reading up by its identity. The topic is readable by
accounts of role ``alerts`` only (cloud/deploy/broker.py). The webhook gets the same document as a POST
from a thread of its own with a timeout; a failure is logged and the document dropped, so a slow
or dead endpoint never holds up detection.
"""
from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from dpsense.cloud.transport import topics
from dpsense.cloud.ops.results import iso_time
from dpsense.cloud.storage import Verdict, WindowRecord

#: Largest alert payload on MQTT: half the broker's packet limit (cloud/correction/chunks.py).
ALERT_LIMIT = 32 * 1024


def check_webhook(url: str) -> str:
    """An ``http://`` or ``https://`` URL with a host, or ValueError."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("--webhook must be an http:// or https:// URL, got %r" % url)
    return url


def alert_document(window: WindowRecord, candidates: Sequence[Verdict],
                   means: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``means``: the window's mean per column with its interval, estimated from the released
    readings (``dpsense aggregate``'s estimator, no privacy budget spent), when the analyst had
    a profile; the document then says so in ``means_privacy``."""
    doc: dict[str, Any] = {
        "window": window.id, "group": window.group, "group_window": window.seq, "kind": window.kind,
        "start": iso_time(window.start), "end": iso_time(window.end), "readings": window.n,
        "candidates": [{"device": c.device_id, "boot": c.boot_id, "seq": c.seq,
                        "received_at": iso_time(c.received_at), "verdict": c.verdict} for c in candidates],
    }
    if means:
        doc["means"] = list(means)
        doc["means_privacy"] = ("estimates from the released readings: post-processing of readings already "
                                "released, each epsilon-DP towards the analyst; no privacy budget spent")
    return doc


def mqtt_parts(window: WindowRecord, candidates: Sequence[Verdict], body: bytes,
               limit: int = ALERT_LIMIT, means: Sequence[dict[str, Any]] | None = None) -> list[bytes]:
    """The alert as MQTT payloads under the broker's packet limit: ``body`` itself when it fits,
    else documents with a share of the candidates each and ``part``/``parts`` (1-based)."""
    if len(body) <= limit:
        return [body]
    k = -(-len(body) // (limit // 2))
    while True:
        per = -(-len(candidates) // k)
        out = []
        for i in range(k):
            doc = alert_document(window, candidates[i * per:(i + 1) * per], means)
            doc["part"], doc["parts"] = i + 1, k
            out.append(json.dumps(doc, separators=(",", ":")).encode())
        if max(len(b) for b in out) <= limit or per == 1:
            return out
        k *= 2


class Alerts:
    """Where a done window's candidates go; see the module docstring."""

    def __init__(self, publish: Callable[[str, bytes], object] | None = None, webhook: str | None = None,
                 log: Callable[[str], None] = print, timeout: float = 5.0, backlog: int = 100) -> None:
        self._publish = publish
        self._webhook = check_webhook(webhook) if webhook else None
        self._log = log
        self._timeout = timeout
        self._q: queue.Queue[tuple[int, bytes] | None] = queue.Queue(backlog)
        self.posted = 0
        self.failed = 0
        self._thread: threading.Thread | None = None
        if self._webhook is not None:
            self._thread = threading.Thread(target=self._post_loop, name="webhook", daemon=True)
            self._thread.start()

    def window_done(self, window: WindowRecord, candidates: Sequence[Verdict],
                    means: Sequence[dict[str, Any]] | None = None) -> None:
        if not candidates:
            return
        body = json.dumps(alert_document(window, candidates, means), separators=(",", ":")).encode()
        if self._publish is not None:
            try:
                for part in mqtt_parts(window, candidates, body, means=means):
                    self._publish(topics.ALERTS % window.group, part)
            except Exception as e:  # noqa: BLE001 - an alert must never stop detection
                self._log("analyst: alert for window %d not published: %s" % (window.id, e))
        if self._webhook is not None:
            try:
                self._q.put_nowait((window.id, body))
            except queue.Full:
                self.failed += 1
                self._log("analyst: webhook %s: %d posts waiting; window %d not delivered"
                          % (self._webhook, self._q.qsize(), window.id))

    def _post_loop(self) -> None:
        assert self._webhook is not None
        while True:
            item = self._q.get()
            if item is None:
                return
            window, body = item
            req = urllib.request.Request(self._webhook, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                    resp.read(65536)
                self.posted += 1
            except (urllib.error.URLError, OSError, ValueError) as e:
                self.failed += 1
                self._log("analyst: webhook %s: window %d not delivered: %s" % (self._webhook, window, e))

    def close(self, timeout: float = 5.0) -> None:
        """Let queued posts go out for up to ``timeout`` seconds, then stop the thread."""
        if self._thread is not None:
            try:
                self._q.put(None, timeout=timeout)
            except queue.Full:
                pass
            self._thread.join(timeout)
