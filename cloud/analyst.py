"""The analyst's detection loop: windows of stored readings -> DBSCAN -> correction round.

    analyst = Analyst(conn, lambda: open_analyst_store(url), AnalystParams(eps_q=1200, min_samples=60))
    analyst.run(stop)

Windows are consecutive runs of ``window`` readings in arrival order; progress is kept
in the store's meta table, so a restarted analyst continues with the next window. The
analyst sees only released values (quanta) and tokens; it learns d_TP, w_O, FP and FN
(mode ``paper``) or R (mode ``bands``) from the correction server, never a distance
difference. In mode paper a window whose O' already holds about the expected share of
outliers gets no round (``rules.needs_round``): R = O'.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud import topics
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.bands import make_bands
from dpsense.cloud.correction.rules import needs_round, reduce_rows
from dpsense.cloud.ingest.service import Connection
from dpsense.cloud.outliers.dbscan import DBSCANOutliers
from dpsense.cloud.outliers.distance import BetaRAnomalies, DistanceOutliers


DETECTORS = ("dbscan", "kr", "beta_r")


@dataclass(frozen=True)
class AnalystParams:
    """Detection settings, in quanta (the unit of the released values).

    ``detector`` picks the outlier notion applied to every window: ``dbscan`` (noise
    points of DBSCAN(eps_q, min_samples), the paper's), ``kr`` (fewer than
    ``min_samples`` other readings within ``eps_q``, SPEC 4.1) or ``beta_r`` (at most
    ``min_samples`` readings, itself included, within ``eps_q``, SPEC 2.1).

    ``mode`` is the correction protocol (``paper`` or ``bands``, whose bands are
    ``band_width_q`` wide). Distances are measured from the provisioned ``centre_q``
    when given (the never-worse guarantees need it), else from the window's mean. In
    mode paper a round is skipped when ``|O'|`` is within ``skip_margin`` of
    ``outlier_share * n`` (a negative margin never skips); mode bands always runs.
    """

    eps_q: float
    min_samples: int
    window: int = 100_000
    round_timeout: float = 60.0
    detector: str = "dbscan"
    mode: str = "paper"
    band_width_q: float = 0.0
    centre_q: tuple[float, ...] | None = None
    outlier_share: float = 0.10
    skip_margin: float = 0.05

    def __post_init__(self) -> None:
        if not self.eps_q > 0:
            raise ValueError("eps_q must be > 0")
        if self.min_samples < 1:
            raise ValueError("min_samples must be >= 1")
        if self.detector not in DETECTORS:
            raise ValueError("detector must be one of %s" % (DETECTORS,))
        if self.window < 2:
            raise ValueError("window must be >= 2")
        if not self.round_timeout > 0:
            raise ValueError("round_timeout must be > 0")
        if self.mode not in msg.MODES:
            raise ValueError("mode must be one of %s" % (msg.MODES,))
        if self.mode == "bands" and not self.band_width_q > 0:
            raise ValueError("mode bands needs a band width > 0")
        if not 0 < self.outlier_share < 1:
            raise ValueError("outlier_share must be in (0, 1)")


class RoundTimeout(RuntimeError):
    pass


class Analyst:
    def __init__(self, conn: Connection, open_store: Callable[[], Any], params: AnalystParams,
                 log: Callable[[str], None] | None = None) -> None:
        self.conn = conn
        self.open_store = open_store
        self.params = params
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self._q: queue.Queue[dict[str, Any]] = queue.Queue()
        self._connected = threading.Event()
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=conn.client_id, clean_session=False,
                        protocol=mqtt.MQTTv311)
        c.username_pw_set(conn.username, conn.password)
        c.on_connect = self._on_connect
        c.on_message = self._on_message
        self._client = c

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            client.subscribe(topics.ROUND_TO_ANALYST, qos=1)
            self._connected.set()

    def _on_message(self, client: mqtt.Client, userdata: Any, m: mqtt.MQTTMessage) -> None:
        try:
            self._q.put(msg.decode(bytes(m.payload)))
        except msg.RoundError as e:
            self.log("analyst: ignored round message: %s" % e)

    def _await(self, rid: int, step: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.params.round_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RoundTimeout("no %r answer for round %d within %.0f s" % (step, rid, self.params.round_timeout))
            try:
                body = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if body["round"] != rid:
                continue        # a late answer to an abandoned round
            if body["step"] == "error":
                raise msg.RoundError("correction server: %s" % body.get("reason"))
            if body["step"] == step:
                return body

    def detector(self) -> Any:
        p = self.params
        if p.detector == "kr":
            return DistanceOutliers(k=p.min_samples, r=p.eps_q)
        if p.detector == "beta_r":
            return BetaRAnomalies(beta=p.min_samples, r=p.eps_q)
        return DBSCANOutliers(p.eps_q, p.min_samples)

    def _paper_round(self, window_id: int, tokens: list[bytes], presumed: np.ndarray, dist: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any], dict[str, Any]]:
        pub = self._client.publish
        pub(topics.ROUND_TO_CS, msg.encode("presumed", window_id, tokens=msg.tokens_field(tokens),
                                           presumed=presumed), qos=1)
        split = self._await(window_id, "split")
        rows = reduce_rows(dist, presumed, msg.number(split, "d_tp"), msg.number(split, "w_o"))
        pub(topics.ROUND_TO_CS, msg.encode("rows", window_id, i_l2=rows.i_l2, i_l3=rows.i_l3), qos=1)
        res = self._await(window_id, "result")
        fp = msg.positions(res, "fp", n)
        fn = msg.positions(res, "fn", n)
        return np.union1d(np.setdiff1d(presumed, fp), fn), fp, fn, split, res

    def process_window(self, store: Any, window_id: int, start_row: int, size: int) -> dict[str, Any]:
        """Detect on one window and run its correction round; returns the saved result."""
        p = self.params
        t0 = time.perf_counter()
        w = store.window(start_row, size)
        values = np.asarray(w.values, dtype=float)
        n = len(w.row_ids)
        presumed = np.flatnonzero(self.detector().fit_predict(values) == -1)
        centre = values.mean(axis=0) if p.centre_q is None else np.asarray(p.centre_q, dtype=float)
        dist = np.linalg.norm(values - centre, axis=1)
        t_detect = time.perf_counter() - t0
        t1 = time.perf_counter()
        res: dict[str, Any] = {}
        split: dict[str, Any] = {}
        fp = fn = np.empty(0, dtype=np.intp)
        skipped = p.mode == "paper" and not needs_round(int(presumed.size), n, p.outlier_share, p.skip_margin)
        if skipped:
            r = presumed
        elif p.mode == "bands":
            bands = make_bands(dist, p.band_width_q)
            self._client.publish(topics.ROUND_TO_CS, msg.encode(
                "bands", window_id, tokens=msg.tokens_field(w.tokens), width=bands.width,
                edges=[float(e) for e in bands.edges], bands=bands.members), qos=1)
            res = self._await(window_id, "result")
            cand = msg.positions(res, "r", n)
            r = np.union1d(cand, np.intersect1d(presumed, msg.positions(res, "unknown", n)))
            fp, fn = np.setdiff1d(presumed, r), np.setdiff1d(r, presumed)
        else:
            r, fp, fn, split, res = self._paper_round(window_id, w.tokens, presumed, dist, n)
        t_round = time.perf_counter() - t1
        row_ids = np.asarray(w.row_ids)
        result = {
            "window": window_id, "first_row": int(row_ids[0]), "last_row": int(row_ids[-1]), "n": n,
            "presumed": int(presumed.size), "fp": int(fp.size), "fn": int(fn.size),
            "fn_l1": res.get("fn_l1"), "fn_l2": res.get("fn_l2"), "fn_l3": res.get("fn_l3"),
            "missing_corrections": res.get("missing"), "split_accepted": res.get("split_accepted"),
            "mode": p.mode, "skipped": skipped,
            "candidates": int(r.size), "d_tp": split.get("d_tp"),
            "presumed_rows": [int(x) for x in row_ids[presumed]],
            "candidate_rows": [int(x) for x in row_ids[r]],
            "detect_s": round(t_detect, 4), "round_s": round(t_round, 4),
        }
        store.save_window_result(window_id, result)
        return result

    def run(self, stop: threading.Event, flush_when_idle: float | None = None,
            exit_when_done: bool = False) -> int:
        """Process full windows until ``stop``; a partial window is processed once nothing
        new arrived for ``flush_when_idle`` seconds. Returns the number of windows done."""
        self._client.connect(self.conn.host, self.conn.port, keepalive=self.conn.keepalive)
        self._client.loop_start()
        if not self._connected.wait(10):
            raise ConnectionError("analyst: no broker connection")
        store = self.open_store()
        done = 0
        last_count, last_change = -1, time.monotonic()
        try:
            while not stop.is_set():
                window_id = int(store.get_meta("next_window") or 0)
                start = int(store.get_meta("next_row") or 1)
                avail = len(store.readings_after(start - 1, self.params.window))
                count = store.count()
                if count != last_count:
                    last_count, last_change = count, time.monotonic()
                idle = time.monotonic() - last_change
                full = avail >= self.params.window
                flush = avail > 1 and flush_when_idle is not None and idle >= flush_when_idle
                if not (full or flush):
                    if (exit_when_done and count > 0 and avail == 0 and flush_when_idle is not None
                            and idle >= flush_when_idle):
                        break
                    time.sleep(0.2)
                    continue
                try:
                    res = self.process_window(store, window_id, start, self.params.window)
                except (RoundTimeout, msg.RoundError) as e:
                    self.log("analyst: window %d: %s; retrying" % (window_id, e))
                    continue
                store.set_meta("next_window", str(window_id + 1))
                store.set_meta("next_row", str(res["last_row"] + 1))
                done += 1
                self.log("analyst: window %d: %d readings, %d presumed outliers, %d false positives removed, "
                         "%d false negatives added -> %d candidates (detect %.1f s, round %.2f s)"
                         % (window_id, res["n"], res["presumed"], res["fp"], res["fn"], res["candidates"],
                            res["detect_s"], res["round_s"]))
        finally:
            store.close()
            self._client.disconnect()
            self._client.loop_stop()
        return done
