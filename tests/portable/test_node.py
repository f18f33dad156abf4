import sys

from shared_protocol import wire
from shared_protocol.framing import unframe
from shared_protocol.fixedpoint import Affine
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.rng import XorShift32

sys.path.insert(0, "firmware")
from node import Node, serial_sender  # noqa: E402


class ListSensor:
    def __init__(self, rows):
        self.rows = list(rows)

    def read(self):
        return list(self.rows.pop(0)) if self.rows else None


def _node(rows, sent, seed=3):
    ident = Affine(1, 1, 0, -100000, 100000)
    mech = RecordMechanism([Column(ident, 125, (1, 2)), Column(ident, 125, (1, 2))], [0, 0],
                           XorShift32(seed))
    return Node(ListSensor(rows), mech, XorShift32(seed + 1), 7, 9, 3,
                lambda r, c: sent.extend(((wire.KIND_READING, r), (wire.KIND_CORRECTION, c))))


def test_step_sends_a_reading_and_its_correction_linked_by_token():
    sent = []
    node = _node([(10, 20), (30, 40)], sent)
    assert node.step() == 0
    assert node.step() == 1
    assert [k for k, _ in sent] == [wire.KIND_READING, wire.KIND_CORRECTION] * 2
    dev, boot, seq, tok, cfg, vals = wire.decode_reading(sent[0][1])
    cdev, cboot, cseq, ctok, d = wire.decode_correction(sent[1][1])
    assert (dev, boot, seq, cfg) == (7, 9, 0, 3)
    assert ctok == tok and (cdev, cboot, cseq) == (dev, boot, seq)
    assert wire.decode_reading(sent[2][1])[2] == 1
    assert wire.decode_reading(sent[2][1])[3] != tok


def test_released_values_are_the_mechanism_output():
    sent = []
    _node([(10, 20)], sent, seed=8).step()
    mech = RecordMechanism([Column(Affine(1, 1, 0, -100000, 100000), 125, (1, 2))] * 2, [0, 0],
                           XorShift32(8))
    q, out, d = mech.perturb([10, 20])
    assert wire.decode_reading(sent[0][1])[5] == tuple(out)
    assert wire.decode_correction(sent[1][1])[4] == d


def test_serial_sender_frames_each_message():
    lines = []
    sent = []
    node = _node([(1, 2)], sent)
    node.send = serial_sender(lines.append)
    node.step()
    assert len(lines) == 2
    assert wire.decode(unframe(lines[0]))[0] == wire.KIND_READING
    assert wire.decode(unframe(lines[1]))[0] == wire.KIND_CORRECTION


def test_step_returns_none_when_the_sensor_has_no_reading():
    sent = []
    node = _node([(1, 2)], sent)
    assert node.step() == 0
    assert node.step() is None
    assert len(sent) == 2 and node.seq == 1


def test_the_sequence_number_wraps_to_0_within_the_boot():
    sent = []
    node = _node([(1, 2), (3, 4), (5, 6)], sent)
    node.seq = 0xFFFFFFFE
    assert [node.step(), node.step(), node.step()] == [0xFFFFFFFE, 0xFFFFFFFF, 0]
    got = [wire.decode_reading(sent[i][1])[1:3] for i in (0, 2, 4)]
    assert got == [(9, 0xFFFFFFFE), (9, 0xFFFFFFFF), (9, 0)]
