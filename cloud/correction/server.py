"""The correction server's side of a round: lines 3 and 5 of the correction protocol (Böhler et al. 2017, Sect. 6), mode bands or secure, over MQTT.

It holds (token, d_diff) pairs in its own store and answers the analyst's round
messages in the one mode it runs (``paper``, ``bands`` or ``secure``). A window row whose
correction record has not arrived is left out of every decision: a presumed outlier
without d_diff stays a true positive (the paper never drops a true positive without
evidence), such a row is never proposed as a false negative, and in mode bands it is
returned as unknown so that the analyst keeps its own verdict.

It answers only honest rounds (one per window, over the window's whole token set, at least
``RoundPolicy.min_window`` records) and computes every answer from noisy distance differences,
so that the analyst's view of a reading after a round is epsilon_A-DP (cloud/correction/honest.py
states the guarantee; tests/statistical/test_round_view.py measures it). Round messages travel
in chunks under the broker's packet limit (cloud/correction/chunks.py).

The server may start before its parameters are known (no profile yet: w_O and the normal
radius): it stores correction records from the start and answers
a round with an error until its parameters resolve, so the analyst holds the window and
retries. Its round subscription is a clean session: a round sent while the server was down
is not queued for it (the analyst retries it under a new round id), so a restarted server
never works through a backlog of abandoned rounds.

Several servers (``worker``) may answer rounds in every mode, sharing one correction database
(docs/scale-out.md). Each subscribes to the round topic itself, not as a shared subscription,
so that every chunk of a round reaches it; the first to claim the round id in the round ledger
(``RoundLedger.claim``: a primary key in the shared database) answers every step of it, the
others drop it. The ledger (answered windows, refusals) is the same database for all of them,
so "one round per window" holds across the workers. A round whose server dies unanswered
times out at the analyst, which retries it under a new round id.
"""
from __future__ import annotations

import base64
import math
import queue
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable, Protocol

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction import chunks
from dpsense.cloud.correction.bands import Bands, band_candidates, lower_edges
from dpsense.cloud.correction.binding import answer_parameters
from dpsense.cloud.correction.honest import RecordNoise, Refused, RoundLedger, RoundPolicy, digest, parse_epsilon
from dpsense.cloud.correction.rules import (
    CorrectionParams,
    RowReduction,
    Split,
    false_negatives,
    noise_split,
    noise_threshold,
    split_presumed,
)
from dpsense.cloud.correction.mpc.secure import BITS, MAX_MESSAGE, Garbler
from dpsense.cloud.errors import StorageUnavailable, UsageError
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.transport.session import Session


@dataclass
class _Round:
    window: int
    d_known: np.ndarray          # noisy d_diff (d~) of the rows that have a record
    known: np.ndarray            # their window positions
    n: int
    presumed: np.ndarray         # window positions
    split: Split                 # in positions of the known subset
    missing: int
    started: float = field(default_factory=time.monotonic)


class Noise(Protocol):
    """What the rounds need of the per-record noise (honest.RecordNoise)."""

    scale: float

    def noisy(self, tokens: list[bytes], d_diff: np.ndarray) -> np.ndarray: ...

    def margin(self, alpha: float) -> float: ...


def check_mode(mode: str, params: CorrectionParams) -> None:
    """A server configured for ``mode`` with ``params`` can answer its rounds (UsageError, a
    ValueError, if not). Every mode needs the normal radius: the noise on d_diff is calibrated to it."""
    if mode not in msg.MODES:
        raise UsageError("correction mode must be one of %s, got %r" % (msg.MODES, mode))
    if not params.normal_radius > 0:
        raise UsageError("correction mode %s needs a normal radius > 0 (the noise on d_diff is calibrated to it)"
                         % mode)


class CorrectionRounds:
    """Pure round logic: feed decoded messages, get replies. No I/O but the round ledger.

    Answers are computed from ``noise.noisy(...)`` (honest.py) and only for honest rounds
    (``policy``, ``ledger``); a refusal is an ``error`` reply with a ``code``, logged and counted.
    """

    def __init__(self, params: CorrectionParams, lookup: Callable[[list[bytes]], dict[bytes, int]],
                 grace: float = 5.0, mode: str = "paper", *, noise: Noise, policy: RoundPolicy | None = None,
                 ledger: RoundLedger | None = None, log: Callable[[str], None] | None = None) -> None:
        check_mode(mode, params)
        self.params = params
        self.lookup = lookup
        self.grace = grace
        self.mode = mode
        self.noise = noise
        self.policy = policy or RoundPolicy()
        self.ledger = ledger or RoundLedger()
        self.log = log or (lambda s: None)
        self.refusals: dict[str, int] = {}
        self._rounds: dict[int, _Round] = {}
        self._secure: dict[int, tuple[float, Garbler]] = {}
        # Thresholds move by the noise's margin so that a row is misjudged by the noise with
        # probability at most alpha (honest.py, 1).
        t = noise.margin(params.alpha)
        self._shifted = replace(params, normal_radius=params.normal_radius + t)
        self._tau = (noise_threshold(params.noise_scale, params.columns, params.alpha / 2)
                     + noise.margin(params.alpha / 2)) if params.split == "noise" else math.nan

    def _lookup_all(self, tokens: list[bytes]) -> dict[bytes, int]:
        # Correction records travel separately from readings and may trail them a little.
        deadline = time.monotonic() + self.grace
        found = self.lookup(tokens)
        while len(found) < len(tokens) and time.monotonic() < deadline:
            time.sleep(0.2)
            found = self.lookup(tokens)
        return found

    def handle(self, body: dict[str, Any]) -> bytes | None:
        rid = body["round"]
        try:
            for mode, step in msg.OPENING.items():
                if body["step"] == step and mode != self.mode:
                    raise msg.RoundError("this correction server answers mode %r rounds only, not %r"
                                         % (self.mode, mode))
            if body["step"] == "presumed":
                return self._presumed(rid, body)
            if body["step"] == "rows":
                return self._rows(rid, body)
            if body["step"] == "bands":
                return self._bands(rid, body)
            if body["step"] == "secure-open":
                return self._secure_open(rid, body)
            if body["step"] == "secure-ext":
                return self._secure_ext(rid, body)
        except Refused as e:
            self.refusals[e.code] = self.refusals.get(e.code, 0) + 1
            self.ledger.refused(e.code, str(e))
            self.log("correction server: round %d refused (%s): %s" % (rid, e.code, e))
            return msg.encode("error", rid, reason=str(e), code=e.code)
        except msg.RoundError as e:
            return msg.encode("error", rid, reason=str(e))
        return None

    def _opening(self, body: dict[str, Any]) -> tuple[int, list[bytes], dict[bytes, int], np.ndarray]:
        """The window id, its tokens, their records and the positions that have one; refuses a
        window without an id, with a repeated token, lacking records (unless final) or too small."""
        window = body.get("window")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise Refused("no_window", "a round must name its window (an int >= 0)")
        tokens = msg.tokens_of(body)
        if len(set(tokens)) != len(tokens):
            raise Refused("subset", "the token list of window %d repeats a token" % window)
        found = self._lookup_all(tokens)
        known = np.array([i for i, t in enumerate(tokens) if t in found], dtype=np.intp)
        if known.size < len(tokens) and body.get("final") is not True:
            raise Refused("missing", "%d of %d readings have no correction record at the correction server yet"
                          % (len(tokens) - known.size, len(tokens)))
        if known.size < self.policy.min_window:
            raise Refused("small_window", "window %d has %d tokens with a correction record; rounds need at least %d"
                          % (window, known.size, self.policy.min_window))
        return window, tokens, found, known

    def _presumed(self, rid: int, body: dict[str, Any]) -> bytes:
        window, tokens, found, known = self._opening(body)
        n = len(tokens)
        presumed = msg.positions(body, "presumed", n)
        # Positions of O' within the known subset.
        where = np.full(n, -1, dtype=np.intp)
        where[known] = np.arange(known.size)
        p_sub = where[presumed]
        p_sub = p_sub[p_sub >= 0]
        if p_sub.size < self.policy.min_presumed:
            raise Refused("small_presumed", "window %d: %d presumed outliers with a correction record; rounds "
                          "need at least %d" % (window, p_sub.size, self.policy.min_presumed))
        request = digest("paper", *tokens, presumed.tobytes())
        self.ledger.opening(window, "paper", tokens, request)
        used = [tokens[i] for i in known]
        d_known = self.noise.noisy(used, np.array([found[t] for t in used], dtype=float))
        if self.params.split == "noise":
            split = noise_split(d_known, p_sub, self._tau)
        else:
            split = split_presumed(d_known, p_sub, self.params)
        self.ledger.answered(window, "paper", tokens, request, used)
        self._rounds[rid] = _Round(window, d_known, known, n, presumed, split, n - known.size)
        self._forget_old()
        return msg.encode("split", rid, d_tp=split.d_tp, w_o=self.params.w_o)

    def _rows(self, rid: int, body: dict[str, Any]) -> bytes:
        r = self._rounds.pop(rid, None)
        if r is None:
            raise msg.RoundError("round %d has no split (restarted server?); resend presumed" % rid)
        where = np.full(r.n, -1, dtype=np.intp)
        where[r.known] = np.arange(r.known.size)
        sets = {k: msg.positions(body, k, r.n) for k in ("i_l2", "i_l3")}
        self.ledger.rows(r.window, digest(sets["i_l2"].tobytes(), sets["i_l3"].tobytes()))

        def sub(key: str) -> np.ndarray:
            p = where[sets[key]]
            return p[p >= 0]

        rows = RowReduction(i_l2=sub("i_l2"), i_l3=sub("i_l3"))
        p_sub = where[r.presumed]
        p_sub = p_sub[p_sub >= 0]
        fn = false_negatives(r.d_known, p_sub, rows, r.split, self._shifted)
        fp = r.known[r.split.fp]
        layers = [r.known[x] for x in (fn.l1, fn.l2, fn.l3)]
        fn_all = np.union1d(np.union1d(layers[0], layers[1]), layers[2])
        return msg.encode("result", rid, fp=fp, fn=fn_all, fn_l1=len(layers[0]), fn_l2=len(layers[1]),
                          fn_l3=len(layers[2]), missing=r.missing, split_accepted=bool(r.split.accepted))

    def _bands(self, rid: int, body: dict[str, Any]) -> bytes:
        window, tokens, found, known = self._opening(body)
        n = len(tokens)
        width, edges, sets = msg.bands_of(body, n)
        try:
            lower = lower_edges(n, Bands(edges=np.asarray(edges), members=sets, width=width))
        except ValueError as e:
            raise msg.RoundError(str(e)) from None
        request = digest("bands", *tokens, width, lower.tobytes())
        self.ledger.opening(window, "bands", tokens, request)
        used = [tokens[i] for i in known]
        d_known = self.noise.noisy(used, np.array([found[t] for t in used], dtype=float))
        self.ledger.answered(window, "bands", tokens, request, used)
        r = known[band_candidates(d_known, lower[known], self._shifted.normal_radius)]
        unknown = np.setdiff1d(np.arange(n, dtype=np.intp), known)
        return msg.encode("result", rid, r=r, unknown=unknown, missing=int(unknown.size))

    def _secure_open(self, rid: int, body: dict[str, Any]) -> bytes:
        """Mode secure, step 1: the honest-round checks, the window's noisy d_diff as CS's input,
        and the 128 base-OT replies to A's element."""
        if body.get("bits") != BITS:
            raise msg.RoundError("mode secure compares %d-bit values, the analyst sent bits=%r" % (BITS, body.get("bits")))
        try:
            a_pub = base64.b64decode(body.get("a", ""), validate=True)
        except (ValueError, TypeError) as e:
            raise msg.RoundError("bad base-OT element: %s" % e) from None
        # _opening refuses a repeated token: one token at many chosen distances would bisect its
        # d~ in a single round.
        window, tokens, found, known = self._opening(body)
        n = len(tokens)
        # A's distances are hidden by the OTs, so the request names the tokens only: CS cannot
        # tell a retry from the same window asked with other distances (docs/privacy.md).
        request = digest("secure", *tokens)
        self.ledger.opening(window, "secure", tokens, request)
        used = [tokens[i] for i in known]
        d_known = self.noise.noisy(used, np.array([found[t] for t in used], dtype=float))
        try:
            garbler = Garbler(d_known, known, n, self._shifted.normal_radius)
            replies = garbler.base_reply(a_pub)
        except ValueError as e:
            raise msg.RoundError(str(e)) from None
        self.ledger.answered(window, "secure", tokens, request, used)
        self._secure[rid] = (time.monotonic(), garbler)
        self._forget_old()
        unknown = np.setdiff1d(np.arange(n, dtype=np.intp), known)
        return msg.encode_blob("secure-base", rid, replies, unknown=unknown, missing=int(unknown.size))

    def _secure_ext(self, rid: int, body: dict[str, Any]) -> bytes:
        """Mode secure, step 2: from A's IKNP matrix, the garbled comparison of every row."""
        entry = self._secure.pop(rid, None)
        if entry is None:
            raise msg.RoundError("round %d has no base OTs (restarted server?); start it again" % rid)
        blob = body.get("blob")
        if not isinstance(blob, bytes):
            raise msg.RoundError("secure-ext carries no IKNP matrix")
        try:
            return msg.encode_blob("secure-garbled", rid, entry[1].garble(blob))
        except ValueError as e:
            raise msg.RoundError(str(e)) from None

    def _forget_old(self, max_age: float = 600.0) -> None:
        now = time.monotonic()
        for rid in [k for k, v in self._rounds.items() if now - v.started > max_age]:
            del self._rounds[rid]
        for rid in [k for k, v in self._secure.items() if now - v[0] > max_age]:
            del self._secure[rid]


class CorrectionServer:
    """MQTT loop around ``CorrectionRounds``; its store is opened in the thread that uses it.

    ``params`` is fixed, or a function that returns them once they are known (None until then).
    ``noise_key`` and ``epsilon`` make the per-record noise (honest.RecordNoise) once the normal
    radius is known; ``ledger`` records answered windows and refusals. Round messages arrive and
    leave in chunks (chunks.py).
    """

    def __init__(self, conn: Connection, params: CorrectionParams | Callable[[], CorrectionParams | None],
                 open_store: Callable[[], Any], log: Callable[[str], None] | None = None,
                 mode: str = "paper", waiting: str = "its parameters are not known yet", *,
                 noise_key: bytes, epsilon: Fraction, policy: RoundPolicy | None = None,
                 ledger: Callable[[], RoundLedger] = RoundLedger, worker: str | None = None) -> None:
        if not callable(params):
            check_mode(mode, params)
        elif mode not in msg.MODES:
            raise UsageError("correction mode must be one of %s, got %r" % (msg.MODES, mode))
        self.conn = conn
        self._resolve = params if callable(params) else (lambda: params)
        self.params: CorrectionParams | None = None
        self.mode = mode
        self.waiting = waiting
        self.open_store = open_store
        self.noise_key = noise_key
        self.epsilon = parse_epsilon(epsilon)
        self.policy = policy or RoundPolicy()
        self._open_ledger = ledger
        # worker: this server is one of several sharing the correction database; it answers the
        # rounds it claims in the ledger (module docstring).
        self.worker = worker
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self._q: queue.Queue[bytes] = queue.Queue()
        # Mode secure's garbled comparison is about 2 KB per row, past chunks.MAX_MESSAGE for
        # windows above about 8,000 readings; its messages are bounded by secure.MAX_MESSAGE.
        self._joiner = chunks.Reassembler(max_bytes=MAX_MESSAGE if mode == "secure" else chunks.MAX_MESSAGE,
                                          timeout=600.0 if mode == "secure" else 60.0)
        self.session = Session(conn, "correction server", self.log)
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=conn.client_id, clean_session=True,
                        protocol=mqtt.MQTTv311)
        c.reconnect_delay_set(1, 5)
        conn.apply(c)
        c.on_connect = self._on_connect
        c.on_disconnect = lambda cl, u, flags, reason, props: self.session.lost(reason)
        c.on_message = lambda cl, u, m: self._q.put(bytes(m.payload))
        c.on_subscribe = lambda cl, u, mid, codes, props: self.log(
            "correction server: subscribed to %s%s" % (topics.ROUND_TO_CS, "" if worker is None else
                                                       " (worker %s: answers the rounds it claims)" % worker))
        self._client = c
        self.rounds_done = 0
        self.rounds_passed = 0          # rounds another worker claimed

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if self.session.accepted(reason):
            # Not a shared subscription even with workers: the chunks of one round must all reach
            # the server that answers it, and the ledger's claim picks that server.
            client.subscribe(topics.ROUND_TO_CS, qos=1)

    def _reply(self, payload: bytes) -> None:
        for part in chunks.split(payload):
            self._client.publish(topics.ROUND_TO_ANALYST, part, qos=1)

    def _rounds(self, lookup: Callable[[list[bytes]], dict[bytes, int]],
                ledger: RoundLedger) -> CorrectionRounds | None:
        """The round logic once the parameters are known (None until then)."""
        self.params = self._resolve()
        if self.params is None:
            return None
        check_mode(self.mode, self.params)
        noise = RecordNoise(self.noise_key, self.params.normal_radius, self.epsilon, self.params.board_noise_scale)
        # Other parameters than the ledger's stop the server (UsageError): a second view of answered windows.
        ledger.bind_key(self.noise_key, answer_parameters(self.mode, self.epsilon, noise.delta_q, self.params))
        self.log("correction server: mode %s, w_O = %g quanta, normal radius %g quanta; answering honest rounds "
                 "(at least %d tokens, %d presumed outliers) from d_diff with discrete Laplace noise of scale %g "
                 "quanta (epsilon %s towards the analyst per reading within the normal radius); thresholds moved "
                 "by %g quanta (the boards' noise on d_diff: scale %g quanta)"
                 % (self.mode, self.params.w_o, self.params.normal_radius, self.policy.min_window,
                    self.policy.min_presumed, noise.scale, self.epsilon, noise.margin(self.params.alpha),
                    noise.board_scale))
        return CorrectionRounds(self.params, lookup, mode=self.mode, noise=noise, policy=self.policy,
                                ledger=ledger, log=self.log)

    def run(self, stop: threading.Event) -> None:
        self.session.start(self._client)
        store = self.open_store()
        ledger = self._open_ledger()
        rounds: CorrectionRounds | None = None
        if self._resolve() is None:
            self.log("correction server: %s; storing correction records and refusing rounds until then"
                     % self.waiting)
        outage: float | None = None             # when the ledger or the store became unreachable
        try:
            while not stop.is_set():
                try:
                    part = self._q.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    payload = self._joiner.feed(part)
                    if payload is None:
                        continue
                    body = msg.decode(payload)
                except msg.RoundError as e:
                    self.log("correction server: ignored round message: %s" % e)
                    continue
                try:
                    if self.worker is not None and not ledger.claim(body["round"], self.worker):
                        self.rounds_passed += 1
                        continue
                    if rounds is None:
                        rounds = self._rounds(store.lookup, ledger)
                        if rounds is None:
                            self.log("correction server: round %d refused: %s" % (body["round"], self.waiting))
                            self._reply(msg.encode("error", body["round"], reason="the correction server refuses "
                                                   "rounds: %s" % self.waiting))
                            continue
                    reply = rounds.handle(body)
                except StorageUnavailable as e:
                    # The ledger or the store lost its database (a restart): nothing of this step
                    # was recorded, so nothing is answered (fail closed); the analyst holds the
                    # window and asks again, and the next step reconnects. Said once per outage.
                    if outage is None:
                        outage = time.monotonic()
                        self.log("correction server: storage unavailable (%s); answering no round until it "
                                 "is back" % e)
                    self._reply(msg.encode("error", body["round"], reason="the correction server's storage is "
                                           "unavailable; retry later"))
                    continue
                if outage is not None:
                    self.log("correction server: storage back after %.0f s" % (time.monotonic() - outage))
                    outage = None
                if reply is not None:
                    self._reply(reply)
                    if body["step"] in ("rows", "bands", "secure-ext") and msg.decode(reply)["step"] in (
                            "result", "secure-garbled"):
                        self.rounds_done += 1
                        self.log("correction server: round %d answered" % body["round"])
        finally:
            ledger.close()
            store.close()
            self._client.disconnect()
            self._client.loop_stop()
