"""cloud/transport/gateway/: framed lines -> publishes, console lines logged, malformed lines counted,
polls answered with what the broker has, event lines expanded."""
from __future__ import annotations

import json
import struct

from dpsense.cloud.transport.gateway.relay import Gateway
from dpsense.protocol import seal, wire
from dpsense.protocol.framing import frame
from tests import vectors

TOKEN = bytes(range(8))
READING = wire.encode_reading(7, 1, 0, TOKEN, 3, [1200, -5])
CORRECTION = wire.encode_correction(7, 1, 0, TOKEN, 4)


def _gateway():
    pubs: list[tuple[str, bytes]] = []
    logs: list[str] = []
    gw = Gateway(7, lambda t, p: pubs.append((t, p)), logs.append, idle_s=0.0)
    return gw, pubs, logs


def test_records_are_published_unchanged_under_the_device_topic():
    gw, pubs, logs = _gateway()
    stream = b"OKboot ok: board=microbit\r\n" + frame(READING) + frame(CORRECTION).replace(b"\n", b"\r\n")
    # split at awkward places, as a UART delivers it
    for i in range(0, len(stream), 7):
        gw.feed(stream[i:i + 7])
    assert pubs == [("dpsense/readings/d7", READING), ("dpsense/corrections", CORRECTION)]
    assert logs == ["console: OKboot ok: board=microbit"]
    assert (gw.stats.readings, gw.stats.corrections, gw.stats.console, gw.stats.malformed) == (1, 1, 1, 0)


def test_malformed_lines_are_counted_never_fatal():
    gw, pubs, logs = _gateway()
    good = frame(READING)
    bad_crc = good[:-3] + (b"0" if good[-3:-2] != b"0" else b"1") + good[-2:]
    gw.feed(bad_crc + b"~abc\n" + b"~zz0000\n" + b"~" + b"0" * 400 + b"\n" + frame(b"\x09\x01") + good)
    assert pubs == [("dpsense/readings/d7", READING)]
    assert gw.stats.malformed == 5
    assert sum("malformed line" in s for s in logs) == 5


def test_idle_is_reported_once_everything_is_acknowledged():
    gw, pubs, logs = _gateway()
    gw.feed(frame(READING) + frame(CORRECTION))
    gw.tick()
    assert not any(s.startswith("idle") for s in logs)
    gw.acked()
    gw.acked()
    gw.tick()
    # the broker's PUBACKs are not an acknowledgement: the record is not committed yet, and
    # not answered to the board
    assert not any(s.startswith("idle") for s in logs)
    _commit(gw, READING)
    _commit(gw, CORRECTION)
    gw.tick()
    assert not any(s.startswith("idle") for s in logs)      # committed, the board not yet told
    gw.feed(b"!\n")
    gw.tick()
    gw.tick()
    assert [s for s in logs if s.startswith("idle")] == [
        "idle: all 1 records acknowledged (2 messages published, 0 malformed lines, 0 console lines)"]


def test_status_console_lines_go_to_the_status_topic():
    gw, pubs, logs = _gateway()
    gw.feed(b'status: {"event":"window_cap","window":0}\nstatus: {not json}\nstatus: [1]\n')
    assert pubs == [("dpsense/status/d7", b'{"event":"window_cap","window":0}')]
    assert gw.stats.console == 3 and gw.stats.status == 1 and gw.stats.malformed == 0


def _commit(gw, payload):
    """The cloud's acknowledgement of the record ``payload`` (docs/protocol.md 3.1); a sealed
    correction record by its clear header, as the sealed ingest does."""
    if payload[1] == seal.KIND_SEALED:
        kind, f = wire.KIND_CORRECTION, struct.unpack_from("<III", payload, 4)
    else:
        kind, f = wire.decode(payload)
    for m in wire.encode_acks(kind, f[0], f[1], [(f[2], f[2])]):
        gw.committed(m)


def _tracking():
    """A gateway whose publishes get message ids 1, 2, ... (as paho's do)."""
    pubs: list[tuple[str, bytes]] = []
    logs: list[str] = []

    def publish(topic, payload):
        pubs.append((topic, payload))
        return len(pubs)

    return Gateway(7, publish, logs.append, idle_s=0.0), pubs, logs


def test_a_record_is_acknowledged_to_the_board_once_both_messages_are_acked_and_it_polls():
    gw, pubs, _ = _tracking()
    gw.feed(frame(READING) + frame(CORRECTION))           # message ids 1 and 2
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!\n"                    # nothing acknowledged yet
    gw.acked(1)
    _commit(gw, pubs[0][1])
    gw.acked(1)
    _commit(gw, pubs[0][1])                                           # a duplicate PUBACK changes nothing
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!\n"                    # the correction is not stored yet
    gw.acked(2)
    _commit(gw, pubs[1][1])
    assert gw.take_replies() == b""                       # never unasked
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!\n"                    # each acknowledgement once
    assert gw.stats.replies == 1


def test_the_broker_s_puback_alone_acknowledges_nothing_to_the_board():
    gw, pubs, _ = _tracking()
    gw.feed(frame(READING) + frame(CORRECTION))
    gw.acked(1)
    gw.acked(2)
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!\n"                    # the broker may still lose them
    for m in wire.encode_acks(wire.KIND_READING, 7, 1, [(0, 0)]) + \
            wire.encode_acks(wire.KIND_CORRECTION, 7, 2, [(0, 0)]) + \
            wire.encode_acks(wire.KIND_CORRECTION, 8, 1, [(0, 0)]):
        gw.committed(m)                                   # another boot, another device
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!\n"
    _commit(gw, CORRECTION)
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"


def test_a_resent_record_is_published_again_and_acknowledged_again():
    gw, pubs, _ = _tracking()
    gw.feed((frame(READING) + frame(CORRECTION)) * 2)
    assert len(pubs) == 4 and pubs[0] == pubs[2] and pubs[1] == pubs[3]
    gw.acked(3)
    _commit(gw, pubs[2][1])                                           # the copies' acks may come first
    gw.acked(2)
    _commit(gw, pubs[1][1])
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"
    gw.acked(1)
    _commit(gw, pubs[0][1])
    gw.acked(4)
    _commit(gw, pubs[3][1])
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"


def test_a_poll_gets_at_most_two_acknowledgements_so_the_board_uart_never_overruns():
    gw, pubs, _ = _tracking()
    tokens = [bytes([i]) * 8 for i in range(5)]
    for i, t in enumerate(tokens):
        gw.feed(frame(wire.encode_reading(7, 1, i, t, 3, [i])) + frame(wire.encode_correction(7, 1, i, t, i)))
    for mid in range(1, 11):
        gw.acked(mid)
        _commit(gw, pubs[mid - 1][1])
    answers = []
    for _ in range(4):
        gw.feed(b"!\n")
        answers.append(gw.take_replies())
    assert [a.count(b"\n") - 1 for a in answers] == [2, 2, 1, 0]
    assert all(len(a) <= 2 * 18 + 2 for a in answers)
    assert b"".join(answers).replace(b"!\n", b"") == b"".join(b"!" + t.hex().encode() + b"\n"
                                                              for t in tokens)


def test_a_poll_with_a_count_gets_up_to_that_many_and_a_waiting_record_is_acked_once():
    gw, pubs, _ = _tracking()
    tokens = [bytes([i]) * 8 for i in range(5)]
    for i, t in enumerate(tokens):
        gw.feed(frame(wire.encode_reading(7, 1, i, t, 3, [i])) + frame(wire.encode_correction(7, 1, i, t, i)))
    gw.feed(frame(wire.encode_reading(7, 1, 0, tokens[0], 3, [0])) + frame(wire.encode_correction(7, 1, 0, tokens[0], 0)))
    for mid in range(1, 13):                              # record 0 twice: resent while waiting
        gw.acked(mid)
        _commit(gw, pubs[mid - 1][1])
    gw.feed(b"!3\n")
    assert gw.take_replies() == b"".join(b"!" + t.hex().encode() + b"\n" for t in tokens[:3]) + b"!\n"
    gw.feed(b"!32\n")
    assert gw.take_replies() == b"".join(b"!" + t.hex().encode() + b"\n" for t in tokens[3:]) + b"!\n"
    gw.feed(b"!0\n!999\n!x\n")                           # 0 asks for none; 999 and x are not polls
    assert gw.take_replies() == b"!\n"
    assert gw.stats.replies == 5 and gw.stats.console == 2


def test_acknowledged_before_publish_returned_still_counts():
    pubs: list[tuple[str, bytes]] = []
    holder: list[Gateway] = []

    def publish(topic, payload):
        pubs.append((topic, payload))
        holder[0].acked(len(pubs))                        # paho's thread was faster
        _commit(holder[0], payload)                       # and so was the cloud
        return len(pubs)

    gw = Gateway(7, publish, lambda s: None, idle_s=0.0)
    holder.append(gw)
    gw.feed(frame(READING) + frame(CORRECTION) + b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"


def test_event_lines_become_the_full_firmware_console_text_and_status_messages():
    gw, pubs, logs = _tracking()
    gw.feed(b"#boot microbit prng_no_dp 7 99 1 4 4 200 50 2 0 2288 0.2.0\n#cap 0 4 4 4 1 4\n"
            b"#done 30 12 310\n#idle 12 3 0\n#idle 12 3 2\n")
    assert logs == [
        "console: boot ok: board=microbit device=7 boot=99 entropy=prng_no_dp eps_record=1/4 "
        "pending=2 mem_free=2288 version=0.2.0",
        "console: ledger: window 0 cap 1 reached (spent 1); withholding readings until window 1",
        "console: stimulus done: 30 readings, 12 released; firmware cost 310 us per reading",
        "console: idle: all 12 records acknowledged (3 resent)",
        "console: idle: 2 records not acknowledged, kept for the next boot (3 resent)"]
    import json
    boot, cap, done = [json.loads(p) for t, p in pubs]
    assert all(t == "dpsense/status/d7" for t, _ in pubs)
    assert boot == {"event": "boot", "device": 7, "boot": 99, "board": "microbit",
                    "entropy": "prng_no_dp", "eps_record": "1/4", "eps_record_worst": "4", "cap": "1",
                    "pending": 2, "dropped": 0, "mem_free": 2288, "version": "0.2.0", "ledger": "ok"}
    assert cap == {"event": "window_cap", "device": 7, "boot": 99, "board": "microbit",
                   "entropy": "prng_no_dp", "eps_record": "1/4", "window": 0, "spent": "1",
                   "cap": "1", "withheld": 1, "released": 4, "last_seq": 3}
    # The end of the stimulus says the boot's last seq (docs/protocol.md 13.2).
    assert done == dict({k: v for k, v in boot.items() if k != "pending"}, event="done", released=12, last_seq=11)
    assert gw.stats.events == 5 and gw.stats.malformed == 0


def test_a_micro_bit_with_a_damaged_ledger_says_releases_stopped():
    # firmware/mbstate.py gives the node the cap -1 when its ledger is missing or damaged
    gw, pubs, logs = _tracking()
    gw.feed(b"#boot microbit prng_no_dp 7 99 1 4 -1 0 0 0 0 1400 0.2.0\n#cap 0 0 -1 4 1 0\n")
    assert logs == [
        "console: boot ok: board=microbit device=7 boot=99 entropy=prng_no_dp eps_record=1/4 "
        "pending=0 mem_free=1400 version=0.2.0",
        "console: ledger: damaged or missing ledger: provision the board again; releasing nothing",
        "console: ledger: releases stopped: damaged or missing ledger: provision the board again"]
    import json
    boot, stop = [json.loads(p) for t, p in pubs]
    assert boot["ledger"] == stop["ledger"] == "damaged or missing ledger: provision the board again"
    assert boot["cap"] == "0" and stop["event"] == "ledger_stopped" and stop["released"] == 0


def test_every_event_the_micro_bit_node_writes_is_one_the_gateway_reads():
    """firmware/mbio.py and mbnode.py write their event lines with their own format strings;
    each kind, with records kept and not and a window cap reached, parses by EVENTS, and
    names the board and entropy source as firmware/boards/microbit.py does."""
    from dpsense.cloud.transport.gateway.events import EVENTS, parse_event
    from dpsense.protocol.rng import XorShift32
    from tests.portable import test_mbnode as node
    from firmware.boards import microbit

    texts = [node._check(3, [(1, 1, 0, -100, 100, 20)], (1, 4), [0], [[i] for i in range(30)],
                         win=10, cap=(1, 1))]
    d = node._folder("gw-events")
    first = node.FakeUart([[1, 2], [3, 4]], ack=False)      # nothing acknowledged: 2 kept
    node._run(d, XorShift32(4), first, node.COLS, (1, 2), 600, (600, 1))
    second = node.FakeUart([])                               # the next boot resends them
    node._run(d, XorShift32(5), second, node.COLS, (1, 2), 600, (600, 1))
    seen: dict[str, list] = {}
    for text in texts + [bytes(first.out), bytes(second.out)]:
        for ln in text.split(b"\n"):
            if ln.startswith(b"#"):
                ev = parse_event(ln)
                seen.setdefault(ev["event"], []).append(ev)
    assert sorted(seen) == sorted(EVENTS)
    profile = microbit.PROFILE
    assert {(b["board"], b["entropy"]) for b in seen["boot"]} == \
        {(profile["name"], profile["entropy"])}
    assert [b["pending"] for b in seen["boot"]] == [0, 0, 2]
    assert [e["pending"] for e in seen["idle"]] == [0, 2, 0]
    assert [(e["window"], e["released"]) for e in seen["cap"]] == [(0, 4), (1, 8), (2, 12)]


def test_malformed_event_lines_are_counted():
    gw, pubs, logs = _tracking()
    # the last: a #boot without its version (a node older than the gateway)
    gw.feed(b"#nope 1\n#cap 1 2\n#done a b c\n#cap 0 1 1 0 1 1\n#\n"
            b"#boot microbit prng_no_dp 7 99 1 4 4 200 50 2 0 2288\n")
    assert pubs == [] and gw.stats.malformed == 6 and gw.stats.events == 0


# -- the full firmware on a serial board (Pico profile), wired to the gateway in-process ------

def _pico_app(tmp_path, rows, gw, up):
    """App on the Pico profile whose console is ``gw``; ``up[0]`` False: replies are lost."""
    from tests.portable import fwutil
    from app import App
    from boards import pico
    from dpsense.protocol.config import validate

    cfg = validate({
        "board": "pico", "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -1000, "raw_max": 1000,
                     "delta_q": 50}] * 2,
        "epsilon": "0.5", "centre": [0, 0], "window_records": 100, "window_cap": "100",
        "period_ms": 0, "stimulus": rows, "ring_path": str(tmp_path / "ring.bin"),
        "ledger_path": str(tmp_path / "ledger.bin"), "seal_key_path": str(tmp_path / "seal.key")},
        pico.PROFILE)
    from ledger import provision
    if not (tmp_path / "ledger.bin").exists():
        # Provisioning writes the keys with a fresh ledger (the seal's nonce is its counter).
        provision(cfg["ledger_path"])
        (tmp_path / "seal.key").write_bytes(vectors.SEAL_ENC_KEY + vectors.SEAL_MAC_KEY)
    logs: list[str] = []

    def write(data):
        gw.feed(bytes(data))

    def log(text):
        logs.append(text)
        gw.feed(text.encode() + b"\n")          # the same console as the framed lines

    def read():
        replies = gw.take_replies()
        return replies if up[0] else b""

    return App(cfg, pico.PROFILE, log, (write, read), fwutil.FakeClock(1000)), logs


def _acking_gateway():
    """A gateway whose broker acknowledges, and whose cloud commits, each publish as soon as it
    is made."""
    pubs: list[tuple[str, bytes]] = []
    holder: list[Gateway] = []

    def publish(topic, payload):
        pubs.append((topic, payload))
        holder[0].acked(len(pubs))
        if topic != "dpsense/status/d7":
            _commit(holder[0], payload)          # and the cloud commits it at once
        return len(pubs)

    gw = Gateway(7, publish, lambda s: None, idle_s=0.0)
    holder.append(gw)
    return gw, pubs


def _stored(pubs):
    """What the cloud keeps: readings by (device, boot, seq), corrections by token (the board
    seals them; the correction server opens them with its keys)."""
    from dpsense.cloud.correction.sealed import DeviceKeys, open_record
    keys = DeviceKeys(vectors.SEAL_ENC_KEY, vectors.SEAL_MAC_KEY)
    readings = {wire.decode_reading(p)[:3]: p for t, p in pubs if t == "dpsense/readings/d7"}
    corrections = {open_record(keys, p)[4]: p for t, p in pubs if t == "dpsense/corrections"}
    assert set(corrections) == {wire.decode_reading(p)[3] for p in readings.values()}
    return readings, corrections


def test_the_pico_firmware_and_the_gateway_acknowledge_every_record_and_empty_the_ring(tmp_path):
    gw, pubs = _acking_gateway()
    app, logs = _pico_app(tmp_path, [[i, -i] for i in range(20)], gw, [True])
    app.boot()
    app.run()
    app.ledger.close()
    assert logs[-1] == "idle: all 20 records acknowledged (0 resent)"
    assert app.ring.pending == 0 and gw.stats.replies == 20 and gw.stats.malformed == 0
    readings, corrections = _stored(pubs)
    assert len(readings) == len(corrections) == 20
    assert sorted(k[2] for k in readings) == list(range(20))
    boot = [json.loads(p) for t, p in pubs if t == "dpsense/status/d7"][0]
    assert (boot["board"], boot["sensor"], boot["pending"]) == ("pico", "stimulus", 0)


def test_records_the_gateway_never_acknowledged_are_resent_at_the_next_boot_and_stored_once(tmp_path):
    gw, pubs = _acking_gateway()
    up = [False]                                       # the answers to the polls are lost
    app, logs = _pico_app(tmp_path, [[i, -i] for i in range(5)], gw, up)
    app.boot()
    app.run()
    app.ledger.close()
    assert logs[-1] == "idle: 5 records not acknowledged, kept for the next boot (20 resent)"
    first = [p for t, p in pubs if t != "dpsense/status/d7"][:10]
    gw2, pubs2 = _acking_gateway()
    app2, logs2 = _pico_app(tmp_path, [[7, 7]], gw2, [True])
    app2.boot()
    app2.run()
    app2.ledger.close()
    assert " pending=5 dropped=0 " in logs2[0]
    assert logs2[-1] == "idle: all 1 records acknowledged (5 resent)"
    assert app2.ring.pending == 0
    again = [p for t, p in pubs2 if t != "dpsense/status/d7"]
    assert again[:10] == first                         # the stored bytes, not re-perturbed
    readings, corrections = _stored(pubs + pubs2)
    assert len(readings) == len(corrections) == 6


def test_a_conflicting_record_under_the_same_key_is_never_acknowledged_to_the_board():
    """The board relays record A and then B under A's (boot, seq) with another token: the
    cloud stores A (first wins) and acknowledges the key; the gateway answers A's token, never
    B's, and logs the conflict."""
    gw, pubs, logs = _tracking()
    other = bytes([9] * 8)
    b_reading = wire.encode_reading(7, 1, 0, other, 3, [5, 5])
    b_correction = wire.encode_correction(7, 1, 0, other, 9)
    gw.feed(frame(READING) + frame(CORRECTION) + frame(b_reading) + frame(b_correction))
    assert [p for _, p in pubs] == [READING, CORRECTION, b_reading, b_correction]    # the cloud dead-letters B
    assert gw.stats.conflicts == 2 and sum("conflict: boot 1 seq 0" in line for line in logs) == 2
    for mid in range(1, 5):
        gw.acked(mid)
    _commit(gw, READING)
    _commit(gw, CORRECTION)
    gw.feed(b"!\n")
    assert gw.take_replies() == b"!" + TOKEN.hex().encode() + b"\n!\n"


def test_status_and_stop_lines_are_answered_each_time_and_published_once():
    """docs/protocol.md 2.3: a board says them until heard; a repeat is answered, not republished."""
    from dpsense.protocol.framing import crc16
    gw, pubs, logs = _gateway()
    line = b'status: {"event":"boot","device":7,"boot":5}'
    gw.feed(line + b"\r\n" + line + b"\n")
    assert gw.take_replies() == (b"!=%04x\n" % crc16(line)) * 2
    assert pubs == [("dpsense/status/d7", line[8:])]
    stop = b"seal error: seal.key: no key file"
    gw.feed(stop + b"\n" + stop + b"\n")
    assert gw.take_replies() == (b"!=%04x\n" % crc16(stop)) * 2
    assert pubs[1:] == [("dpsense/status/d7", b'{"event":"stopped","device":7,"error":"seal error: seal.key: no key file"}')]
    assert logs.count("gateway: d7 stopped: seal error: seal.key: no key file") == 1 and gw.stopped == stop.decode()
    gw.feed(b"hello: not a status\n")
    assert gw.take_replies() == b""                      # any other console line gets no answer
