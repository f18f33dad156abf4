"""firmware/uplink.py with a fake broker socket: resends after a loss are the stored bytes, DUP set."""
from shared_protocol import wire
from tests.portable import fwutil
from ring import Ring
from mqtt import MQTTClient
from uplink import CORRECTIONS, REFUSED_AFTER, Uplink, record_pid
from net import WifiLink

CONNACK = b"\x20\x02\x00\x00"


def _packets(data):
    """[(type, dup, topic, pid, payload)] parsed from client bytes: an independent decoder."""
    out = []
    i = 0
    while i < len(data):
        first = data[i]
        i += 1
        n = 0
        shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        body = bytes(data[i:i + n])
        i += n
        if first & 0xF0 == 0x30:
            tl = (body[0] << 8) | body[1]
            topic = body[2:2 + tl]
            pid = (body[2 + tl] << 8) | body[3 + tl]
            out.append((0x30, bool(first & 0x08), topic, pid, body[4 + tl:]))
        else:
            out.append((first & 0xF0, False, b"", 0, body))
    return out


def _puback(pid):
    return bytes([0x40, 2, pid >> 8, pid & 0xFF])


def _ack(of, seqs, boot=1, topic=None):
    """The cloud's acknowledgement of ``seqs`` as a QoS 0 PUBLISH from the broker, on the topic of
    its kind unless ``topic`` names another."""
    if topic is None:
        topic = b"dpsense/ack/d7/r" if of == wire.KIND_READING else b"dpsense/ack/d7/c"
    body = bytes([0, len(topic)]) + topic + wire.encode_acks(of, 7, boot, wire.seq_ranges(seqs))[0]
    return bytes([0x30, len(body)]) + body


def _commit(sock, o, part):
    """The cloud committed message ``part`` of record ``o`` (seq o, boot 1)."""
    sock.feed(_ack(wire.KIND_READING if part == 0 else wire.KIND_CORRECTION, [o]))


class _Opener:
    def __init__(self):
        self.socks = []
        self.fail = 0

    def __call__(self):
        if self.fail:
            self.fail -= 1
            raise OSError(111)
        s = fwutil.FakeSock(CONNACK)
        self.socks.append(s)
        return s


def _rec(i, boot=1):
    """Record ``i`` of device 7: seq i of ``boot``, one value, token of i."""
    tok = bytes([i]) * 8
    return (wire.encode_reading(7, boot, i, tok, 0, [i]),
            wire.encode_correction(7, boot, i, tok, i + 100))


def _setup(name, max_inflight=8):
    p = fwutil.scratch(name)
    clock = fwutil.FakeClock(1000)
    ring = Ring(p, 30, 16, 1 << 20)
    client = MQTTClient("dpsense-d7", "d7", "pw", 60, clock=clock)
    op = _Opener()
    up = Uplink(client, ring, op, b"dpsense/readings/d7", b"dpsense/status/d7", b"dpsense/ack/d7/+", clock,
                fwutil.RandomBits(), max_inflight, 5000, 250, 2000, None, lambda s: None)
    return p, clock, ring, op, up


def test_publishes_both_messages_of_each_record_and_acks_free_the_ring():
    p, clock, ring, op, up = _setup("up1")
    for i in range(3):
        ring.put(*_rec(i))
    up.service()
    pubs = [x for x in _packets(op.socks[0].tx) if x[0] == 0x30]
    assert [(x[2], x[3], x[1]) for x in pubs] == [
        (b"dpsense/readings/d7", record_pid(0, 0), False), (CORRECTIONS, record_pid(0, 1), False),
        (b"dpsense/readings/d7", record_pid(1, 0), False), (CORRECTIONS, record_pid(1, 1), False),
        (b"dpsense/readings/d7", record_pid(2, 0), False), (CORRECTIONS, record_pid(2, 1), False)]
    assert [x[4] for x in pubs[:2]] == list(_rec(0))
    op.socks[0].feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)) + _puback(record_pid(1, 0)))
    up.service()
    assert (ring.pending, ring.tail, len(up.inflight)) == (3, 0, 3)    # the broker's word is not enough
    op.socks[0].feed(_ack(wire.KIND_READING, [0, 1]) + _ack(wire.KIND_CORRECTION, [0]))
    up.service()
    assert (ring.pending, ring.tail, ring.parts(1)) == (2, 1, 2)
    assert up.acks == 2
    ring.close()
    fwutil.remove(p)


def test_after_a_loss_unacknowledged_messages_are_resent_identically_with_dup():
    p, clock, ring, op, up = _setup("up2")
    for i in range(3):
        ring.put(*_rec(i))
    up.service()
    first = {x[3]: x for x in _packets(op.socks[0].tx) if x[0] == 0x30}
    op.socks[0].feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)) + _puback(record_pid(1, 0)))
    op.socks[0].feed(_ack(wire.KIND_READING, [0, 1]) + _ack(wire.KIND_CORRECTION, [0]))
    up.service()
    op.socks[0].hang_up()
    up.service()                          # notices the loss
    assert not up.up and op.socks[0].closed
    ring.put(*_rec(3))                    # sampling goes on meanwhile
    up.service()                          # reconnects at once, then backs off on failures
    assert up.up and len(op.socks) == 2
    again = [x for x in _packets(op.socks[1].tx) if x[0] == 0x30]
    assert [x[3] for x in again] == [record_pid(1, 1), record_pid(2, 0), record_pid(2, 1),
                                     record_pid(3, 0), record_pid(3, 1)]
    for x in again[:3]:
        assert x[1] is True                                  # DUP
        assert x[2:] == first[x[3]][2:]                      # same topic, id, payload bytes
    assert [x[1] for x in again[3:]] == [False, False]       # never sent before
    assert up.resent == 2
    ring.close()
    fwutil.remove(p)


def test_reconnect_backs_off_exponentially_up_to_the_cap():
    p, clock, ring, op, up = _setup("up3")
    op.fail = 6
    delays = []
    for _ in range(6):
        up.service()
        delays.append(up._retry_at - clock.ms)
        clock.ms = up._retry_at
    assert delays == [250, 500, 1000, 2000, 2000, 2000]
    up.service()
    assert up.up
    ring.close()
    fwutil.remove(p)


def test_a_missing_puback_forces_a_reconnect_and_a_resend():
    p, clock, ring, op, up = _setup("up4")
    ring.put(*_rec(0))
    up.service()
    clock.ms += 5001
    up.service()
    assert not up.up
    clock.ms = up._retry_at
    up.service()
    again = [x for x in _packets(op.socks[1].tx) if x[0] == 0x30]
    assert [(x[1], x[3]) for x in again] == [(True, record_pid(0, 0)), (True, record_pid(0, 1))]
    ring.close()
    fwutil.remove(p)


def test_records_found_in_the_ring_at_boot_go_out_with_dup():
    p = fwutil.scratch("up5")
    ring = Ring(p, 30, 16, 1 << 20)
    ring.put(*_rec(0))
    ring.close()
    p2, clock, unused, op, _ = _setup("up5-unused")
    unused.close()
    ring = Ring(p, 30, 16, 1 << 20)
    up = Uplink(MQTTClient("c", "d7", "pw", 60, clock=clock), ring, op, b"r", b"s", b"a", clock,
                fwutil.RandomBits(), log=lambda s: None)
    up.service()
    pubs = [x for x in _packets(op.socks[0].tx) if x[0] == 0x30]
    assert [(x[1], x[4]) for x in pubs] == [(True, _rec(0)[0]), (True, _rec(0)[1])]
    ring.close()
    fwutil.remove(p)
    fwutil.remove(p2)


def test_status_messages_wait_for_the_broker_and_are_acknowledged():
    p, clock, ring, op, up = _setup("up6")
    op.fail = 1
    up.status(b'{"event":"boot"}')
    up.service()
    assert not up.up
    clock.ms = up._retry_at
    up.service()
    pubs = [x for x in _packets(op.socks[0].tx) if x[0] == 0x30]
    assert [(x[2], x[4]) for x in pubs] == [(b"dpsense/status/d7", b'{"event":"boot"}')]
    assert not up.idle()
    op.socks[0].feed(_puback(pubs[0][3]))
    up.service()
    assert up.idle()
    ring.close()
    fwutil.remove(p)


def test_a_broker_that_drops_us_before_any_ack_is_retried_with_backoff():
    p, clock, ring, op, up = _setup("up7")
    ring.put(*_rec(0))
    up.service()
    assert up.up
    op.socks[0].hang_up()
    up.service()                          # lost before any PUBACK: not a healthy connection
    assert not up.up and up._retry_at - clock.ms == 250
    clock.ms = up._retry_at
    up.service()
    op.socks[1].feed(_puback(record_pid(0, 0)))
    up.service()                          # this one carried an ack: the backoff starts over
    op.socks[1].hang_up()
    up.service()
    assert not up.up and up._retry_at == clock.ms
    ring.close()
    fwutil.remove(p)


def test_a_record_the_broker_refuses_is_not_resent_in_a_reconnect_storm():
    # Mosquitto 2.0 closes the connection on a publish it refuses. Here it refuses record 0
    # every time, after acknowledging the status message sent ahead of it; records 1 and 2
    # queue behind it.
    p, clock, ring, op, up = _setup("up8")
    for i in range(3):
        ring.put(*_rec(i))
    up.status(b'{"event":"boot"}')
    delays = []
    for n in range(REFUSED_AFTER):
        up.service()
        assert up.up and len(op.socks) == n + 1
        sent = [x[3] for x in _packets(op.socks[n].tx) if x[0] == 0x30]
        assert record_pid(0, 0) in sent                    # resent each time until given up
        if n == 0:
            op.socks[n].feed(_puback(sent[0]))             # the status message got through
        op.socks[n].hang_up()
        up.service()
        assert not up.up
        delays.append(up._retry_at - clock.ms)
        clock.ms = up._retry_at
    # A status PUBACK does not make a connection healthy while records wait: the delay grows.
    assert delays == [250, 500, 1000, 2000]
    assert up.refused == 1 and ring.tail == 1 and ring.pending == 2
    up.service()                                           # the next connection starts at record 1
    pubs = [x for x in _packets(op.socks[-1].tx) if x[0] == 0x30]
    assert record_pid(0, 0) not in [x[3] for x in pubs] and record_pid(1, 0) in [x[3] for x in pubs]
    op.socks[-1].feed(b"".join(_puback(record_pid(o, k)) for o in (1, 2) for k in (0, 1)))
    op.socks[-1].feed(_ack(wire.KIND_READING, [1, 2]) + _ack(wire.KIND_CORRECTION, [1, 2]))
    up.service()
    assert ring.pending == 0 and up.refused == 1
    ring.close()
    fwutil.remove(p)


def test_connections_lost_on_different_records_give_nothing_up():
    p, clock, ring, op, up = _setup("up9")
    for i in range(REFUSED_AFTER + 1):
        ring.put(*_rec(i))
    for n in range(REFUSED_AFTER + 1):
        up.service()
        op.socks[n].feed(_puback(record_pid(n, 0)) + _puback(record_pid(n, 1)))   # one record per connection
        _commit(op.socks[n], n, 0)
        _commit(op.socks[n], n, 1)
        up.service()
        op.socks[n].hang_up()
        up.service()
        clock.ms = up._retry_at
    assert up.refused == 0 and ring.pending == 0
    ring.close()
    fwutil.remove(p)


def test_records_waiting_for_the_commit_survive_any_number_of_lost_connections():
    # The broker PUBACKs records 0 and 1 and is killed before the cloud commits them, again
    # and again (kill -9 while the ingest is slow): a PUBACKed record is never a suspect.
    p, clock, ring, op, up = _setup("up-kills")
    ring.put(*_rec(0))
    ring.put(*_rec(1))
    for n in range(2 * REFUSED_AFTER):
        up.service()
        assert up.up and len(op.socks) == n + 1
        sent = [x[3] for x in _packets(op.socks[n].tx) if x[0] == 0x30]
        assert record_pid(0, 0) in sent and record_pid(1, 1) in sent     # resent after each reconnect
        if n == 0:
            op.socks[n].feed(b"".join(_puback(record_pid(o, k)) for o in (0, 1) for k in (0, 1)))
            up.service()
        op.socks[n].hang_up()
        up.service()
        assert not up.up
        clock.ms = up._retry_at
    assert up.refused == 0 and ring.pending == 2
    up.service()
    op.socks[-1].feed(_ack(wire.KIND_READING, [0, 1]) + _ack(wire.KIND_CORRECTION, [0, 1]))
    up.service()
    assert ring.pending == 0 and up.refused == 0
    ring.close()
    fwutil.remove(p)


def test_a_broker_killed_twice_before_its_puback_drops_nothing():
    # Killed with the record in flight (no PUBACK), down for a while (connects fail), killed
    # again after the record's first PUBACK: two losses, never REFUSED_AFTER on one suspect.
    p, clock, ring, op, up = _setup("up-kill2")
    ring.put(*_rec(0))
    up.service()
    op.socks[0].hang_up()                    # kill -9 with record 0 in flight
    up.service()
    for _ in range(REFUSED_AFTER + 1):       # the broker is down: connects fail
        op.fail = 1
        clock.ms = up._retry_at
        up.service()
        assert not up.up
    clock.ms = up._retry_at
    up.service()
    op.socks[1].feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)))
    up.service()
    op.socks[1].hang_up()                    # the second kill, before the cloud committed it
    up.service()
    for _ in range(REFUSED_AFTER):
        clock.ms = up._retry_at
        up.service()
        op.socks[-1].hang_up()               # and the broker keeps dropping us afterwards
        up.service()
    assert up.refused == 0 and ring.pending == 1
    clock.ms = up._retry_at
    up.service()
    _commit(op.socks[-1], 0, 0)
    _commit(op.socks[-1], 0, 1)
    up.service()
    assert ring.pending == 0 and up.refused == 0
    ring.close()
    fwutil.remove(p)


class _Network:
    """A ``network`` module whose access point can go away: ``WLAN.connect`` associates
    only while ``ap`` is True, and losing the AP drops the association."""

    STA_IF = 0

    def __init__(self):
        self.ap = True
        self.associated = False
        self.connects = 0
        net = self

        class WLAN:
            def __init__(self, interface):
                pass

            def active(self, on=None):
                return True

            def connect(self, ssid, password):
                net.connects += 1
                net.associated = net.ap

            def isconnected(self):
                return net.associated

        self.WLAN = WLAN

    def lose_ap(self):
        self.ap = False
        self.associated = False


def test_wifi_loss_holds_records_and_reconnects_wifi_then_the_broker():
    p = fwutil.scratch("up8")
    clock = fwutil.FakeClock(1000)
    ring = Ring(p, 30, 16, 1 << 20)
    net = _Network()
    link = WifiLink("lab", "pw", 1000, net, clock)
    op = _Opener()
    logs = []
    up = Uplink(MQTTClient("dpsense-d7", "d7", "pw", 60, clock=clock), ring, op,
                b"dpsense/readings/d7", b"dpsense/status/d7", b"dpsense/ack/d7/+", clock, fwutil.RandomBits(), 8, 5000,
                250, 2000, link, logs.append)
    ring.put(*_rec(0))
    up.service()
    assert up.up and net.connects == 1 and len(op.socks) == 1
    op.socks[0].feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)))
    op.socks[0].feed(_ack(wire.KIND_READING, [0]) + _ack(wire.KIND_CORRECTION, [0]))
    up.service()
    ring.put(*_rec(1))
    up.service()                              # record 1 out, not acknowledged
    net.lose_ap()
    op.socks[0].hang_up()
    up.service()
    assert not up.up
    for i in (2, 3):
        ring.put(*_rec(i))                    # sampling goes on meanwhile
    for _ in range(3):                        # each retry: Wi-Fi first, which times out
        clock.ms = max(clock.ms, up._retry_at)
        up.service()
    assert not up.up and len(op.socks) == 1   # no broker connection tried without Wi-Fi
    failed = [m for m in logs if m.startswith("mqtt: connect failed (OSError Wi-Fi 'lab'")]
    assert len(failed) == 3, logs
    assert ring.pending == 3
    net.ap = True
    clock.ms = max(clock.ms, up._retry_at)
    up.service()
    assert up.up and len(op.socks) == 2
    again = [x for x in _packets(op.socks[1].tx) if x[0] == 0x30]
    assert [(x[1], x[3]) for x in again] == [
        (True, record_pid(1, 0)), (True, record_pid(1, 1)),      # resent, same ids, DUP
        (False, record_pid(2, 0)), (False, record_pid(2, 1)),
        (False, record_pid(3, 0)), (False, record_pid(3, 1))]
    assert again[0][4] == _rec(1)[0]
    ring.close()
    fwutil.remove(p)


def test_an_esp32_turns_its_radio_on_before_its_first_random_draw():
    """ESP-IDF: the ESP32's RNG is truly random only while the radio runs, so the radio
    must be on before the boot id or any noise is drawn."""
    import sys
    import app as appmod
    from boards import esp32
    from shared_protocol.config import validate
    order = []
    net = _Network()
    base = net.WLAN

    class WLAN(base):
        def active(self, on=None):
            if on:
                order.append("radio")
            return True

    net.WLAN = WLAN
    real = appmod.make_rng

    def spy(profile):
        order.append("rng")
        return real(profile)

    cfg = validate({
        "device_id": 7, "epsilon": "0.5", "centre": [0], "window_records": 10, "window_cap": "10",
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -10, "raw_max": 10, "delta_q": 5}],
        "broker_host": "192.168.1.20", "broker_password": "pw", "wifi_ssid": "lab",
        "wifi_password": "pw", "stimulus": [[1]],
        "ring_path": fwutil.scratch("up9-ring"), "ledger_path": fwutil.scratch("up9-ledger"),
        "seal_key_path": fwutil.seal_key("up9-key")},
        esp32.PROFILE)
    saved = sys.modules.get("network")
    sys.modules["network"] = net
    appmod.make_rng = spy
    try:
        a = appmod.App(cfg, esp32.PROFILE, lambda s: None, clock=fwutil.FakeClock(1000))
    finally:
        appmod.make_rng = real
        if saved is None:
            del sys.modules["network"]
        else:
            sys.modules["network"] = saved
    assert order == ["radio", "rng"]
    assert a.uplink.link_up is a.wifi
    a.ring.close()
    a.ledger.close()
    for k in ("ring_path", "ledger_path", "seal_key_path"):
        fwutil.remove(cfg[k])


def test_a_record_the_cloud_never_commits_is_resent_identically_after_the_commit_timeout():
    # The broker PUBACKed both messages, then lost them (kill -9 before it saved them): only
    # the commit timeout brings them back, the same bytes, and only the uncommitted half.
    p, clock, ring, op, up = _setup("up-commit")
    ring.put(*_rec(0))
    ring.put(*_rec(1))
    up.service()
    sock = op.socks[0]
    first = [x for x in _packets(sock.tx) if x[0] == 0x30]
    sock.feed(b"".join(_puback(record_pid(o, part)) for o in (0, 1) for part in (0, 1)))
    sock.feed(_ack(wire.KIND_READING, [0, 1]) + _ack(wire.KIND_CORRECTION, [0]))
    up.service()
    assert (ring.pending, ring.parts(1), up.inflight) == (1, 2, {})
    n_sent = len(sock.tx)
    clock.sleep_ms(up.commit_timeout_ms)             # not yet overdue
    sock.feed(b"\xd0\x00")                           # a PINGRESP keeps the connection alive
    up.service()
    assert len([x for x in _packets(sock.tx[n_sent:]) if x[0] == 0x30]) == 0
    clock.sleep_ms(2)
    up.service()                                     # overdue: resend from the oldest
    up.service()
    again = [x for x in _packets(sock.tx[n_sent:]) if x[0] == 0x30]
    assert [(x[2], x[3], x[1]) for x in again] == [(CORRECTIONS, record_pid(1, 1), True)]
    assert again[0][4] == first[3][4] == _rec(1)[1]  # the stored bytes, never re-encoded
    assert up.resent == 1
    sock.feed(_puback(record_pid(1, 1)) + _ack(wire.KIND_CORRECTION, [1]))
    up.service()
    assert ring.pending == 0 and up.idle()
    ring.close()
    fwutil.remove(p)


def test_an_acknowledgement_of_another_boot_or_a_bad_one_frees_nothing():
    p, clock, ring, op, up = _setup("up-otherboot")
    ring.put(*_rec(0, boot=5))
    up.service()
    sock = op.socks[0]
    sock.feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)))
    sock.feed(_ack(wire.KIND_READING, [0], boot=4) + _ack(wire.KIND_CORRECTION, [1], boot=5))
    bad = b"\x30\x13\x00\x11dpsense/ack/d7/r" + b"\x02"         # one byte: not an acknowledgement
    sock.feed(bad)
    up.service()
    assert ring.parts(0) == 3 and up.bad_acks == 1 and up.acks == 2
    sock.feed(_ack(wire.KIND_READING, [0], boot=5) + _ack(wire.KIND_CORRECTION, [0], boot=5))
    up.service()
    assert ring.pending == 0
    ring.close()
    fwutil.remove(p)


def test_an_acknowledgement_on_the_other_kind_s_topic_frees_nothing():
    """Each ingest may publish only its own kind's acknowledgement topic (the broker's ACL); a
    reading acknowledgement on the correction topic (the correction ingest's) is refused, and so
    is the reverse, so neither ingest can release a record the other has not committed."""
    p, clock, ring, op, up = _setup("up-crosskind")
    ring.put(*_rec(0))
    up.service()
    sock = op.socks[0]
    sock.feed(_puback(record_pid(0, 0)) + _puback(record_pid(0, 1)))
    sock.feed(_ack(wire.KIND_READING, [0], topic=b"dpsense/ack/d7/c")
              + _ack(wire.KIND_CORRECTION, [0], topic=b"dpsense/ack/d7/r"))
    up.service()
    assert ring.parts(0) == 3 and up.bad_acks == 2 and up.acks == 0
    sock.feed(_ack(wire.KIND_READING, [0]) + _ack(wire.KIND_CORRECTION, [0]))
    up.service()
    assert ring.pending == 0 and up.acks == 2
    ring.close()
    fwutil.remove(p)
