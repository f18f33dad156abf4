"""The correction server's side of the sealed correction record (kind 3, docs/protocol.md).

    keys = KeyStore.for_data_dir(data_dir)        # <data_dir>/correction-keys/keys.json, 0600
    enc_mac = keys.add_device(7)                  # what `tools/flash.py provision` does
    ingest = SealedIngest(keys, ReplayGuard(keys.folder / "nonces.db"))
    ingest.classify(topic, payload, received_at)  # Correction or DeadLetter (with the reason)

Guarantee: towards the broker, a gateway and any subscriber of the corrections topic, a
kind-3 record hides its token and d_diff (AES-128-CTR) and cannot be altered or made up
(HMAC-SHA-256, 128-bit tag) without the device's keys, which only the board and this key
store hold. The clear header (device, boot, seq, nonce) is what the reading already
shows. The correction server learns which device a record comes from: it needs the
device to pick the key.

Verification uses ``cryptography`` (HMAC-SHA-256, AES-CTR; the tag compared in constant
time) and decrypts only after the tag checked. Replays: per device, the nonces accepted
within the last ``window`` below the highest are kept with a digest of their record. A
byte-identical resend is a duplicate (boards resend the same bytes); the same nonce with
other bytes, or a nonce ``window`` or more below the highest accepted, is a dead letter.
The guard's state is written after the batch's records are committed
(``SealedStore.add_batch``), so a crash in between loses no record; it can only forget
the nonces of that one batch.

A plain correction record (kind 2, which names its device in its clear header) is accepted
only from a device the key store lists as plaintext (``KeyStore.set_plaintext``): a device
with keys, or an unknown one, cannot be downgraded by sending the record in clear.

Each accepted record carries its header's ``(device, boot, seq)``, by which the ingest
acknowledges it to the board after the commit (cloud/ingest/acks.py); a forged or replayed
record is a dead letter and never acknowledged.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import struct
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import constant_time, hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from dpsense.cloud.transport import topics
from dpsense.cloud.errors import UsageError
from dpsense.cloud.deploy.files import folder_owner, private_dir, write_private
from dpsense.cloud.storage.repository import Correction, DeadLetter
from dpsense.protocol import seal, wire

KEY_DIR = "correction-keys"
KEY_FILE = "keys.json"
NONCE_FILE = "nonces.db"
WINDOW = 4096                   # nonces kept per device below the highest accepted


class SealedError(ValueError):
    """A sealed record that is refused; the text is the dead letter's reason."""


class BelowWindowError(SealedError):
    """A nonce the replay guard has forgotten (``WINDOW`` or more below the highest accepted):
    new bytes are a replay, but a late resend of a stored record is a duplicate (``SealedIngest``
    asks the store)."""


@dataclass(frozen=True)
class DeviceKeys:
    enc: bytes
    mac: bytes

    def __post_init__(self) -> None:
        if len(self.enc) != seal.ENC_KEY_SIZE or len(self.mac) != seal.MAC_KEY_SIZE:
            raise ValueError("device keys are %d + %d bytes" % (seal.ENC_KEY_SIZE, seal.MAC_KEY_SIZE))
        if self.enc == self.mac[:seal.ENC_KEY_SIZE]:
            raise ValueError("the encryption and MAC keys must be independent")

    def to_bytes(self) -> bytes:
        """The board's key file: enc || mac."""
        return self.enc + self.mac

    @cached_property
    def key_id(self) -> str:
        """Names this key pair in the replay guard: new keys (with a fresh ledger, whose
        counter starts again) start a new nonce history."""
        return hashlib.sha256(b"dpsense key id" + self.enc + self.mac).hexdigest()[:16]


@dataclass
class KeyStore:
    """Per-device keys and the plaintext switch, in one 0600 JSON file of the correction
    server's own folder (0700). Read again whenever the file changes, so a device
    provisioned while the server runs is known at its first record."""

    folder: Path
    _keys: dict[int, DeviceKeys] = field(default_factory=dict)
    _plaintext: set[int] = field(default_factory=set)
    _stamp: tuple[int, int] | None = None
    _checked: float = -1e9
    # Known devices look at the file at most this often; an unknown one at once.
    recheck_s: float = 1.0
    # (uid, gid) the folder and file are given when written (root provisioning for the
    # correction server's user); None: the writer's own.
    owner: tuple[int, int] | None = None

    @classmethod
    def for_data_dir(cls, data_dir: Path | str, owner: tuple[int, int] | None = None) -> "KeyStore":
        """The key store of the correction server's folder ``data_dir``; written by root, it goes
        to ``owner``, by default the folder's owner (the correction server's user)."""
        return cls(Path(data_dir) / KEY_DIR, owner=owner if owner is not None else folder_owner(data_dir))

    def check_readable(self) -> tuple[list[int], list[int]]:
        """What the correction server does at start: an empty store is created in a new folder;
        one it cannot read (owner, mode, damage) is a UsageError naming the file."""
        try:
            with open(self.path, "rb"):
                pass
        except FileNotFoundError:
            try:
                self._write()
            except OSError as e:
                raise UsageError("key store %s: cannot create it (%s)" % (self.path, e.strerror or e)) from None
        except OSError as e:
            try:
                uid: int | None = os.stat(self.path).st_uid
            except OSError:
                uid = None
            whose = ("; it belongs to uid %d, this service runs as uid %d (provisioning run as root: "
                     "--owner USER)" % (uid, os.geteuid())) if uid is not None and uid != os.geteuid() else ""
            raise UsageError("key store %s: cannot read it (%s)%s" % (self.path, e.strerror or e, whose)) from None
        self._stamp = None
        return self.devices()

    @property
    def path(self) -> Path:
        return self.folder / KEY_FILE

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._keys, self._plaintext, self._stamp = {}, set(), None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        if st.st_mode & 0o077:
            raise UsageError("key store %s: group or others may read it (chmod 600)" % self.path)
        try:
            doc = json.loads(self.path.read_text())
            keys = {int(d): DeviceKeys(bytes.fromhex(k["enc"]), bytes.fromhex(k["mac"]))
                    for d, k in doc.get("keys", {}).items()}
            plain = {int(d) for d in doc.get("plaintext", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UsageError("key store %s: unreadable (%s)" % (self.path, e)) from None
        self._keys, self._plaintext, self._stamp = keys, plain, stamp

    def keys_of(self, device_id: int, fresh: bool = False) -> DeviceKeys | None:
        """The device's keys; ``fresh``: read the file if it changed, however recently it was."""
        now = time.monotonic()
        if fresh or now - self._checked >= self.recheck_s or device_id not in self._keys:
            self._checked = now
            self._refresh()
        return self._keys.get(device_id)

    def is_plaintext(self, device_id: int) -> bool:
        self._refresh()
        return device_id in self._plaintext

    def devices(self) -> tuple[list[int], list[int]]:
        """``(sealed, plaintext)`` device ids, sorted."""
        self._refresh()
        return sorted(self._keys), sorted(self._plaintext)

    def _write(self) -> None:
        private_dir(self.folder)
        if self.owner is not None:
            os.chown(self.folder, *self.owner)
        doc = {"keys": {str(d): {"enc": k.enc.hex(), "mac": k.mac.hex()} for d, k in sorted(self._keys.items())},
               "plaintext": sorted(self._plaintext)}
        tmp = self.folder / (KEY_FILE + ".tmp")
        write_private(tmp, json.dumps(doc, indent=1))
        if self.owner is not None:
            os.chown(tmp, *self.owner)
        os.replace(tmp, self.path)
        self._stamp = None

    def add_device(self, device_id: int, keys: DeviceKeys | None = None) -> DeviceKeys:
        """New independent keys for ``device_id`` (from the OS CSPRNG), replacing any it had
        and its plaintext switch; the board gets ``to_bytes()`` with a fresh ledger."""
        if not 0 < device_id <= 0xFFFFFFFF:
            raise UsageError("device id must be in 1..2**32-1, got %d" % device_id)
        self._refresh()
        k = keys or DeviceKeys(secrets.token_bytes(seal.ENC_KEY_SIZE), secrets.token_bytes(seal.MAC_KEY_SIZE))
        self._keys[device_id] = k
        self._plaintext.discard(device_id)
        self._write()
        return k

    def remove_device(self, device_id: int) -> bool:
        """Forget ``device_id``'s keys and plaintext switch (a retired device); False if it had neither."""
        self._refresh()
        had = self._keys.pop(device_id, None) is not None or device_id in self._plaintext
        self._plaintext.discard(device_id)
        if had:
            self._write()
        return had

    def set_plaintext(self, device_id: int) -> None:
        """Accept plain (kind 2) correction records from ``device_id``, which then has no keys:
        for a board without AES (the micro:bit). Reported by `dpsense status`."""
        if not 0 < device_id <= 0xFFFFFFFF:
            raise UsageError("device id must be in 1..2**32-1, got %d" % device_id)
        self._refresh()
        self._keys.pop(device_id, None)
        self._plaintext.add(device_id)
        self._write()


def open_record(keys: DeviceKeys, payload: bytes, mac: hmac.HMAC | None = None
                ) -> tuple[int, int, int, int, bytes, int]:
    """``(device_id, boot_id, seq, nonce, token, d_diff)`` of a sealed record whose tag checks
    under ``keys``; SealedError otherwise. The tag is checked before anything is decrypted.
    ``mac``: an HMAC already keyed with ``keys.mac``, copied for this record (saves the keying)."""
    if len(payload) != seal.SEALED_SIZE:
        raise SealedError("sealed record must be %d bytes, got %d" % (seal.SEALED_SIZE, len(payload)))
    body_end = seal.HEAD_SIZE + seal.BODY_SIZE
    h = mac.copy() if mac is not None else hmac.HMAC(keys.mac, hashes.SHA256())
    h.update(payload[:body_end])
    if not constant_time.bytes_eq(h.finalize()[:seal.TAG_SIZE], payload[body_end:]):
        raise SealedError("forged or damaged: the tag does not match")
    version, kind, reserved, device_id, boot_id, seq, nonce = struct.unpack_from(seal.HEAD, payload, 0)
    if reserved != 0:
        raise SealedError("reserved field must be 0, got %d" % reserved)
    dec = Cipher(algorithms.AES(keys.enc), modes.CTR(seal.counter_block(device_id, nonce))).decryptor()
    token, d_diff = struct.unpack(seal.BODY, dec.update(payload[seal.HEAD_SIZE:body_end]) + dec.finalize())
    if d_diff == wire.INT32_MIN:
        raise SealedError("d_diff -2**31 is reserved")
    return device_id, boot_id, seq, nonce, token, d_diff


class _History:
    """One device's (and key pair's) accepted nonces: the highest, and an 8-byte digest of
    each record within ``window`` below it, in a ring indexed by nonce (zero: none)."""

    __slots__ = ("high", "ring")

    def __init__(self, window: int) -> None:
        self.high = -1
        self.ring = bytearray(8 * window)


class ReplayGuard:
    """Per device and key pair: the highest nonce accepted and the digests of the records
    within ``window`` below it (8 x ``window`` bytes of RAM per device); in SQLite at
    ``path`` (None: memory only). ``check`` stages, ``commit`` writes."""

    def __init__(self, path: Path | str | None = None, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._dev: dict[str, _History] = {}
        self._staged: list[tuple[str, int, bytes]] = []
        self._writes: dict[str, int] = {}       # rows written per device since its last pruning
        self._db: sqlite3.Connection | None = None
        if path is not None:
            # Another ingest worker may hold the file's write lock for a moment.
            self._db = sqlite3.connect(str(path), timeout=10.0)
            os.chmod(path, 0o600)
            # WAL without a sync per commit: a power cut may forget the last batches' nonces
            # (their records are stored; only a replay of exactly those would pass as new,
            # and the store keeps one row per token), never corrupt the file.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS nonces (device TEXT, nonce INTEGER, "
                             "digest BLOB, PRIMARY KEY (device, nonce))")
            self._db.commit()
            rows = self._db.execute("SELECT device, nonce, digest FROM nonces ORDER BY device, nonce")
            for d, n, g in rows:
                self._put(self._history(d), n, bytes(g))

    def _history(self, dev: str) -> _History:
        h = self._dev.get(dev)
        if h is None:
            h = self._dev[dev] = _History(self.window)
        return h

    def _put(self, h: _History, nonce: int, digest: bytes) -> None:
        w = self.window
        if nonce > h.high:
            # The slots of the nonces passed over (and of those falling out) are cleared.
            for n in range(max(h.high + 1, nonce - w + 1), nonce):
                i = 8 * (n % w)
                h.ring[i:i + 8] = bytes(8)
            h.high = nonce
        i = 8 * (nonce % w)
        h.ring[i:i + 8] = digest

    def check(self, device_id: int, nonce: int, payload: bytes, key_id: str = "") -> bool:
        """True: new (staged); False: a byte-identical resend; SealedError: a replay."""
        # Eight bytes tell a resend from other bytes (a zero digest would read as empty).
        digest = hashlib.sha256(payload).digest()[:8].replace(bytes(8), b"\x00" * 7 + b"\x01")
        dev = "%d:%s" % (device_id, key_id)
        h = self._history(dev)
        if nonce <= h.high - self.window:
            raise BelowWindowError("replayed: nonce %d of device %d is %d or more below the highest accepted (%d)"
                              % (nonce, device_id, self.window, h.high))
        if nonce <= h.high:
            i = 8 * (nonce % self.window)
            old = bytes(h.ring[i:i + 8])
            if old == digest:
                return False
            if old != bytes(8):
                raise SealedError("replayed nonce %d of device %d with different bytes" % (nonce, device_id))
        self._put(h, nonce, digest)
        self._staged.append((dev, nonce, digest))
        return True

    def commit(self) -> None:
        """Persist what was staged; a device's rows that fell out of the window are deleted
        once it has written a window's worth since the last time (amortised)."""
        staged, self._staged = self._staged, []
        if self._db is None or not staged:
            return
        prune = []
        for dev, _, _ in staged:
            n = self._writes.get(dev, 0) + 1
            self._writes[dev] = n
            if n == self.window:
                self._writes[dev] = 0
                prune.append((dev, self._dev[dev].high - self.window))
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO nonces VALUES (?, ?, ?)", staged)
                self._db.executemany("DELETE FROM nonces WHERE device = ? AND nonce <= ?", prune)
        except sqlite3.OperationalError:
            # Busy or locked: the batch's records are stored already and RAM holds the
            # history; these rows go with the next commit.
            self._staged = staged + self._staged

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class SealedIngest:
    """The correction server's classifier: sealed records opened, plain ones only from
    plaintext devices, everything else a dead letter with its reason."""

    def __init__(self, keys: KeyStore, guard: ReplayGuard,
                 stored: Callable[[list[bytes]], dict[bytes, int]] | None = None) -> None:
        self.keys = keys
        self.guard = guard
        self.stored = stored                        # token -> stored d_diff (the store's lookup)
        self._macs: dict[str, hmac.HMAC] = {}       # key id -> HMAC keyed once, copied per record

    def _mac(self, keys: DeviceKeys) -> hmac.HMAC:
        mac = self._macs.get(keys.key_id)
        if mac is None:
            mac = self._macs[keys.key_id] = hmac.HMAC(keys.mac, hashes.SHA256())
        return mac

    def classify(self, topic: str, payload: bytes, received_at: float) -> Correction | DeadLetter:
        def dead(reason: str) -> DeadLetter:
            return DeadLetter(topic, payload, reason, received_at)
        try:
            if topic != topics.CORRECTIONS:
                return dead("not the corrections topic")
            if len(payload) < 2 or payload[0] != wire.VERSION:
                return dead("malformed: not a v%d message" % wire.VERSION)
            kind = payload[1]
            if kind == seal.KIND_SEALED:
                if len(payload) < seal.HEAD_SIZE:
                    return dead("malformed: sealed record must be %d bytes, got %d"
                                % (seal.SEALED_SIZE, len(payload)))
                device_id = struct.unpack_from("<I", payload, 4)[0]
                keys = self.keys.keys_of(device_id)
                if keys is None:
                    return dead("no key for device %d (tools/flash.py provision gives it one)" % device_id)
                try:
                    device_id, boot_id, seq, nonce, token, d_diff = open_record(keys, payload, self._mac(keys))
                except SealedError:
                    # Provisioned again within the last recheck: the new keys, if any, decide.
                    newer = self.keys.keys_of(device_id, fresh=True)
                    if newer is None or newer == keys:
                        raise
                    keys = newer
                    device_id, boot_id, seq, nonce, token, d_diff = open_record(keys, payload, self._mac(keys))
                try:
                    self.guard.check(device_id, nonce, payload, keys.key_id)
                except BelowWindowError:
                    # Authentic (its MAC checked) but older than the guard remembers: a board
                    # whose acknowledgement was lost resends late. It is that record again only
                    # if the store holds its token with its d_diff; the store then counts it a
                    # duplicate and it is acknowledged. Anything else stays a replay.
                    if self.stored is None or self.stored([token]).get(token) != d_diff:
                        raise
                return Correction(token, d_diff, received_at, device_id, boot_id, seq, topic, payload)
            if kind == wire.KIND_CORRECTION:
                try:
                    device_id, boot_id, seq, token, d_diff = wire.decode_correction(payload)
                except wire.ProtocolError as e:
                    return dead("malformed: %s" % e)
                if not self.keys.is_plaintext(device_id):
                    return dead("plain correction record from device %d, which is not configured plaintext: "
                                "refused (no downgrade)" % device_id)
                return Correction(token, d_diff, received_at, device_id, boot_id, seq, topic, payload)
            return dead("kind %d message on the corrections topic" % kind)
        except SealedError as e:
            return dead(str(e))
        except UsageError:
            raise                   # an unreadable key store stops the service, with its reason
        except Exception as e:  # the service must outlive any payload
            return dead("unexpected %s: %s" % (type(e).__name__, e))


class SealedStore:
    """A correction store whose ``add_batch`` persists the replay guard after the commit;
    everything else is the wrapped store's."""

    def __init__(self, store: Any, guard: ReplayGuard) -> None:
        self._store = store
        self._guard = guard

    def add_batch(self, corrections: list[Correction], dead: list[DeadLetter]) -> int:
        n = int(self._store.add_batch(corrections, dead))
        self._guard.commit()
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def sealed_ingest(conn: Any, store: Any, data_dir: Path | str, share: str | None = None, **kw: Any) -> Any:
    """The correction server's ingest service with sealed records (cloud/ingest/service.py), which
    acknowledges each committed record to its device by the record's header; ``share`` names an MQTT shared subscription group (docs/scale-out.md), or None."""
    from dpsense.cloud.ingest.acks import Acknowledger
    from dpsense.cloud.ingest.service import IngestService, shared_filter
    kw.setdefault("acknowledger", Acknowledger.for_corrections)
    keys = KeyStore.for_data_dir(data_dir)
    private_dir(keys.folder)
    guard = ReplayGuard(keys.folder / NONCE_FILE)
    classify = SealedIngest(keys, guard, store.lookup).classify
    return IngestService(conn, shared_filter(share, topics.CORRECTIONS), classify,
                         SealedStore(store, guard), **kw)


class _EcbBlock:
    """The AES block function from ``cryptography``, in the shape shared_protocol/seal.py takes
    from a board's cryptolib (``encrypt`` of one block): the simulator seals as a board does."""

    def __init__(self, key: bytes) -> None:
        self._enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()

    def encrypt(self, block: bytes | bytearray) -> bytes:
        return self._enc.update(bytes(block))


def sealer_for(keys: DeviceKeys) -> seal.Sealer:
    """A board's sealer for ``keys``, running on CPython."""
    return seal.Sealer(keys.enc, keys.mac, aes=_EcbBlock)


def provision_keys(data_dir: Path | str, device_ids: list[int]) -> list[DeviceKeys]:
    """New keys for each device, written to the key store of the correction server's folder
    ``data_dir`` (what `tools/flash.py provision` does for a board); a simulated fleet holds them
    in memory."""
    store = KeyStore.for_data_dir(data_dir)
    return [store.add_device(d) for d in device_ids]
