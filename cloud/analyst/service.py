"""The analyst's detection loop: windows of stored readings -> detector -> correction round.

    params = AnalystParams(eps_q=1200, min_samples=60, window=parse_window("30s"))
    analyst = Analyst(conn, lambda: open_analyst_store(url), params)
    analyst.run(stop)

Windows are cut per device group (cloud/analyst/windows.py): tumbling windows of arrival time, or runs
of ``window.count`` readings in arrival order. A window below ``params.floor`` readings is never
scored: its readings stay pending and join the group's next window, and a log line and a status
entry say so. A window in which the detector finds no inlier at all (too sparse for its
parameters) is carried the same way, without a round. Carried readings are scored with the
group's next window that has new readings; an idle group's are never closed again on their own
(docs/operating.md, "Windows that end"). Closing a window fixes its members in the store; its correction round then runs
until it completes: a round that fails (no answer, an error from the correction server,
correction records still missing) leaves the window held, with a log line and a status entry,
and is retried with a growing delay. Only a completed round stores the window's verdicts.

While nothing arrives, a poll costs one index lookup (the newest row id) and a clock check: the
number of pending readings per group is kept in memory, counted from the rows that arrived
since the last poll. The analyst sees released values (quanta) and tokens; from the correction
server it learns d_TP, w_O, FP and FN (mode ``paper``) or R (mode ``bands``), or computes R
with it under garbled circuits (mode ``secure``). These are functions of the window's distance
differences, so with a reading's released value they say something about its raw distance from
the centre: the correction server computes them from noisy distance differences (its input to
the garbled comparison too), and the analyst's view of a reading within the normal radius after
a round is epsilon_A-DP on top of the released values (cloud/correction/honest.py, measured by
tests/statistical/test_round_view.py). The server answers one round per window, whole, with at
least ``min_window`` tokens (and ``min_presumed`` presumed outliers in mode paper); below that
the analyst runs no round and R = O'. In mode paper a window whose O' already holds about the expected share of
outliers gets no round (``rules.needs_round``): R = O'. After a round the analyst checks that the
correction's radial model fits the window (cloud/correction/fit.py: R against O' and the expected
``outlier_share``); where it does not, R = O', and the window's stored outcome (``fit``), an event
and a log line say why. A round needs the provisioned centre
(and in mode bands the band width), which the profile gives: an analyst started before
profile.json exists holds its windows until it does (the log and the status say so).

With ``owner`` (``dpsense analyst --worker N``) several analysts share one PostgreSQL store: each
closes and scores only the device groups it claims there (cloud/storage/claims.py), takes up
their state whenever its set of groups changes, draws round ids from the database, and drops a
group at once when the store refuses a write because the claim lapsed (docs/scale-out.md).
"""
from __future__ import annotations

import base64
import collections
import queue
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.ops.alerts import Alerts
from dpsense.cloud.privacy.stream_aggregates import column_means
from dpsense.cloud.correction import chunks
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.honest import UNCORRECTED
from dpsense.cloud.correction.bands import make_bands
from dpsense.cloud.correction.fit import model_fit
from dpsense.cloud.correction.rules import needs_round, reduce_rows
from dpsense.cloud.correction.mpc.secure import BITS, MAX_MESSAGE, Evaluator
from dpsense.cloud.errors import RoundError
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.analyst.outliers.dbscan import DBSCANOutliers
from dpsense.cloud.analyst.outliers.distance import BetaRAnomalies, DistanceOutliers
from dpsense.cloud.deploy.profile import DeviceProfile
from dpsense.cloud.transport.session import Session
from dpsense.cloud.ops.results import iso_time
from dpsense.cloud.ingest.clock import ArrivalClock
from dpsense.cloud.storage import AnalystStore, StorageError, Verdict, WindowRecord
from dpsense.cloud.errors import StorageUnavailable, backoff_delay
from dpsense.cloud.storage.claims import ClaimLost, PartitionClaims
from dpsense.cloud.storage.records import Members, WindowOutcome
from dpsense.cloud.analyst.windows import WindowSpec, min_window_size, support

DETECTORS = ("dbscan", "kr", "beta_r")


@dataclass(frozen=True)
class AnalystParams:
    """Detection settings, in quanta (the unit of the released values).

    ``detector`` picks the outlier notion applied to every window: ``dbscan`` (noise
    points of DBSCAN(eps_q, min_samples), the paper's), ``kr`` (fewer than
    ``min_samples`` other readings within ``eps_q``, Okada et al. 2015, definitions) or ``beta_r`` (at most
    ``min_samples`` readings, itself included, within ``eps_q``, Asif et al. 2019, data model). ``window`` is a
    ``WindowSpec`` (an int means that many readings). ``min_window`` defaults to
    ``windows.min_window_size``; ``settle`` is how long after a time window's end the
    analyst waits for readings still being committed; a round whose correction records
    are missing is held for up to ``max_hold`` seconds after the window closed, then
    completed without them (and the status says so).

    ``mode`` is the correction protocol (``paper``, ``secure`` or ``bands``, whose bands are
    ``band_width_q`` wide; 0 = the profile's, once there is one). Distances are measured
    from the provisioned ``centre_q``, the point the boards' d_diff refers to (None = the
    profile's, once there is one): until it is known, no round runs and the window is held.
    In mode paper a round is skipped when ``|O'|`` is within ``skip_margin`` of
    ``outlier_share * n`` (a negative margin never skips) or when ``|O'|`` is below
    ``min_presumed``; no round runs, in any mode, for a window below ``min_round`` readings (the
    correction server's policy, honest.py, refuses both; a refusal for size also completes the
    window uncorrected). ``outlier_share`` is also what the model-fit check expects R to hold
    (cloud/correction/fit.py).
    """

    eps_q: float
    min_samples: int
    window: WindowSpec | int = 100_000
    round_timeout: float = 30.0
    detector: str = "dbscan"
    min_window: int | None = None
    settle: float = 0.5
    max_hold: float = 600.0
    retry_min: float = 2.0
    retry_max: float = 60.0
    mode: str = "paper"
    band_width_q: float = 0.0
    centre_q: tuple[float, ...] | None = None
    outlier_share: float = 0.10
    skip_margin: float = 0.05
    min_round: int = 100
    min_presumed: int = 10

    def __post_init__(self) -> None:
        if not self.eps_q > 0:
            raise ValueError("eps_q must be > 0")
        if self.min_samples < 1:
            raise ValueError("min_samples must be >= 1")
        if self.detector not in DETECTORS:
            raise ValueError("detector must be one of %s" % (DETECTORS,))
        if isinstance(self.window, int):
            object.__setattr__(self, "window", WindowSpec(count=self.window))
        if not self.round_timeout > 0:
            raise ValueError("round_timeout must be > 0")
        if self.min_window is not None and self.min_window < support(self.detector, self.min_samples):
            raise ValueError("the minimum window must be at least %d readings: below that the %s detector "
                             "flags every reading" % (support(self.detector, self.min_samples), self.detector))
        spec = self.spec
        if spec.count is not None and spec.count < self.floor:
            raise ValueError("a window of %d readings is below the minimum of %d (%s)"
                             % (spec.count, self.floor, self.floor_reason))
        if not (self.settle >= 0 and self.max_hold >= 0 and 0 < self.retry_min <= self.retry_max):
            raise ValueError("settle and max_hold must be >= 0, 0 < retry_min <= retry_max")
        if self.mode not in msg.MODES:
            raise ValueError("mode must be one of %s" % (msg.MODES,))
        if not self.band_width_q >= 0:
            raise ValueError("band_width_q must be >= 0 (0: the profile's)")
        if not 0 < self.outlier_share < 1:
            raise ValueError("outlier_share must be in (0, 1)")
        if not 2 <= self.min_round or not 1 <= self.min_presumed:
            raise ValueError("min_round must be >= 2 and min_presumed >= 1")

    @property
    def spec(self) -> WindowSpec:
        assert isinstance(self.window, WindowSpec)
        return self.window

    @property
    def floor(self) -> int:
        """The smallest window that is scored."""
        if self.min_window is not None:
            return self.min_window
        return min_window_size(self.detector, self.min_samples)

    @property
    def floor_reason(self) -> str:
        if self.min_window is not None:
            return "--min-window"
        return "twice the %s detector's %d readings per neighbourhood" % (
            self.detector, support(self.detector, self.min_samples))


class RoundTimeout(RoundError):
    """The correction server did not answer a round in time."""


class RoundHeld(RuntimeError):
    """The round gave an answer the analyst will not store yet (correction records missing)."""


class RoundUncorrected(msg.RoundError):
    """The correction server refused the window for its size: it completes with R = O'."""


class WindowCarried(RuntimeError):
    """The detector flagged every reading of the window: there is no population in it to score."""


@dataclass
class _Flow:
    """What the loop keeps in memory between polls."""

    seen: int = 0                                          # newest row id counted
    pending: dict[str, int] = field(default_factory=dict)  # readings not in a window, per group
    arrived: dict[str, float] = field(default_factory=dict)  # when a group last got readings (clock)
    checked: float = float("-inf")                         # last time-window boundary handled
    waiting: collections.deque[int] = field(default_factory=collections.deque)  # windows without verdicts
    group_of: dict[int, str] = field(default_factory=dict)       # a waiting window's group, once read
    # Per group: a held window delays its own group's later windows, never another group's.
    retry_at: dict[str, float] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)
    # A carried window's group closes its next window only past it: a time window must end
    # after ``carried_end``, a count window holds ``carried_n`` readings more than usual.
    carried_end: dict[str, float] = field(default_factory=dict)
    carried_n: dict[str, int] = field(default_factory=dict)
    told: set[tuple[str, float]] = field(default_factory=set)    # carries already reported
    closed_end: dict[str, float] = field(default_factory=dict)   # end of a group's last time window


class Analyst:
    POLL = 0.2

    def __init__(self, conn: Connection, open_store: Callable[[], Any], params: AnalystParams,
                 log: Callable[[str], None] | None = None, alerts: Alerts | None = None,
                 webhook: str | None = None, clock: Callable[[], float] | None = None,
                 profile: Callable[[], DeviceProfile | None] | None = None,
                 owner: str | None = None, lease: float = 15.0) -> None:
        self.conn = conn
        # owner: this analyst shares the store with others and scores only the device groups
        # it claims (cloud/storage/claims.py); None: it scores every group.
        self.owner = owner
        self.lease = lease
        self._claims: PartitionClaims | None = None
        self._claimed_at = float("-inf")
        self._stale = False             # a write was refused: take up the store's state afresh
        self.open_store = open_store
        self.params = params
        self._profile = profile
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        # Window ends and closing times: a wall-clock step must neither close windows early nor
        # hold them for as long as the step (cloud/ingest/clock.py); each step is stored as an event.
        self._steps: list[float] = []
        self.clock: Callable[[], float] = clock or ArrivalClock(log=self.log, on_step=self._steps.append,
                                                               who="analyst")
        self._q: queue.Queue[dict[str, Any]] = queue.Queue()
        # Mode secure's garbled comparison is about 2 KB per row (secure.MAX_MESSAGE bounds it).
        secure = params.mode == "secure"
        self._joiner = chunks.Reassembler(max_bytes=MAX_MESSAGE if secure else chunks.MAX_MESSAGE,
                                          timeout=600.0 if secure else 60.0)
        self.session = Session(conn, "analyst", self.log)
        self._stop = threading.Event()
        self._next_round = 1
        self._flow = _Flow()
        # Clean session: an answer to a round of an earlier run is of no use, and the loop
        # starts every round afresh (with a new round id) after a restart.
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=conn.client_id, clean_session=True,
                        protocol=mqtt.MQTTv311)
        conn.apply(c)
        c.reconnect_delay_set(1, 5)
        c.on_connect = self._on_connect
        c.on_disconnect = lambda cl, u, flags, reason, props: self.session.lost(reason)
        c.on_message = self._on_message
        self._client = c
        self.alerts = alerts if alerts is not None else Alerts(self._publish_alert, webhook, log=self.log)

    def _publish_alert(self, topic: str, body: bytes) -> None:
        self._client.publish(topic, body, qos=1)

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if self.session.accepted(reason):
            client.subscribe(topics.ROUND_TO_ANALYST, qos=1)

    def _on_message(self, client: mqtt.Client, userdata: Any, m: mqtt.MQTTMessage) -> None:
        try:
            payload = self._joiner.feed(bytes(m.payload))
            if payload is not None:
                self._q.put(msg.decode(payload))
        except msg.RoundError as e:
            self.log("analyst: ignored round message: %s" % e)

    def _send(self, payload: bytes) -> None:
        for part in chunks.split(payload):
            self._client.publish(topics.ROUND_TO_CS, part, qos=1)

    def _await(self, rid: int, step: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.params.round_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RoundTimeout("no %r answer for round %d within %.0f s (is `dpsense correction-server` "
                                   "running?)" % (step, rid, self.params.round_timeout))
            if self._stop.is_set():
                raise RoundTimeout("stopped while waiting for round %d" % rid)
            self._keep_leases()
            try:
                body = self._q.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if body["round"] != rid:
                continue        # a late answer to an abandoned attempt
            if body["step"] == "error":
                code = body.get("code")
                if code == "missing":
                    raise RoundHeld("correction server: %s" % body.get("reason"))
                if code in UNCORRECTED:
                    raise RoundUncorrected("correction server: %s" % body.get("reason"))
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

    def _provisioned(self) -> None:
        """Take the centre and the band width from the profile once it exists: the analyst may
        start before the first calibration writes profile.json."""
        p = self.params
        if self._profile is None or (p.centre_q is not None and (p.mode != "bands" or p.band_width_q > 0)):
            return
        prof = self._profile()
        if prof is None:
            return
        # Without a profile at the start the outlier share was the default: the profile's replaces it.
        self.params = replace(p, centre_q=p.centre_q if p.centre_q is not None else tuple(map(float, prof.centre_q)),
                              band_width_q=p.band_width_q if p.band_width_q > 0 else prof.band_width_q,
                              outlier_share=prof.outlier_share if p.centre_q is None else p.outlier_share)
        self.log("analyst: profile.json: centre %s, band width %g quanta, outlier share %g"
                 % (list(self.params.centre_q or ()), self.params.band_width_q, self.params.outlier_share))

    def _paper_round(self, rid: int, window: int, final: bool, tokens: list[bytes], presumed: np.ndarray,
                     dist: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any], dict[str, Any]]:
        """Correction protocol of Böhler et al. 2017, Sect. 6, lines 2-6: O' out, d_TP and w_O back, I_L2 and I_L3 out, FP and FN back."""
        self._send(msg.encode("presumed", rid, window=window, final=final, tokens=msg.tokens_field(tokens),
                              presumed=presumed))
        split = self._await(rid, "split")
        rows = reduce_rows(dist, presumed, msg.number(split, "d_tp"), msg.number(split, "w_o"))
        self._send(msg.encode("rows", rid, i_l2=rows.i_l2, i_l3=rows.i_l3))
        res = self._await(rid, "result")
        fp = msg.positions(res, "fp", n)
        fn = msg.positions(res, "fn", n)
        return np.union1d(np.setdiff1d(presumed, fp), fn), fp, fn, split, res

    def _bands_round(self, rid: int, window: int, final: bool, tokens: list[bytes], presumed: np.ndarray,
                     dist: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Mode bands: the bands out, R back; rows without a correction record keep O'."""
        bands = make_bands(dist, self.params.band_width_q)
        self._send(msg.encode(
            "bands", rid, window=window, final=final, tokens=msg.tokens_field(tokens), width=bands.width,
            edges=[float(e) for e in bands.edges], bands=bands.members))
        res = self._await(rid, "result")
        cand = msg.positions(res, "r", n)
        r = np.union1d(cand, np.intersect1d(presumed, msg.positions(res, "unknown", n)))
        return r, np.setdiff1d(presumed, r), np.setdiff1d(r, presumed), res

    def _secure_round(self, rid: int, window: int, final: bool, tokens: list[bytes], presumed: np.ndarray,
                      dist: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Mode secure: base OTs, the IKNP matrix out, the garbled comparison back; A decodes R.
        Rows without a correction record keep O'."""
        evaluator = Evaluator(dist)
        self._send(msg.encode(
            "secure-open", rid, window=window, final=final, tokens=msg.tokens_field(tokens), bits=BITS,
            a=base64.b64encode(evaluator.open()).decode()))
        base = self._await(rid, "secure-base")
        unknown = msg.positions(base, "unknown", n)
        try:
            u = evaluator.extend(self._blob(base))
        except msg.RoundError:
            raise
        except ValueError as e:
            raise msg.RoundError("mode secure: base-OT replies: %s" % e) from None
        self._send(msg.encode_blob("secure-ext", rid, u))
        garbled = self._blob(self._await(rid, "secure-garbled"))
        try:
            cand = evaluator.finish(garbled)
        except ValueError as e:
            raise msg.RoundError("mode secure: garbled message: %s" % e) from None
        r = np.union1d(cand, np.intersect1d(presumed, unknown))
        return r, np.setdiff1d(presumed, r), np.setdiff1d(r, presumed), {"missing": base.get("missing")}

    @staticmethod
    def _blob(body: dict[str, Any]) -> bytes:
        blob = body.get("blob")
        if not isinstance(blob, bytes):
            raise msg.RoundError("%s carries no binary part" % body["step"])
        return blob

    def _fits(self) -> tuple[int | None, int | None]:
        """The column count and configuration a scored reading must have: the profile's when
        known (its centre has one value per column), else None (the window's majority, any)."""
        prof = self._profile() if self._profile is not None else None
        centre = self.params.centre_q
        columns = len(centre) if centre is not None else (len(prof.centre_q) if prof is not None else None)
        return columns, (prof.config_id if prof is not None else None)

    def _nothing_to_score(self, store: AnalystStore, w: WindowRecord, m: Members) -> dict[str, Any]:
        """Complete a window whose readings were all set apart: no detection, no round."""
        now = self.clock()
        result: dict[str, Any] = {
            "window": w.id, "group": w.group, "group_window": w.seq, "kind": w.kind, "start": w.start,
            "end": w.end, "round": None, "attempts": w.attempts, "n": 0, "presumed": 0, "fp": 0, "fn": 0,
            "missing_corrections": 0, "mode": self.params.mode, "skipped": True, "candidates": 0,
            "presumed_rows": [], "candidate_rows": [], "detect_s": 0.0, "round_s": 0.0,
            "set_apart": len(m.odd),
        }
        store.complete_window(w.id, WindowOutcome(0, 0, 0, 0, 0, 0.0, 0.0, now), [], result, None, m.odd)
        return result

    # -- one window ---------------------------------------------------------------------------------
    def process_window(self, store: AnalystStore, w: WindowRecord) -> dict[str, Any]:
        """Detect on a closed window and run its correction round; store and return the result.

        Raises ``RoundTimeout``, ``msg.RoundError`` or ``RoundHeld`` when the round cannot
        complete, ``WindowCarried`` when the detector flags every reading; nothing about the
        window's outcome is stored then.
        """
        t0 = time.perf_counter()
        self._provisioned()
        columns, config_id = self._fits()
        m = store.window_members(w.id, columns, config_id)
        values = np.asarray(m.values, dtype=float)
        n = len(m.row_ids)
        if m.odd:
            self.log("analyst: window %d (group %s): %d of %d readings set apart, not scored (%s)"
                     % (w.id, w.group, len(m.odd), w.n, "; ".join(sorted({
                         "device %d: %s" % (o.device_id, o.reason) for o in m.odd}))))
        if n == 0:
            return self._nothing_to_score(store, w, m)
        presumed = np.flatnonzero(self.detector().fit_predict(values) == -1)
        if presumed.size == n:
            p = self.params
            raise WindowCarried(
                "the %s detector flagged all %d readings: no population to compare with (too sparse for "
                "min_samples %d within %g quanta; longer windows or other detector parameters help)"
                % (p.detector, n, p.min_samples, p.eps_q))
        self._provisioned()
        p = self.params
        t_detect = time.perf_counter() - t0
        skipped = ((p.mode == "paper" and (presumed.size < p.min_presumed
                                            or not needs_round(int(presumed.size), n, p.outlier_share,
                                                               p.skip_margin)))
                   or n < p.min_round)
        # The boards' d_diff is measured from the provisioned centre, and so must A's bands
        # and layers be: from any other point the guarantees (no normal reading added) fail.
        if not skipped and (p.centre_q is None or (p.mode == "bands" and not p.band_width_q > 0)):
            what = "the provisioned centre and the band width are" if p.mode == "bands" else "the provisioned centre is"
            raise msg.RoundError("%s not known yet (no profile.json); no round until then" % what)
        res: dict[str, Any] = {}
        split: dict[str, Any] = {}
        rid: int | None = None
        t1 = time.perf_counter()
        if skipped:
            r, fp, fn = presumed, np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
        else:
            dist = np.linalg.norm(values - np.asarray(p.centre_q, dtype=float), axis=1)
            if self._claims is not None:
                rid = self._claims.next_round_id()
            else:
                rid = self._next_round
                self._next_round += 1
            store.start_attempt(w.id, rid)
            final = self.clock() - w.closed_at >= self.params.max_hold
            try:
                if p.mode == "bands":
                    r, fp, fn, res = self._bands_round(rid, w.id, final, m.tokens, presumed, dist, n)
                elif p.mode == "secure":
                    r, fp, fn, res = self._secure_round(rid, w.id, final, m.tokens, presumed, dist, n)
                else:
                    r, fp, fn, split, res = self._paper_round(rid, w.id, final, m.tokens, presumed, dist, n)
            except RoundUncorrected as e:
                self.log("analyst: window %d completes without a correction: %s" % (w.id, e))
                skipped = True
                r, fp, fn = presumed, np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
        fit = None if skipped else model_fit(n, presumed, r, p.outlier_share)
        if fit is not None and not fit.fits:
            # The radial model does not fit this window: its R is not the outliers, keep O'.
            r, fp, fn = presumed, np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
        detect_s, round_s = round(t_detect, 4), round(time.perf_counter() - t1, 4)
        missing = res.get("missing")
        missing = missing if isinstance(missing, int) and missing > 0 else 0
        now = self.clock()
        note = None
        if missing:
            if now - w.closed_at < self.params.max_hold:
                raise RoundHeld("%d of %d readings have no correction record at the correction server yet"
                                % (missing, n))
            note = ("window %d completed %.0f s after it closed with %d of %d readings lacking a correction "
                    "record; they were left out of the correction" % (w.id, now - w.closed_at, missing, n))
        unfit = fit.reason if fit is not None and not fit.fits else None
        if unfit is not None:
            text = "window %d (group %s, %d readings): %s" % (w.id, w.group, n, unfit)
            note = text if note is None else note + "; " + text
        decided = np.union1d(presumed, fn)
        in_p, in_fp, in_fn, in_r = (np.isin(decided, s) for s in (presumed, fp, fn, r))
        verdicts = [Verdict(w.id, w.group, int(m.row_ids[i]), int(m.device_ids[i]), int(m.boot_ids[i]),
                            int(m.seqs[i]), float(m.received_at[i]), bool(in_p[k]), bool(in_p[k] and in_fp[k]),
                            bool(in_fn[k] and not in_p[k]), bool(in_r[k])) for k, i in enumerate(decided)]
        result = {
            "window": w.id, "group": w.group, "group_window": w.seq, "kind": w.kind, "start": w.start,
            "end": w.end, "round": rid, "attempts": w.attempts + (0 if skipped else 1),
            "first_row": int(m.row_ids.min()), "last_row": int(m.row_ids.max()), "n": n,
            "presumed": int(presumed.size), "fp": int(fp.size), "fn": int(fn.size),
            "fn_l1": res.get("fn_l1"), "fn_l2": res.get("fn_l2"), "fn_l3": res.get("fn_l3"),
            "missing_corrections": missing, "split_accepted": res.get("split_accepted"),
            "mode": p.mode, "skipped": skipped,
            "candidates": int(r.size), "d_tp": split.get("d_tp"),
            "presumed_rows": [int(x) for x in m.row_ids[presumed]],
            "candidate_rows": [int(x) for x in m.row_ids[r]],
            "detect_s": detect_s, "round_s": round_s,
            "fit": fit.as_dict() if fit is not None else None,
        }
        outcome = WindowOutcome(int(presumed.size), int(fp.size), int(np.setdiff1d(fn, presumed).size), int(r.size),
                                missing, detect_s, round_s, now, unfit)
        result["set_apart"] = len(m.odd)
        store.complete_window(w.id, outcome, verdicts, result, note, m.odd)
        if note is not None:
            self.log("analyst: " + note)
        self.alerts.window_done(w, [v for v in verdicts if v.candidate], self._means(values))
        return result

    def _means(self, values: np.ndarray) -> list[dict[str, Any]] | None:
        """The window's mean per column in physical units with its 95% interval (the profile's
        exact noise law; post-processing, no budget), or None without a matching profile."""
        prof = self._profile() if self._profile is not None else None
        if prof is None or values.ndim != 2 or values.shape[1] != len(prof.delta_q) or not len(values):
            return None
        return [{"column": j, "estimate": r.value, "lo": r.lo, "hi": r.hi, "level": 0.95}
                for j, r in enumerate(column_means(values, prof))]

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, stop: threading.Event, flush_when_idle: float | None = None,
            exit_when_done: bool = False) -> int:
        """Close windows and run their rounds until ``stop``. Count windows only: a partial
        window is closed once its group got nothing new for ``flush_when_idle`` seconds, and
        ``exit_when_done`` returns once nothing more can close. Returns the windows done."""
        self._stop = stop
        self.session.start(self._client)
        store = self.open_store()
        done = 0
        try:
            if self.owner is not None:
                # Claimed at the first turn of the loop, which then takes up those groups.
                self._claims = PartitionClaims(store, self.owner, self.lease)
            self.resume(store)
            outage: float | None = None         # when the store became unreachable
            delay = 0.0
            while not stop.is_set():
                try:
                    if outage is not None:
                        self.resume(store)
                        self.log("analyst: the store answers again after %.0f s; took up its state"
                                 % (time.monotonic() - outage))
                        outage, delay = None, 0.0
                    worked = self.poll(store, flush_when_idle)
                except StorageUnavailable as e:
                    # A database restart or a lost connection passes: every write is one
                    # transaction, so nothing half-done is stored; retry with backoff, say it
                    # once, and take up the store's state again when it answers.
                    if outage is None:
                        outage = time.monotonic()
                        self.log("analyst: the store is unavailable (%s); retrying with backoff" % e)
                    delay = backoff_delay(delay, 0.5, 30.0)
                    stop.wait(delay)
                    continue
                done += worked
                if (exit_when_done and flush_when_idle is not None
                        and self._finished(self.clock(), flush_when_idle)):
                    break
                if not worked:
                    stop.wait(self.POLL)
        finally:
            self.alerts.close()
            if self._claims is not None:
                try:
                    self._claims.release()
                except StorageError as e:
                    self.log("analyst: could not release the partitions (%s); they pass to the other "
                             "analysts when the lease ends" % e)
            store.close()
            self._client.disconnect()
            self._client.loop_stop()
        return done

    def poll(self, store: AnalystStore, flush_when_idle: float | None = None) -> int:
        """One turn of the loop: count arrivals, close what is due, run one due round (1 if it completed)."""
        try:
            self._claim(store)
            now = self.clock()
            self._record_steps(store, now)
            self._observe(store, now)
            if self.params.spec.seconds is not None:
                self._close_time_windows(store, now)
            else:
                self._close_count_windows(store, now, flush_when_idle)
            return self._next_round_due(store)
        except ClaimLost as e:
            # Another analyst holds the group now (this one's lease ended): nothing of this turn
            # was stored; the partitions are claimed afresh on the next turn.
            self.log("analyst: %s; claiming partitions afresh" % e)
            self._claimed_at = float("-inf")
            self._stale = True
            return 0

    def _record_steps(self, store: AnalystStore, now: float) -> None:
        """Wall-clock steps the clock saw: an event each and the ``clock_steps`` counter (/metrics)."""
        while self._steps:
            jump = self._steps[0]
            store.add_event("clock", "the wall clock stepped by %+.1f s; windows keep to the monotonic clock"
                            % jump, now, counts={"clock_steps": 1})
            self._steps.pop(0)

    def _mine(self, group: str) -> bool:
        return self._claims is None or group in self._claims.owned

    def _claim(self, store: AnalystStore) -> None:
        """Every third of a lease: renew, take and release partitions; take up the state of the
        groups held when they change."""
        c = self._claims
        if c is None or time.monotonic() - self._claimed_at < c.every:
            return
        before = c.owned
        c.refresh()
        self._claimed_at = time.monotonic()
        if c.owned != before:
            self.log("analyst %s: now scores group%s %s" % (c.owner, "" if len(c.owned) == 1 else "s",
                                                           ", ".join(sorted(c.owned)) or "(none)"))
        if c.owned != before or self._stale:
            self._stale = False
            self.resume(store)

    def _keep_leases(self) -> None:
        """While a round waits for the correction server: extend the leases (a third of a lease apart)."""
        c = self._claims
        if c is not None and time.monotonic() - self._claimed_at >= c.every:
            c.renew()
            self._claimed_at = time.monotonic()

    def resume(self, store: AnalystStore) -> None:
        """Take up the store's state: pending readings per group, windows awaiting a round."""
        f = self._flow = _Flow()
        f.seen = store.max_row_id()
        now = self.clock()
        for g, p in store.pending_by_group(0, f.seen).items():
            if self._mine(g):
                f.pending[g] = p.count
                f.arrived[g] = now
                # A group whose last window was carried waits for new readings, as before a restart.
                last = store.windows(group=g, limit=1)
                if last and last[0].state == "carried":
                    if last[0].kind == "time":
                        f.carried_end[g] = last[0].end
                    else:
                        f.carried_n[g] = last[0].n
        for w in store.windows(states=("closed", "held")):
            if self._mine(w.group):
                f.waiting.append(w.id)
                f.group_of[w.id] = w.group
        self._next_round = store.max_round_id() + 1
        if f.waiting:
            self.log("analyst: %d closed windows await their correction round (first: window %d)"
                     % (len(f.waiting), f.waiting[0]))
        self.log("analyst: windows of %s per group, at least %d readings (%s); %d readings pending"
                 % (self.params.spec.describe(), self.params.floor, self.params.floor_reason,
                    sum(f.pending.values())))
        self._provisioned()
        prm = self.params
        if prm.centre_q is None or (prm.mode == "bands" and not prm.band_width_q > 0):
            self.log("analyst: the provisioned centre%s not known yet (no profile.json); windows are held "
                     "until then" % (" and the band width are" if prm.mode == "bands" else " is"))

    def _observe(self, store: AnalystStore, now: float) -> None:
        """Count what arrived since the last poll; an index lookup when nothing did."""
        f = self._flow
        top = store.max_row_id()
        if top <= f.seen:
            return
        for g, p in store.pending_by_group(f.seen, top).items():
            if self._mine(g):
                f.pending[g] = f.pending.get(g, 0) + p.count
                f.arrived[g] = now
        f.seen = top

    def _closed(self, w: WindowRecord | None, group: str) -> None:
        f = self._flow
        if w is None:
            f.pending[group] = 0
            return
        f.pending[group] = max(0, f.pending.get(group, 0) - w.n)
        f.waiting.append(w.id)
        f.group_of[w.id] = group
        f.carried_end.pop(group, None)
        f.carried_n.pop(group, None)
        if w.kind == "time":
            f.closed_end[group] = max(w.end, f.closed_end.get(group, w.end))

    def _carry(self, store: AnalystStore, group: str, key: float, n: int, what: str) -> None:
        f = self._flow
        if (group, key) in f.told:
            return
        f.told.add((group, key))
        if len(f.told) > 10_000:
            f.told.clear()
        text = ("group %s: %s has %d readings, fewer than the minimum window of %d (%s); carried into the "
                "group's next window" % (group, what, n, self.params.floor, self.params.floor_reason))
        self.log("analyst: " + text)
        store.add_event("carried", text, self.clock(), group=group, carried=n)

    def _close_count_windows(self, store: AnalystStore, now: float, flush_idle: float | None) -> None:
        f = self._flow
        count = self.params.spec.count
        assert count is not None
        for g in sorted(f.pending):
            while f.pending.get(g, 0) >= count + f.carried_n.get(g, 0):
                size = count + f.carried_n.get(g, 0)
                self._closed(store.close_window(g, "count", upto_row=f.seen, closed_at=now, limit=size), g)
            left = f.pending.get(g, 0)
            if (flush_idle is None or left <= f.carried_n.get(g, 0) or now - f.arrived.get(g, now) < flush_idle):
                continue
            if left >= self.params.floor:
                self._closed(store.close_window(g, "count", upto_row=f.seen, closed_at=now, limit=left), g)
            else:
                self._carry(store, g, float(f.seen), left, "the partial window idle for %.0f s" % flush_idle)

    def _close_time_windows(self, store: AnalystStore, now: float) -> None:
        f = self._flow
        spec = self.params.spec
        boundary = spec.interval_start(now - self.params.settle)
        if boundary <= f.checked:
            return
        f.checked = boundary
        for g in sorted(g for g, n in f.pending.items() if n > 0):
            t = store.first_pending_at(g, f.seen, 0.0)
            while t is not None:
                end = spec.interval_end(t)
                carried = f.carried_end.get(g)
                if carried is not None and end <= carried:
                    # Carried readings are scored with the group's next window that has new
                    # readings: an idle group's are never closed again on their own.
                    fresh = store.first_pending_at(g, f.seen, carried)
                    if fresh is None:
                        break
                    end = spec.interval_end(fresh)
                if end > boundary:
                    break
                p = store.pending_in_group(g, f.seen, end)
                if p.count >= self.params.floor:
                    self._closed(store.close_window(g, "time", upto_row=f.seen, closed_at=end, before=end,
                                                    start=spec.interval_start(p.first_at), end=end), g)
                # Readings committed after their interval's window closed are late, not a small
                # window: they join the group's next window without a notice.
                elif p.count > 0 and end > f.closed_end.get(g, float("-inf")):
                    self._carry(store, g, end, p.count, "the window %s to %s" % (
                        iso_time(spec.interval_start(p.first_at)), iso_time(end)))
                t = store.first_pending_at(g, f.seen, end)

    def _next_round_due(self, store: AnalystStore) -> int:
        """Run the round of the oldest waiting window whose group is not waiting for a retry;
        1 when it completed. Windows of one group go in order; a held group's later windows
        wait for it, other groups' do not."""
        f = self._flow
        now = self.clock()
        blocked: set[str] = set()
        for wid in list(f.waiting):
            g = f.group_of.get(wid)
            if g is not None and (g in blocked or now < f.retry_at.get(g, 0.0)):
                blocked.add(g)
                continue
            w = store.window_record(wid)
            if w is None or w.state in ("done", "carried"):
                self._unwait(wid)
                continue
            f.group_of[wid] = w.group
            if w.group in blocked or now < f.retry_at.get(w.group, 0.0):
                blocked.add(w.group)
                continue
            return self._round_of(store, w)
        return 0

    def _unwait(self, wid: int) -> None:
        self._flow.waiting.remove(wid)
        self._flow.group_of.pop(wid, None)

    def _round_of(self, store: AnalystStore, w: WindowRecord) -> int:
        f = self._flow
        try:
            res = self.process_window(store, w)
        except WindowCarried as e:
            self._unwait(w.id)
            text = "window %d (group %s, %d readings) carried into the group's next window: %s" % (
                w.id, w.group, w.n, e)
            self.log("analyst: " + text)
            f.pending[w.group] = f.pending.get(w.group, 0) + store.carry_window(w.id, text, self.clock())
            if w.kind == "time":
                f.carried_end[w.group] = max(w.end, f.carried_end.get(w.group, w.end))
            else:
                f.carried_n[w.group] = w.n
            return 0
        except (RoundTimeout, msg.RoundError, RoundHeld) as e:
            if self._stop.is_set():
                return 0
            g = w.group
            f.backoff[g] = min(self.params.retry_max, max(self.params.retry_min, 2 * f.backoff.get(g, 0.0)))
            f.retry_at[g] = self.clock() + f.backoff[g]
            # The rounds actually started (a hold before any round, e.g. without a profile, made none),
            # as the window's record counts them and the dashboard shows them.
            now_w = store.window_record(w.id)
            made = now_w.attempts if now_w is not None else w.attempts
            text = ("window %d (group %s, %d readings) held after %d round attempt%s: %s; retrying in %.0f s"
                    % (w.id, g, w.n, made, "" if made == 1 else "s", e, f.backoff[g]))
            self.log("analyst: " + text)
            store.hold_window(w.id, str(e), self.clock(), text)
            return 0
        self._unwait(w.id)
        f.backoff.pop(w.group, None)
        f.retry_at.pop(w.group, None)
        late = ", verdict %.1f s after close" % (self.clock() - w.closed_at) if w.kind == "time" else ""
        how = ("no round: O' holds about the expected share of outliers" if res["skipped"]
               else "mode %s round %.2f s" % (res["mode"], res["round_s"]))
        self.log("analyst: window %d (group %s%s): %d readings, %d presumed outliers, %d false positives removed, "
                 "%d false negatives added -> %d candidates (detect %.1f s, %s%s)"
                 % (w.id, w.group, ", " + iso_time(w.start) + " to " + iso_time(w.end) if w.kind == "time" else "",
                    res["n"], res["presumed"], res["fp"], res["fn"], res["candidates"], res["detect_s"],
                    how, late))
        return 1

    def _finished(self, now: float, flush_idle: float) -> bool:
        f = self._flow
        if f.seen == 0 or f.waiting or any(now - t < flush_idle for t in f.arrived.values()):
            return False
        left = sum(f.pending.values())
        if any(n >= self.params.floor and n > f.carried_n.get(g, 0) for g, n in f.pending.items()):
            return False
        if left:
            self.log("analyst: exiting with %d readings pending (fewer than the minimum window); the next run "
                     "carries them" % left)
        return True
