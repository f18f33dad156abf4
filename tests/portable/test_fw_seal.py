"""The board's sealed correction records: the node seals with the ledger's counter as nonce,
the nonce never repeats across resets (a torn or damaged ledger slot included), and a board
told to seal without usable keys refuses to start (firmware/app.py, node.py, ledger.py)."""
from tests.portable import fwutil
from tests.portable.util import raises
from tests import vectors
from shared_protocol import seal, wire
from shared_protocol.config import ConfigError, validate
from shared_protocol.fixedpoint import Affine
from shared_protocol.ledgerfile import SLOT_SIZE
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.rng import XorShift32
from boards import microbit, pico
from ledger import OK, Ledger, provision
from node import Node
import app as appmod


def _sealer():
    return seal.Sealer(vectors.SEAL_ENC_KEY, vectors.SEAL_MAC_KEY)


def _node(sent, sealer):
    ident = Affine(1, 1, 0, -100000, 100000)
    mech = RecordMechanism([Column(ident, 125, (1, 2))] * 2, [0, 0], XorShift32(3))
    return Node(None, mech, XorShift32(4), 7, 9, 3, lambda r, c: sent.append((r, c)), sealer=sealer)


def test_the_node_seals_with_the_nonce_it_is_given():
    sent = []
    node = _node(sent, _sealer())
    node.release([10, 20], 1)
    node.release([30, 40], 2)
    (r0, c0), (r1, c1) = sent
    assert len(c0) == seal.SEALED_SIZE and c0[1] == seal.KIND_SEALED
    dev, boot, seq, tok, _, _ = wire.decode_reading(r0)
    # The clear head repeats the reading's device, boot and seq, then the nonce.
    assert c0[:20] == bytes([2, 3, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])
    assert c0.find(tok) < 0 and c1[16] == 2
    # Sealing the same fields again reproduces the record: the seal is deterministic.
    d = RecordMechanism([Column(Affine(1, 1, 0, -100000, 100000), 125, (1, 2))] * 2, [0, 0],
                        XorShift32(3)).perturb([10, 20])[2]
    assert _sealer().seal(7, 9, 0, 1, tok, d) == c0
    # A nonce that does not grow is refused before anything is sent.
    raises(seal.SealError, node.release, [1, 1], 2)
    assert len(sent) == 2


def _ledger(p):
    return Ledger((1, 4), (100, 1), window_records=1000, path=p)


def test_the_ledger_counter_never_repeats_across_resets_and_a_torn_slot():
    p = fwutil.scratch("seal-ledger")
    provision(p)
    used = []
    for _ in range(3):                    # three boots, two releases each
        led = _ledger(p)
        for _ in range(2):
            assert led.charge() == OK
            used.append(led.counter)
        led.close()
    # A reset half-way through writing the newest slot (counter 6, in slot 0).
    f = open(p, "r+b")
    f.write(bytes(SLOT_SIZE // 2))
    f.close()
    led = _ledger(p)
    assert led.charge() == OK
    used.append(led.counter)
    # Damage after its record left: the slot it wrote (counter 9, slot 1) is lost as well.
    f = open(p, "r+b")
    f.seek(SLOT_SIZE + 3)
    f.write(b"\xff")
    f.close()
    led = _ledger(p)
    assert led.charge() == OK
    used.append(led.counter)
    assert used == sorted(used) and len(set(used)) == len(used), used
    assert used[:6] == [1, 2, 3, 4, 5, 6] and used[6] > 6 and used[7] > used[6]
    fwutil.remove(p)


def _pico_cfg(name, **kw):
    raw = {"board": "pico", "device_id": 7,
           "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -10, "raw_max": 10, "delta_q": 5}],
           "epsilon": "0.5", "centre": [0], "window_records": 10, "window_cap": "10",
           "period_ms": 0, "stimulus": [[1]],
           "ring_path": fwutil.scratch(name + "-ring"), "ledger_path": fwutil.scratch(name + "-ledger")}
    raw.update(kw)
    return validate(raw, pico.PROFILE)


def test_a_board_that_seals_refuses_to_start_without_a_usable_key_file():
    missing = _pico_cfg("seal-a", seal_key_path=fwutil.scratch("seal-a-key"))
    assert "no key file" in str(raises(appmod.SealError, appmod.make_sealer, missing))
    p = fwutil.scratch("seal-b-key")
    f = open(p, "wb")
    f.write(bytes(47))
    f.close()
    short = _pico_cfg("seal-b", seal_key_path=p)
    assert "48 bytes" in str(raises(appmod.SealError, appmod.make_sealer, short))
    good = _pico_cfg("seal-c", seal_key_path=fwutil.seal_key("seal-c-key"))
    assert appmod.make_sealer(good) is not None
    # Plain records only when the config says so.
    assert appmod.make_sealer(_pico_cfg("seal-d", corrections="plaintext")) is None
    for k in (p, good["seal_key_path"]):
        fwutil.remove(k)


def test_the_corrections_key():
    c = _pico_cfg("seal-e")
    assert (c["corrections"], c["seal_key_path"]) == ("sealed", "seal.key")
    assert str(raises(ConfigError, lambda: _pico_cfg("seal-f", corrections="clear"))).startswith("corrections: ")
    # The micro:bit has no AES: it takes no such key (its records are plain, by name at the server).
    raw = {"device_id": 7, "epsilon": "0.5", "centre": [0], "window_records": 10, "window_cap": "10",
           "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": 0, "raw_max": 10, "delta_q": 5}],
           "corrections": "sealed"}
    assert str(raises(ConfigError, validate, raw, microbit.PROFILE)).startswith("corrections: ")
    del raw["corrections"]
    assert "corrections" not in validate(raw, microbit.PROFILE)
