"""The correction server's side of a round: lines 3 and 5 of the correction protocol (Böhler et al. 2017, Sect. 6), or mode bands, over MQTT.

It holds (token, d_diff) pairs in its own store and answers the analyst's round
messages in the one mode it runs (``paper``, ``bands`` or ``secure``). A window row whose
correction record has not arrived is left out of every decision: a presumed outlier
without d_diff stays a true positive (the paper never drops a true positive without
evidence), such a row is never proposed as a false negative, and in mode bands it is
returned as unknown so that the analyst keeps its own verdict.

The server may start before its parameters are known (no profile yet: w_O for mode paper,
the normal radius for modes bands and secure): it stores correction records from the start and answers
a round with an error until its parameters resolve, so the analyst holds the window and
retries. Its round subscription is a clean session: a round sent while the server was down
is not queued for it (the analyst retries it under a new round id), so a restarted server
never works through a backlog of abandoned rounds.

Several servers may answer rounds in mode bands (one message per round, no state kept between
messages): with ``share`` they form one MQTT shared subscription, and each round reaches one
of them (docs/scale-out.md). A round sent to a server that dies unanswered times out at the
analyst, which retries it under a new round id.
"""
from __future__ import annotations

import base64
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud import topics
from dpsense.cloud.correction import fragments
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.bands import Bands, band_candidates, lower_edges
from dpsense.cloud.correction.rules import CorrectionParams, RowReduction, Split, false_negatives, split_presumed
from dpsense.cloud.correction.secure import BITS, Garbler
from dpsense.cloud.errors import UsageError
from dpsense.cloud.ingest.service import Connection, shared_filter
from dpsense.cloud.session import Session


@dataclass
class _Round:
    d_known: np.ndarray          # d_diff of the rows that have one
    known: np.ndarray            # their window positions
    n: int
    presumed: np.ndarray         # window positions
    split: Split                 # in positions of the known subset
    missing: int
    started: float = field(default_factory=time.monotonic)


def check_mode(mode: str, params: CorrectionParams) -> None:
    """A server configured for ``mode`` with ``params`` can answer its rounds (UsageError, a
    ValueError, if not)."""
    if mode not in msg.MODES:
        raise UsageError("correction mode must be one of %s, got %r" % (msg.MODES, mode))
    if mode in ("bands", "secure") and not params.normal_radius > 0:
        raise UsageError("correction mode %s needs a normal radius > 0" % mode)


class CorrectionRounds:
    """Pure round logic: feed decoded messages, get replies. No I/O."""

    def __init__(self, params: CorrectionParams, lookup: Callable[[list[bytes]], dict[bytes, int]],
                 grace: float = 5.0, mode: str = "paper") -> None:
        check_mode(mode, params)
        self.params = params
        self.lookup = lookup
        self.grace = grace
        self.mode = mode
        self._rounds: dict[int, _Round] = {}
        self._secure: dict[int, tuple[float, Garbler]] = {}

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
        except msg.RoundError as e:
            return msg.encode("error", rid, reason=str(e))
        return None

    def _presumed(self, rid: int, body: dict[str, Any]) -> bytes:
        tokens = msg.tokens_of(body)
        n = len(tokens)
        presumed = msg.positions(body, "presumed", n)
        found = self._lookup_all(tokens)
        known = np.array([i for i, t in enumerate(tokens) if t in found], dtype=np.intp)
        d_known = np.array([found[tokens[i]] for i in known], dtype=float)
        # Positions of O' within the known subset.
        where = np.full(n, -1, dtype=np.intp)
        where[known] = np.arange(known.size)
        p_sub = where[presumed]
        p_sub = p_sub[p_sub >= 0]
        split = split_presumed(d_known, p_sub, self.params)
        self._rounds[rid] = _Round(d_known, known, n, presumed, split, n - known.size)
        self._forget_old()
        return msg.encode("split", rid, d_tp=split.d_tp, w_o=self.params.w_o)

    def _rows(self, rid: int, body: dict[str, Any]) -> bytes:
        r = self._rounds.pop(rid, None)
        if r is None:
            raise msg.RoundError("round %d has no split (restarted server?); resend presumed" % rid)
        where = np.full(r.n, -1, dtype=np.intp)
        where[r.known] = np.arange(r.known.size)

        def sub(key: str) -> np.ndarray:
            p = where[msg.positions(body, key, r.n)]
            return p[p >= 0]

        rows = RowReduction(i_l2=sub("i_l2"), i_l3=sub("i_l3"))
        p_sub = where[r.presumed]
        p_sub = p_sub[p_sub >= 0]
        fn = false_negatives(r.d_known, p_sub, rows, r.split, self.params)
        fp = r.known[r.split.fp]
        layers = [r.known[x] for x in (fn.l1, fn.l2, fn.l3)]
        fn_all = np.union1d(np.union1d(layers[0], layers[1]), layers[2])
        return msg.encode("result", rid, fp=fp, fn=fn_all, fn_l1=len(layers[0]), fn_l2=len(layers[1]),
                          fn_l3=len(layers[2]), missing=r.missing, split_accepted=bool(r.split.accepted))

    def _bands(self, rid: int, body: dict[str, Any]) -> bytes:
        tokens = msg.tokens_of(body)
        n = len(tokens)
        width, edges, sets = msg.bands_of(body, n)
        try:
            lower = lower_edges(n, Bands(edges=np.asarray(edges), members=sets, width=width))
        except ValueError as e:
            raise msg.RoundError(str(e)) from None
        found = self._lookup_all(tokens)
        known = np.array([i for i, t in enumerate(tokens) if t in found], dtype=np.intp)
        d_known = np.array([found[tokens[i]] for i in known], dtype=float)
        r = known[band_candidates(d_known, lower[known], self.params.normal_radius)]
        unknown = np.setdiff1d(np.arange(n, dtype=np.intp), known)
        return msg.encode("result", rid, r=r, unknown=unknown, missing=int(unknown.size))

    def _secure_open(self, rid: int, body: dict[str, Any]) -> bytes:
        """Mode secure, step 1: look up d_diff, answer A's base-OT element with the 128 replies."""
        tokens = msg.tokens_of(body)
        n = len(tokens)
        if len(set(tokens)) != n:
            # One token at many chosen distances would bisect its d_diff in a single round.
            raise msg.RoundError("a token appears more than once in the window")
        if body.get("bits") != BITS:
            raise msg.RoundError("mode secure compares %d-bit values, the analyst sent bits=%r" % (BITS, body.get("bits")))
        try:
            a_pub = base64.b64decode(body.get("a", ""), validate=True)
        except (ValueError, TypeError) as e:
            raise msg.RoundError("bad base-OT element: %s" % e) from None
        found = self._lookup_all(tokens)
        known = np.array([i for i, t in enumerate(tokens) if t in found], dtype=np.intp)
        d_known = np.array([found[tokens[i]] for i in known], dtype=float)
        try:
            garbler = Garbler(d_known, known, n, self.params.normal_radius)
            replies = garbler.base_reply(a_pub)
        except ValueError as e:
            raise msg.RoundError(str(e)) from None
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
    """

    def __init__(self, conn: Connection, params: CorrectionParams | Callable[[], CorrectionParams | None],
                 open_store: Callable[[], Any], log: Callable[[str], None] | None = None,
                 mode: str = "paper", waiting: str = "its parameters are not known yet",
                 share: str | None = None) -> None:
        if share is not None and mode != "bands":
            # A paper round is two messages (presumed, rows) whose state lives in one server.
            raise UsageError("correction servers share rounds in mode bands only: a mode %s round is two "
                             "messages that must reach the same server (run one for rounds; scale the "
                             "ingest with `dpsense ingest --role correction --worker N`)" % mode)
        self._round_filter = shared_filter(share, topics.ROUND_TO_CS)
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
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self._q: queue.Queue[bytes] = queue.Queue()
        self.session = Session(conn, "correction server", self.log)
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=conn.client_id, clean_session=True,
                        protocol=mqtt.MQTTv311)
        c.reconnect_delay_set(1, 5)
        conn.apply(c)
        c.on_connect = self._on_connect
        c.on_disconnect = lambda cl, u, flags, reason, props: self.session.lost(reason)
        self._reassembler = fragments.Reassembler()
        c.on_message = self._on_message
        c.on_subscribe = lambda cl, u, mid, codes, props: self.log(
            "correction server: subscribed to %s" % self._round_filter)
        self._client = c
        self.rounds_done = 0

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if self.session.accepted(reason):
            client.subscribe(self._round_filter, qos=1)

    def _on_message(self, client: mqtt.Client, userdata: Any, m: mqtt.MQTTMessage) -> None:
        whole = self._reassembler.feed(bytes(m.payload))
        if whole is not None:
            self._q.put(whole)

    def _rounds(self, lookup: Callable[[list[bytes]], dict[bytes, int]]) -> CorrectionRounds | None:
        """The round logic once the parameters are known (None until then)."""
        self.params = self._resolve()
        if self.params is None:
            return None
        check_mode(self.mode, self.params)
        self.log("correction server: mode %s, w_O = %g quanta, normal radius %g quanta; answering rounds"
                 % (self.mode, self.params.w_o, self.params.normal_radius))
        return CorrectionRounds(self.params, lookup, mode=self.mode)

    def run(self, stop: threading.Event) -> None:
        self.session.start(self._client)
        store = self.open_store()
        rounds: CorrectionRounds | None = None
        if self._resolve() is None:
            self.log("correction server: %s; storing correction records and refusing rounds until then"
                     % self.waiting)
        try:
            while not stop.is_set():
                try:
                    payload = self._q.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    body = msg.decode(payload)
                except msg.RoundError as e:
                    self.log("correction server: ignored round message: %s" % e)
                    continue
                if rounds is None:
                    rounds = self._rounds(store.lookup)
                    if rounds is None:
                        self.log("correction server: round %d refused: %s" % (body["round"], self.waiting))
                        self._client.publish(topics.ROUND_TO_ANALYST, msg.encode(
                            "error", body["round"], reason="the correction server refuses rounds: %s"
                            % self.waiting), qos=1)
                        continue
                reply = rounds.handle(body)
                if reply is not None:
                    fragments.publish(self._client.publish, topics.ROUND_TO_ANALYST, reply)
                    if body["step"] in ("rows", "bands", "secure-ext"):
                        self.rounds_done += 1
                        self.log("correction server: round %d answered" % body["round"])
        finally:
            store.close()
            self._client.disconnect()
            self._client.loop_stop()
