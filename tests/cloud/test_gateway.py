"""cloud/gateway.py: framed lines -> publishes, console lines logged, malformed lines counted."""
from __future__ import annotations

from cloud.gateway import Gateway
from shared_protocol import wire
from shared_protocol.framing import frame

TOKEN = bytes(range(8))
READING = wire.encode_reading(7, 1, 0, TOKEN, 3, [1200, -5])
CORRECTION = wire.encode_correction(TOKEN, 4)


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
    gw.tick()
    assert [s for s in logs if s.startswith("idle")] == [
        "idle: all 1 records acknowledged (2 messages published, 0 malformed lines, 0 console lines)"]


def test_status_console_lines_go_to_the_status_topic():
    gw, pubs, logs = _gateway()
    gw.feed(b'status: {"event":"window_cap","window":0}\nstatus: {not json}\nstatus: [1]\n')
    assert pubs == [("dpsense/status/d7", b'{"event":"window_cap","window":0}')]
    assert gw.stats.console == 3 and gw.stats.status == 1 and gw.stats.malformed == 0
