"""The correction server's side of sealed records (cloud/correction/sealed.py): the vectors
recomputed with ``cryptography``, forged and replayed records dead-lettered, no downgrade."""
from __future__ import annotations

import os
import struct

import pytest
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from dpsense.cloud.correction.sealed import (DeviceKeys, KeyStore, ReplayGuard, SealedError, SealedIngest,
                                             SealedStore, open_record)
from dpsense.cloud.errors import UsageError
from dpsense.cloud.storage.repository import Correction, DeadLetter
from dpsense.cloud.transport.topics import CORRECTIONS
from dpsense.protocol import seal, wire
from tests import vectors

KEYS = DeviceKeys(vectors.SEAL_ENC_KEY, vectors.SEAL_MAC_KEY)


class _Ecb:
    def __init__(self, key: bytes) -> None:
        self._e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()

    def encrypt(self, block: bytes) -> bytes:
        return self._e.update(bytes(block))


def sealer(keys: DeviceKeys = KEYS) -> seal.Sealer:
    return seal.Sealer(keys.enc, keys.mac, aes=_Ecb)


def test_vectors_recomputed_with_cryptography():
    enc = Cipher(algorithms.AES(vectors.SEAL_ENC_KEY), modes.CTR(vectors.SEAL_COUNTER_BLOCK)).encryptor()
    ct = enc.update(vectors.SEAL_PLAINTEXT) + enc.finalize()
    assert ct == vectors.SEAL_CIPHERTEXT
    h = hmac.HMAC(vectors.SEAL_MAC_KEY, hashes.SHA256())
    h.update(vectors.SEAL_HEADER + ct)
    assert h.finalize() == vectors.SEAL_HMAC
    assert vectors.SEAL_HEADER == struct.pack("<BBHIIII", 2, 3, 0, 7, 1, 42, 5)
    assert vectors.SEAL_PLAINTEXT == struct.pack("<8si", vectors.TOKEN, -1234)
    e = Cipher(algorithms.AES(vectors.AES128_FIPS197[0]), modes.ECB()).encryptor()
    assert e.update(vectors.AES128_FIPS197[1]) == vectors.AES128_FIPS197[2]


def test_open_record_gives_the_fields_back():
    assert open_record(KEYS, vectors.SEALED_V2) == vectors.SEAL_FIELDS


@pytest.mark.parametrize("pos", [0, 4, 12, 16, 20, 31, 32, 47])
def test_any_changed_byte_is_refused(pos):
    bad = bytearray(vectors.SEALED_V2)
    bad[pos] ^= 0x01
    with pytest.raises(SealedError, match="tag does not match"):
        open_record(KEYS, bytes(bad))


def test_wrong_key_and_length_are_refused():
    other = DeviceKeys(bytes(range(1, 17)), vectors.SEAL_MAC_KEY[::-1])
    with pytest.raises(SealedError, match="tag"):
        open_record(other, vectors.SEALED_V2)
    with pytest.raises(SealedError, match="48 bytes"):
        open_record(KEYS, vectors.SEALED_V2[:-1])


def _store(tmp_path, plaintext=(), keyed=(7,)):
    ks = KeyStore(tmp_path / "keys")
    for d in keyed:
        ks.add_device(d, KEYS)
    for d in plaintext:
        ks.set_plaintext(d)
    return ks


def classify(ing: SealedIngest, payload: bytes, topic: str = CORRECTIONS):
    return ing.classify(topic, payload, 1.0)


def test_ingest_accepts_sealed_and_resends_and_deadletters_replays(tmp_path):
    ing = SealedIngest(_store(tmp_path), ReplayGuard(window=4))
    s = sealer()
    first = s.seal(7, 1, 0, 1, vectors.TOKEN, -1234)
    r = classify(ing, first)
    assert r == Correction(vectors.TOKEN, -1234, 1.0)
    # A byte-identical resend is the same correction (the store counts it a duplicate).
    assert classify(ing, first) == r
    # The same nonce with other bytes: a board reusing a nonce, or a replay of another record.
    reused = seal.Sealer(KEYS.enc, KEYS.mac, aes=_Ecb).seal(7, 1, 0, 1, vectors.TOKEN, 99)
    d = classify(ing, reused)
    assert isinstance(d, DeadLetter) and "replayed nonce 1 of device 7 with different bytes" in d.reason
    for n in range(2, 7):
        assert isinstance(classify(ing, s.seal(7, 1, n, n, bytes([n]) * 8, n)), Correction)
    ing.guard.commit()
    # Nonce 1 is now window (4) or more below the highest (6) and forgotten: a replay.
    d = classify(ing, first)
    assert isinstance(d, DeadLetter) and d.reason.startswith("replayed: nonce 1 of device 7")
    # Out of order within the window is fine.
    late = s.seal(7, 1, 9, 9, b"\x09" * 8, 9)
    assert isinstance(classify(ing, late), Correction)


def test_forged_records_are_dead_letters(tmp_path):
    ing = SealedIngest(_store(tmp_path), ReplayGuard())
    bad = bytearray(vectors.SEALED_V2)
    bad[25] ^= 0x80                     # a bit of d_diff's ciphertext
    d = classify(ing, bytes(bad))
    assert isinstance(d, DeadLetter) and d.reason == "forged or damaged: the tag does not match"
    unknown = sealer().seal(8, 1, 0, 1, vectors.TOKEN, 5)
    d = classify(ing, unknown)
    assert isinstance(d, DeadLetter) and d.reason.startswith("no key for device 8")
    # The forged record did not take its nonce: the genuine one is still accepted.
    assert isinstance(classify(ing, vectors.SEALED_V2), Correction)


def test_plain_records_only_from_plaintext_devices(tmp_path):
    ing = SealedIngest(_store(tmp_path, plaintext=(3,)), ReplayGuard())
    plain = wire.encode_correction(3, 1, 0, vectors.TOKEN, -1234)
    assert classify(ing, plain) == Correction(vectors.TOKEN, -1234, 1.0, 3, 1, 0)
    assert classify(ing, plain).device_id == 3          # the header the acknowledgement names
    downgrade = wire.encode_correction(7, 1, 0, vectors.TOKEN, -1234)
    d = classify(ing, downgrade)
    assert isinstance(d, DeadLetter) and "not configured plaintext" in d.reason
    # The 16-byte record of version 1 names no device: malformed, whoever is plaintext.
    legacy = struct.pack("<BB2x8si", wire.VERSION, 2, vectors.TOKEN, -1234)
    d = classify(ing, legacy)
    assert isinstance(d, DeadLetter) and "correction record must be 28 bytes, got 16" in d.reason
    assert isinstance(classify(ing, vectors.SEALED_V2, "dpsense/readings/d7"), DeadLetter)
    assert isinstance(classify(ing, b"\x01"), DeadLetter)


def test_key_store_is_private_and_reloaded(tmp_path):
    ks = _store(tmp_path, plaintext=(3,))
    assert os.stat(ks.path).st_mode & 0o777 == 0o600
    assert os.stat(ks.folder).st_mode & 0o777 == 0o700
    other = KeyStore(ks.folder)
    assert other.keys_of(7) == KEYS and other.is_plaintext(3)
    k9 = ks.add_device(9)
    assert other.keys_of(9) == k9 and len(k9.to_bytes()) == seal.KEYS_SIZE
    assert k9.enc != k9.mac[:16]
    ks.add_device(3, KEYS)              # keys end the plaintext switch
    assert not other.is_plaintext(3) and other.devices() == ([3, 7, 9], [])
    os.chmod(ks.path, 0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        KeyStore(ks.folder).keys_of(7)
    with pytest.raises(UsageError):
        ks.add_device(0)


def test_guard_state_survives_a_restart_and_is_written_after_the_commit(tmp_path):
    path = tmp_path / "nonces.db"
    guard = ReplayGuard(path, window=4)
    calls = []

    class Inner:
        last_conflicts = 0

        def add_batch(self, c, d):
            calls.append({(d, n) for d, n, _ in guard._staged})
            return len(c)
    st = SealedStore(Inner(), guard)
    assert guard.check(7, 1, b"a")
    assert st.add_batch([], []) == 0 and calls == [{("7:", 1)}] and st.last_conflicts == 0
    guard.close()
    again = ReplayGuard(path, window=4)
    assert again.check(7, 1, b"a") is False
    with pytest.raises(SealedError):
        again.check(7, 1, b"b")
    again.close()


def test_the_guard_keeps_a_window_per_device_and_prunes_its_rows(tmp_path):
    import sqlite3
    path = tmp_path / "nonces.db"
    guard = ReplayGuard(path, window=8)
    for n in range(1, 41):
        assert guard.check(3, n, b"r%d" % n)
        guard.check(4, n, b"s%d" % n)
        guard.commit()
    # Out of order within the window, a gap, and the window's lower edge.
    assert guard.check(3, 45, b"r45") and guard.check(3, 43, b"r43")
    assert guard.check(3, 38, b"r38") is False
    with pytest.raises(SealedError, match="replayed: nonce 37 of device 3 is 8 or more below"):
        guard.check(3, 37, b"r37")
    with pytest.raises(SealedError, match="different bytes"):
        guard.check(3, 40, b"other")
    assert guard.check(3, 44, b"r44")              # passed over, never seen: new
    guard.commit()
    guard.close()
    rows = sqlite3.connect(path).execute("SELECT count(*) FROM nonces WHERE device = '3:'").fetchone()[0]
    assert rows <= 2 * 8 + 3                       # pruned every window's worth of writes
    again = ReplayGuard(path, window=8)
    assert again.check(3, 45, b"r45") is False and again.check(4, 40, b"s40") is False
    with pytest.raises(SealedError):
        again.check(3, 30, b"r30")
    again.close()


def test_new_keys_start_a_new_nonce_history(tmp_path):
    ks = _store(tmp_path)
    ing = SealedIngest(ks, ReplayGuard(window=4))
    for n in range(10):
        assert isinstance(classify(ing, sealer().seal(7, 1, n, n, bytes([n]) * 8, n)), Correction)
    ing.guard.commit()
    # Provisioned again (by another process, at once): new keys and a fresh ledger, whose
    # counter starts at 0 again.
    fresh = KeyStore(ks.folder).add_device(7)
    r = classify(ing, sealer(fresh).seal(7, 2, 0, 0, b"\x55" * 8, 3))
    assert r == Correction(b"\x55" * 8, 3, 1.0)
    # The old keys are gone: a record sealed with them is a forgery now.
    d = classify(ing, sealer().seal(7, 1, 11, 11, b"\x66" * 8, 3))
    assert isinstance(d, DeadLetter) and "tag does not match" in d.reason


def test_status_names_the_plaintext_devices(tmp_path):
    import subprocess
    import sys
    ks = KeyStore.for_data_dir(tmp_path)
    ks.add_device(1)
    ks.add_device(2)
    ks.set_plaintext(10)
    from dpsense.cloud.storage import open_analyst_store
    open_analyst_store("sqlite:///%s" % (tmp_path / "analyst.db")).close()     # status never creates it
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "status", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert ("sealing     correction records sealed end to end for 2 devices; plaintext (readable by the "
            "broker and a gateway) for devices 10") in r.stdout, r.stdout


def test_any_fields_round_trip_between_the_board_code_and_cryptography():
    from hypothesis import given, settings, strategies as st

    u32 = st.integers(0, 2 ** 32 - 1)

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, 2 ** 32 - 1), u32, u32, u32, st.binary(min_size=8, max_size=8),
           st.integers(-2 ** 31 + 1, 2 ** 31 - 1))
    def check(device, boot, seq, nonce, token, d_diff):
        rec = sealer().seal(device, boot, seq, nonce, token, d_diff)
        assert open_record(KEYS, rec) == (device, boot, seq, nonce, token, d_diff)
    check()


def test_a_locked_guard_file_keeps_its_rows_for_the_next_commit(tmp_path):
    import sqlite3
    path = tmp_path / "nonces.db"
    guard = ReplayGuard(path, window=8)
    guard._db.execute("PRAGMA busy_timeout = 50")                   # type: ignore[union-attr]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")                               # another worker writes
    assert guard.check(5, 1, b"x")
    guard.commit()                                                  # locked: kept, no error
    holder.rollback()
    holder.close()
    assert guard.check(5, 2, b"y")
    guard.commit()
    rows = sqlite3.connect(path).execute("SELECT nonce FROM nonces ORDER BY nonce").fetchall()
    assert rows == [(1,), (2,)]
    guard.close()


def test_the_sealed_ingest_acknowledges_committed_records_by_their_header_and_never_a_forgery(tmp_path):
    from dpsense.cloud.ingest.service import Connection, _Msg
    from dpsense.cloud.correction.sealed import sealed_ingest
    from dpsense.cloud.storage import open_correction_store
    ks = KeyStore.for_data_dir(tmp_path / "data")
    ks.add_device(7, KEYS)
    ks.set_plaintext(3)
    s = sealer()
    good = [s.seal(7, 4, q, q + 1, bytes([q]) * 8, q) for q in range(3)]
    forged = bytearray(s.seal(7, 4, 9, 10, bytes([9]) * 8, 9))
    forged[25] ^= 1
    replay = sealer().seal(7, 4, 3, 2, bytes([3]) * 8, 3)           # nonce 2 again, other bytes
    plain = wire.encode_correction(3, 1, 0, vectors.TOKEN, 5)
    downgrade = wire.encode_correction(7, 4, 5, bytes([5]) * 8, 5)  # device 7 has keys
    with open_correction_store("sqlite:///%s/c.db" % tmp_path) as store:
        svc = sealed_ingest(Connection("127.0.0.1", 1, "correction-ingest", "pw", "t"), store, tmp_path / "data",
                            log=lambda s: None)
        sent: list[tuple[str, bytes]] = []
        svc.acker.publish = lambda t, p: sent.append((t, p))
        msgs = [_Msg(CORRECTIONS, p, 0, 0, 1, 1.0) for p in good + [bytes(forged), replay, plain, downgrade]]
        assert svc.process(msgs)
        got = {}
        for topic, payload in sent:
            of, device, boot, ranges = wire.decode_ack(payload)
            assert of == wire.KIND_CORRECTION and topic == "dpsense/ack/d%d/c" % device
            got[(device, boot)] = ranges
        assert got == {(7, 4): [(0, 2)], (3, 1): [(0, 0)]}
        assert store.count() == 4 and store.dead_letter_count() == 3
        sent.clear()
        assert svc.process([_Msg(CORRECTIONS, good[1], 0, 0, 1, 2.0)])   # a resend: acknowledged again
        assert [wire.decode_ack(p)[1:] for _, p in sent] == [(7, 4, [(1, 1)])]
        svc.store._guard.close()


def test_a_sealed_conflicts_dead_letter_keeps_the_record_as_received(tmp_path):
    """docs/protocol.md section 10: the dead letter of a conflicting duplicate keeps the payload
    that arrived (here the sealed bytes), not a plain record rebuilt from its fields."""
    from dpsense.cloud.storage import open_correction_store
    from dpsense.cloud.storage.repository import CONFLICTING_DUPLICATE
    ing = SealedIngest(_store(tmp_path), ReplayGuard())
    s = sealer()
    first = s.seal(7, 1, 0, 1, vectors.TOKEN, -1234)
    other = s.seal(7, 1, 1, 2, vectors.TOKEN, 55)             # the same token with another d_diff
    with open_correction_store("sqlite://") as cs:
        assert cs.add_batch([classify(ing, first)], []) == 1
        assert cs.add_batch([classify(ing, other)], []) == 0
        (letter,) = cs.dead_letters()
    assert (letter.topic, letter.reason, letter.payload) == (CORRECTIONS, CONFLICTING_DUPLICATE, other)


def test_a_late_identical_resend_is_a_duplicate_and_a_changed_one_a_replay(tmp_path):
    """A board whose acknowledgement was lost resends a record long after the replay guard
    forgot its nonce: the sealed ingest finds that very record in the store, so it is stored
    once and acknowledged again. A late record with other bytes (another d_diff or token under
    the same nonce) stays a replay, and so does one the store does not hold."""
    from dpsense.cloud.ingest.service import Connection, _Msg
    from dpsense.cloud.correction.sealed import sealed_ingest
    from dpsense.cloud.storage import open_correction_store
    ks = KeyStore.for_data_dir(tmp_path / "data")
    ks.add_device(7, KEYS)
    s = sealer()
    first = s.seal(7, 4, 0, 1, bytes([1]) * 8, 11)
    later = [s.seal(7, 4, q, q + 1, bytes([q + 1]) * 8, q) for q in range(1, 12)]
    with open_correction_store("sqlite:///%s/c.db" % tmp_path) as store:
        svc = sealed_ingest(Connection("127.0.0.1", 1, "correction-ingest", "pw", "t"), store, tmp_path / "data",
                            log=lambda s: None)
        svc.classify.__self__.guard.window = 4                          # forget fast
        sent: list[tuple[str, bytes]] = []
        svc.acker.publish = lambda t, p: sent.append((t, p))
        assert svc.process([_Msg(CORRECTIONS, p, 0, 0, 1, 1.0) for p in [first] + later])
        assert store.count() == 12
        sent.clear()
        assert svc.process([_Msg(CORRECTIONS, first, 0, 0, 1, 2.0)])    # nonce 1, 11 below the highest
        assert store.count() == 12 and store.dead_letter_count() == 0
        assert [wire.decode_ack(p)[1:] for _, p in sent] == [(7, 4, [(0, 0)])]
        changed = sealer().seal(7, 4, 0, 1, bytes([1]) * 8, 12)           # same nonce and token, other d_diff
        unknown = sealer().seal(7, 4, 0, 2, bytes([9]) * 8, 11)           # a token the store does not hold
        sent.clear()
        assert svc.process([_Msg(CORRECTIONS, p, 0, 0, 1, 3.0) for p in (changed, unknown)])
        assert store.count() == 12 and store.dead_letter_count() == 2 and sent == []
        assert all(d.reason.startswith("replayed: nonce") for d in store.dead_letters())
        svc.store._guard.close()
