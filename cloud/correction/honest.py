"""What the correction server answers: honest rounds only, from noisy distance differences.

    policy = RoundPolicy(min_window=100, min_presumed=10)
    noise = RecordNoise(key, normal_radius=rho, epsilon=Fraction(1))
    ledger = RoundLedger(ledger_target(correction_db))   # the correction database

Two mechanisms, both on the correction server CS, protect the records from the analyst A.

1. **Noisy distance differences** (the privacy guarantee). CS never computes an answer from a
   record's d_diff, only from ``d~ = d_diff + Z`` where Z is discrete Laplace with scale
   ``Delta_A / epsilon_A``, ``Delta_A = ceil(rho)`` (rho: the normal radius in quanta). Z is
   a function of a secret key that only CS holds and of the record's token (HMAC-SHA256 of the
   token under the key, RFC 2104, drives the exact sampler of shared_protocol/noise.py), so a
   record has one d~ for ever: asking again, in any round or subset, returns functions of the
   same d~ and cannot average the noise away.

   Guarantee towards A, per record, on top of the released reading: A knows x', so d_diff
   depends on the raw reading x only through the rounded ``|x - c|``; for two readings within
   rho of the centre c that differs by at most ``ceil(rho)``. Every answer (d_TP, FP, FN, R,
   the rows without a record are not derived from d_diff) is post-processing of the window's d~,
   so A's view after any number of rounds is ``epsilon_A``-DP for each reading within the normal
   ball, ``epsilon_A * ceil(R_dom) / ceil(rho)``-DP between any two readings of the domain
   (R_dom: the domain's largest distance from c). With the released values (sequential
   composition) the whole view is ``epsilon_row + epsilon_A`` between two readings of the normal
   box (each column within its normal range, ``|x_j - c_j| <= delta_j / 2``); within rho alone is
   not enough when the ranges differ, since the release separates readings far apart in a narrow
   column (cloud/privacy/analyst_view.py states any pair's bound).
   tests/statistical/test_round_view.py measures the ratio bound.

   The never-worse rules keep their guarantee up to the noise: the thresholds move by
   ``t = ceil(b ln(1/alpha))`` (``b`` the noise scale), so a normal reading is added with
   probability at most alpha per row (``P(Z <= -t) <= exp(-t/b)``), and the noise split
   removes a row with probability at most ``2 alpha`` per row. With the boards' own noise on
   d_diff (``epsilon_cs``, ``board_scale``) t covers the sum of both (margin.py).

2. **Honest rounds only** (the protocol). One round per window, over the window's whole token
   set as CS stores it: the opening message names the analyst's window id and the window's
   tokens; CS refuses (reply ``error`` with a ``code``; each refusal is logged and counted in
   the ledger that ``dpsense status`` reads)

   * ``no_window``: no window id;
   * ``small_window``: fewer than ``min_window`` of the tokens have a correction record at CS
     (a single-token or padded round);
   * ``small_presumed``: mode paper, fewer than ``min_presumed`` rows of O' have a record;
   * ``subset``: the window id was answered over another token set that shares tokens with this
     one (a fresh token set under a known id is a new window: the analyst's store started again);
   * ``overlap``: a token was already answered in another window (a repeated window, or a
     subset of one under a new id);
   * ``repeated``: the same window asked again with other index sets (O', I_L2/I_L3, bands).

   A retry of a window with the same tokens and the same index sets is answered again (the
   same answer: d~ is fixed), so a lost reply does not block a window. A round whose window
   still lacks correction records is refused with ``missing`` and pins nothing, unless the
   analyst marks it ``final`` (its hold time is over); then it is answered over the tokens that
   have a record. A malicious analyst may still cut fresh tokens into disjoint sets of
   ``min_window``: that is an honest-looking window, and its answers stay within the bound of 1.

   The ledger is bound to CS's noise key and its answers' parameters (binding.py): a server with
   others refuses to start; ``rotate`` takes new ones and closes every window answered before.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpsense.cloud.correction.binding import check
from dpsense.cloud.correction.binding import encode as _encode
from dpsense.cloud.correction.binding import fingerprint as _fingerprint
from dpsense.cloud.correction.margin import margin
from dpsense.cloud.errors import RoundError, StorageUnavailable, UsageError
from dpsense.cloud.deploy.files import write_private
from dpsense.protocol.noise import DiscreteLaplace, scale_for

CODES = ("no_window", "small_window", "small_presumed", "subset", "overlap", "repeated", "missing")
#: Refusals after which the analyst completes the window without a correction (R = O').
UNCORRECTED = ("small_window", "small_presumed")
KEY_SIZE = 32
#: The mode of a window answered under an earlier noise key or parameters (RoundLedger.rotate).
CLOSED = "closed"


class Refused(RoundError):
    """CS will not answer this round; ``code`` is one of ``CODES``."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


@dataclass(frozen=True)
class RoundPolicy:
    """The smallest round CS answers: ``min_window`` tokens with a record, of which at least
    ``min_presumed`` are in O' (mode paper)."""

    min_window: int = 100
    min_presumed: int = 10

    def __post_init__(self) -> None:
        for name in ("min_window", "min_presumed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise UsageError("%s must be an int, got %r" % (name, v))
        if self.min_window < 2:
            raise UsageError("the minimum window must be at least 2 tokens, got %d" % self.min_window)
        if not 1 <= self.min_presumed <= self.min_window:
            raise UsageError("the minimum presumed set must be in [1, %d], got %d"
                             % (self.min_window, self.min_presumed))


def parse_epsilon(text: str | float | Fraction) -> Fraction:
    """A positive finite epsilon (``"1"``, ``"0.5"``, ``"1/2"``) as an exact fraction."""
    try:
        eps = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        raise UsageError("epsilon must be a number like 1, 0.5 or 1/2, got %r" % (text,)) from None
    if not 0 < eps <= 100:
        raise UsageError("epsilon must be in (0, 100], got %s" % text)
    return eps


class _KeyedBits:
    """``getrandbits(k)`` from HMAC-SHA256(key, token || counter) blocks: one fixed stream per token."""

    def __init__(self, key: bytes, token: bytes) -> None:
        self._mac = hmac.new(key, token, hashlib.sha256)
        self._ctr = 0
        self._bits = 0
        self._have = 0

    def getrandbits(self, k: int) -> int:
        while self._have < k:
            m = self._mac.copy()
            m.update(self._ctr.to_bytes(4, "big"))
            self._ctr += 1
            self._bits |= int.from_bytes(m.digest(), "big") << self._have
            self._have += 256
        v = self._bits & ((1 << k) - 1)
        self._bits >>= k
        self._have -= k
        return v


class RecordNoise:
    """Discrete Laplace noise per record, ``Delta_A / epsilon`` with ``Delta_A = ceil(rho)``,
    fixed by ``key`` and the record's token (module docstring, 1)."""

    def __init__(self, key: bytes, normal_radius: float, epsilon: Fraction, board_scale: float = 0.0) -> None:
        if not isinstance(key, bytes) or len(key) < 16:
            raise UsageError("the noise key must be at least 16 bytes")
        if not (math.isfinite(normal_radius) and normal_radius > 0):
            raise UsageError("the normal radius must be finite and > 0 quanta, got %r" % (normal_radius,))
        self.epsilon = parse_epsilon(epsilon)
        self.delta_q = max(1, math.ceil(normal_radius))
        self._num, self._den = scale_for(self.delta_q, self.epsilon.numerator, self.epsilon.denominator)
        self.scale = self._num / self._den
        # The boards' own noise on d_diff (epsilon_cs), which the margin must cover as well.
        self.board_scale = float(board_scale)
        self._key = key
        self._cache: dict[bytes, int] = {}

    def noise(self, token: bytes) -> int:
        z = self._cache.get(token)
        if z is None:
            z = DiscreteLaplace(self._num, self._den, _KeyedBits(self._key, bytes(token))).sample()
            if len(self._cache) > 2_000_000:
                self._cache.clear()
            self._cache[token] = z
        return z

    def noisy(self, tokens: list[bytes], d_diff: np.ndarray) -> np.ndarray:
        """``d_diff + Z`` for the records of ``tokens`` (same order)."""
        return np.asarray(d_diff, dtype=float) + np.array([self.noise(t) for t in tokens], dtype=float)

    def margin(self, alpha: float) -> float:
        """t with ``P(Z <= -t) <= alpha`` (and ``P(Z >= t) <= alpha``) for Z this noise plus the
        boards' (margin.py): ``ceil(b ln(1/alpha))`` when the boards add none."""
        return margin(self.scale, self.board_scale, alpha)


def load_key(path: Path) -> bytes:
    """The server's noise key at ``path`` (0600), made on first use."""
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = os.urandom(KEY_SIZE)
        write_private(path, key)
    except OSError as e:
        raise UsageError("cannot read the correction server's noise key %s: %s" % (path, e)) from None
    if len(key) != KEY_SIZE:
        raise UsageError("the correction server's noise key %s is damaged (%d bytes, not %d); restore it "
                         "from a backup: a new key would give every stored record fresh noise"
                         % (path, len(key), KEY_SIZE))
    return key


def digest(*parts: object) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else repr(p).encode()
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.digest()


_LEDGER_SCHEMA_LOCK = 0x6470_7365_0000_0010    # advisory lock key: "dpse" + a number (storage/postgres.py)
_TABLES = (
    # window_id: "window" is a reserved word in PostgreSQL.
    ("dpsense_round_windows", "window_id {int} PRIMARY KEY, mode text NOT NULL, tokens {blob} NOT NULL, "
     "request {blob} NOT NULL, rows {blob}, answered_at {real} NOT NULL, retries {int} NOT NULL DEFAULT 0"),
    ("dpsense_round_used", "token {blob} PRIMARY KEY, window_id {int} NOT NULL"),
    ("dpsense_round_meta", "name text PRIMARY KEY, value {blob} NOT NULL"),
    ("dpsense_round_refusals", "code text PRIMARY KEY, n {int} NOT NULL, last_at {real} NOT NULL, "
     "last_text text NOT NULL"),
    # One row per round id being answered: the server that inserts it answers the round.
    ("dpsense_round_claims", "round_id {int} PRIMARY KEY, owner text NOT NULL, at {real} NOT NULL"),
)
_TYPES = {"sqlite": {"int": "INTEGER", "blob": "BLOB", "real": "REAL"},
          "postgresql": {"int": "bigint", "blob": "bytea", "real": "double precision"}}
#: Claims older than this are deleted: CS forgets an unfinished round after 600 s anyway.
CLAIM_AGE = 3600.0


def ledger_target(correction_db: str) -> str:
    """Where the round ledger of the correction store ``correction_db`` lives: the same database
    (its SQLite file, or its PostgreSQL database, shared by every correction-server worker)."""
    from dpsense.cloud.storage import _parse
    scheme, target = _parse(correction_db)
    return target if scheme == "sqlite" else correction_db


class RoundLedger:
    """Which windows CS answered, over which tokens, every refusal, and which server answers
    which round id: tables ``dpsense_round_*`` in the correction database (SQLite file, or
    PostgreSQL shared by every correction-server worker; ``":memory:"`` for tests).

    Every check-and-record is one transaction whose primary keys decide a race between two
    workers: a window id and a token are recorded once, and ``answered`` refuses (``repeated``,
    ``overlap``) what a concurrent worker recorded first.
    """

    def __init__(self, target: Path | str = ":memory:") -> None:
        self._lock = threading.Lock()
        self.shared = str(target).startswith(("postgresql://", "postgres://"))
        self._target = str(target)
        self._broken = False                # the PostgreSQL connection was lost: reconnect first
        if self.shared:
            import psycopg
            try:
                self._db: Any = psycopg.connect(str(target))
            except psycopg.Error as e:
                raise UsageError("cannot open the round ledger in %s: %s" % (_redact(str(target)), e)) from None
            types = _TYPES["postgresql"]
        else:
            if str(target) != ":memory:" and not Path(target).exists():
                write_private(Path(target), b"")
            self._db = sqlite3.connect(str(target), check_same_thread=False, timeout=30)
            # WAL without a sync per round: a power cut may forget the last answered window, which
            # the bound of 1 does not rest on (its noise is fixed per record).
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            types = _TYPES["sqlite"]
        with self._lock:
            if self.shared:
                # Correction servers started together: CREATE TABLE IF NOT EXISTS is not atomic in
                # PostgreSQL (the second may fail on the catalog), so they take turns.
                self._x("SELECT pg_advisory_xact_lock(?)", (_LEDGER_SCHEMA_LOCK,))
            for name, cols in _TABLES:
                self._x("CREATE TABLE IF NOT EXISTS %s (%s)" % (name, cols.format(**types)))
            self._db.commit()

    def _x(self, sql: str, args: tuple[Any, ...] | list[Any] = ()) -> Any:
        """One statement; ``?`` placeholders become ``%s`` for psycopg. A lost PostgreSQL
        connection (a server restart) is ``StorageUnavailable``: the transaction is gone, nothing
        of it was recorded, and the next call opens a new connection."""
        if self.shared:
            import psycopg
            if self._broken or self._db.closed:
                self._reconnect()
            try:
                cur = self._db.cursor()
                cur.execute(sql.replace("?", "%s"), args)
                return cur
            except psycopg.OperationalError as e:
                self._broken = True
                raise StorageUnavailable("the round ledger in %s is unavailable: %s"
                                         % (_redact(self._target), e)) from None
        return self._db.execute(sql, args)

    def _reconnect(self) -> None:
        import psycopg
        try:
            self._db.close()
        except psycopg.Error:
            pass
        try:
            self._db = psycopg.connect(self._target)
        except psycopg.Error as e:
            raise StorageUnavailable("the round ledger in %s is unavailable: %s" % (_redact(self._target), e)) from None
        self._broken = False

    def _commit(self) -> None:
        if self.shared:
            import psycopg
            try:
                self._db.commit()
            except psycopg.OperationalError as e:
                self._broken = True
                raise StorageUnavailable("the round ledger in %s is unavailable: %s"
                                         % (_redact(self._target), e)) from None
            return
        self._db.commit()

    def _rollback(self) -> None:
        if self.shared:
            import psycopg
            try:
                self._db.rollback()
            except psycopg.OperationalError:
                self._broken = True         # nothing to roll back on a connection that is gone
            return
        self._db.rollback()

    def close(self) -> None:
        self._db.close()

    def bind_key(self, key: bytes, params: dict[str, str] | None = None) -> None:
        """Refuse (UsageError) a noise key, or parameters (``answer_parameters``), other than the
        ones the ledger's answers were made with: either would answer an answered window again
        from new noise, a second view of its records. ``params`` None checks the key only."""
        fp = _fingerprint(key)
        with self._lock:
            try:
                for name, value in (("key", fp), ("params", _encode(params))):
                    if value is not None:
                        self._x("INSERT INTO dpsense_round_meta (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                (name, value))
                rows = dict(self._x("SELECT name, value FROM dpsense_round_meta").fetchall())
                self._commit()
            except BaseException:
                self._rollback()
                raise
        check(rows, fp, params)

    def rotate(self, key: bytes, params: dict[str, str] | None) -> None:
        """Bind the ledger to a new noise key and parameters. Every answered window is closed (a
        retry is refused ``repeated``) and its tokens stay used (refused ``overlap``), so no record
        answered under the old key or parameters is answered again."""
        with self._lock:
            try:
                self._x("UPDATE dpsense_round_windows SET mode = ?", (CLOSED,))
                self._x("DELETE FROM dpsense_round_meta WHERE name IN ('key', 'params')")
                self._x("INSERT INTO dpsense_round_meta (name, value) VALUES ('key', ?)", (_fingerprint(key),))
                if params is not None:
                    self._x("INSERT INTO dpsense_round_meta (name, value) VALUES ('params', ?)", (_encode(params),))
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def claim(self, round_id: int, owner: str) -> bool:
        """True when ``owner`` answers round ``round_id`` (it claimed it now or before), False when
        another correction-server worker did: every worker receives every round message."""
        now = time.time()
        with self._lock:
            try:
                self._x("DELETE FROM dpsense_round_claims WHERE at < ?", (now - CLAIM_AGE,))
                self._x("INSERT INTO dpsense_round_claims (round_id, owner, at) VALUES (?, ?, ?) "
                        "ON CONFLICT DO NOTHING", (round_id, owner, now))
                row = self._x("SELECT owner FROM dpsense_round_claims WHERE round_id = ?", (round_id,)).fetchone()
                self._commit()
            except BaseException:
                self._rollback()
                raise
        return row is not None and row[0] == owner

    def opening(self, window: int, mode: str, tokens: list[bytes], request: bytes) -> bool:
        """Check an opening message; True for a retry of an answered window, False for a new one."""
        tdig = digest(*sorted(tokens))
        with self._lock:
            try:
                retry = self._check(window, mode, tokens, tdig, request)
                self._commit()
            except BaseException:
                self._rollback()
                raise
        return retry

    def _check(self, window: int, mode: str, tokens: list[bytes], tdig: bytes, request: bytes) -> bool:
        row = self._x("SELECT mode, tokens, request FROM dpsense_round_windows WHERE window_id = ?",
                      (window,)).fetchone()
        if row is not None and bytes(row[1]) == tdig and row[0] == CLOSED:
            raise Refused("repeated", "window %d was answered under an earlier noise key or other parameters; "
                          "it is not answered again" % window)
        if row is not None and bytes(row[1]) == tdig and row[0] == mode:
            if bytes(row[2]) != request:
                raise Refused("repeated", "window %d was answered already; a second round with other index "
                              "sets is refused" % window)
            self._x("UPDATE dpsense_round_windows SET retries = retries + 1 WHERE window_id = ?", (window,))
            return True
        hit = self._overlap(tokens, None)
        if row is not None and hit is not None:
            raise Refused("subset", "window %d was answered over another token set; a window is asked "
                          "once, whole" % window)
        if row is not None:
            # Only fresh tokens under a known id: the analyst's store started again, a new window.
            self._x("DELETE FROM dpsense_round_windows WHERE window_id = ?", (window,))
        if hit is not None:
            raise Refused("overlap", "%d of the %d tokens were answered in window %d already; each record is "
                          "in one round" % (hit[0], len(tokens), hit[1]))
        return False

    def _overlap(self, tokens: list[bytes], other_than: int | None) -> tuple[int, int] | None:
        n, first = 0, -1
        for i in range(0, len(tokens), 500):
            part = tokens[i:i + 500]
            q = ("SELECT count(*), min(window_id) FROM dpsense_round_used WHERE token IN (%s)"
                 % ",".join("?" * len(part)))
            args: list[Any] = list(part)
            if other_than is not None:
                q += " AND window_id <> ?"
                args.append(other_than)
            c, w = self._x(q, args).fetchone()
            if c:
                n += int(c)
                first = int(w) if first < 0 else min(first, int(w))
        return (n, first) if n else None

    def answered(self, window: int, mode: str, tokens: list[bytes], request: bytes, used: list[bytes]) -> None:
        """Pin ``window`` to its token set and mark ``used`` (the tokens answered) consumed; refuses
        what another worker recorded for the same window or tokens in the meantime."""
        tdig = digest(*sorted(tokens))
        with self._lock:
            try:
                self._x("INSERT INTO dpsense_round_windows (window_id, mode, tokens, request, answered_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", (window, mode, tdig, request, time.time()))
                row = self._x("SELECT mode, tokens, request FROM dpsense_round_windows WHERE window_id = ?",
                              (window,)).fetchone()
                if (row[0], bytes(row[1]), bytes(row[2])) != (mode, tdig, request):
                    raise Refused("repeated", "window %d was answered by another correction server meanwhile "
                                  "with other index sets" % window)
                for i in range(0, len(used), 500):
                    part = [(t, window) for t in used[i:i + 500]]
                    if self.shared:
                        self._db.cursor().executemany("INSERT INTO dpsense_round_used (token, window_id) "
                                                      "VALUES (%s, %s) ON CONFLICT DO NOTHING", part)
                    else:
                        self._db.executemany("INSERT INTO dpsense_round_used (token, window_id) VALUES (?, ?) "
                                             "ON CONFLICT DO NOTHING", part)
                hit = self._overlap(used, window)
                if hit is not None:
                    raise Refused("overlap", "%d of the %d tokens were answered in window %d meanwhile; each "
                                  "record is in one round" % (hit[0], len(tokens), hit[1]))
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def rows(self, window: int, request: bytes) -> None:
        """Mode paper, line 4's index sets: one set of I_L2/I_L3 per window (a retry repeats it)."""
        with self._lock:
            try:
                row = self._x("SELECT rows FROM dpsense_round_windows WHERE window_id = ?", (window,)).fetchone()
                if row is None:
                    raise Refused("repeated", "window %d has no answered split" % window)
                if row[0] is not None and bytes(row[0]) != request:
                    raise Refused("repeated", "window %d got its result already; other index sets are refused"
                                  % window)
                self._x("UPDATE dpsense_round_windows SET rows = ? WHERE window_id = ?", (request, window))
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def refused(self, code: str, text: str) -> None:
        with self._lock:
            try:
                self._x("INSERT INTO dpsense_round_refusals (code, n, last_at, last_text) VALUES (?, 1, ?, ?) "
                        "ON CONFLICT (code) DO UPDATE SET n = dpsense_round_refusals.n + 1, "
                        "last_at = excluded.last_at, last_text = excluded.last_text", (code, time.time(), text))
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def counts(self) -> dict[str, int]:
        """``answered``, ``retries`` and one entry per refusal code seen."""
        with self._lock:
            try:
                a, r = self._x("SELECT count(*), coalesce(sum(retries), 0) FROM dpsense_round_windows").fetchone()
                out = {"answered": int(a), "retries": int(r)}
                for code, n in self._x("SELECT code, n FROM dpsense_round_refusals ORDER BY code").fetchall():
                    out[code] = int(n)
            finally:
                self._rollback()
        return out



def _redact(url: str) -> str:
    """``url`` as the stores name it in messages (without its password)."""
    from dpsense.cloud.storage.postgres import _describe
    return _describe(url)
