"""firmware/mqtt.py against hand-derived bytes (MQTT 3.1.1, sections 2.2.3, 3.1, 3.3, 3.4)."""
from tests.portable import fwutil
from tests.portable.util import raises
from mqtt import (MQTTClient, MQTTError, PINGRESP, PUBACK, connect_packet, publish_header,
                  varint)

# CONNECT for client "d7", user "d7", password "pw", keepalive 60, clean_session=0:
#   10           CONNECT
#   16           remaining length 22 = 10 (variable header) + 3 x (2 + 2) (payload)
#   00 04 MQTT   protocol name;  04 protocol level 3.1.1
#   c0           flags: user name (0x80) + password (0x40), clean session 0, no will
#   00 3c        keepalive 60 s
#   00 02 d7 / 00 02 d7 / 00 02 pw
CONNECT_D7 = (b"\x10\x16\x00\x04MQTT\x04\xc0\x00\x3c"
              b"\x00\x02d7\x00\x02d7\x00\x02pw")
# PUBLISH QoS 1 to "a/b", packet id 10, payload 01 02:
#   32 = PUBLISH (0x30) | QoS 1 (0x02); remaining 9 = 2 + 3 (topic) + 2 (id) + 2 (payload)
PUBLISH_AB = b"\x32\x09\x00\x03a/b\x00\x0a\x01\x02"
PUBLISH_AB_DUP = b"\x3a" + PUBLISH_AB[1:]          # DUP is bit 3: 0x32 | 0x08
CONNACK_OK = b"\x20\x02\x00\x00"


def test_remaining_length_varint_boundaries():
    # 7 bits per byte, low first, bit 7 = "more" (spec table 2.4)
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(128) == b"\x80\x01"
    assert varint(16383) == b"\xff\x7f"
    assert varint(16384) == b"\x80\x80\x01"
    assert varint(2097151) == b"\xff\xff\x7f"
    assert varint(2097152) == b"\x80\x80\x80\x01"
    assert varint(268435455) == b"\xff\xff\xff\x7f"
    raises(ValueError, varint, 268435456)
    raises(ValueError, varint, -1)


def test_connect_packet_golden_bytes():
    assert connect_packet("d7", "d7", "pw", 60) == CONNECT_D7
    # clean session and no credentials: flags 02, remaining 10 + 4
    assert connect_packet("d7", keepalive=0, clean=True) == b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x00\x00\x02d7"
    raises(ValueError, connect_packet, "d7", None, "pw")


def test_publish_header_golden_bytes_with_and_without_dup():
    assert publish_header("a/b", 10, 2) + b"\x01\x02" == PUBLISH_AB
    assert publish_header(b"a/b", 10, 2, True) + b"\x01\x02" == PUBLISH_AB_DUP
    # a 200-byte payload needs a two-byte remaining length: 207 = 0xcf -> cf 01
    assert publish_header("a/b", 1, 200)[:3] == b"\x32\xcf\x01"
    raises(ValueError, publish_header, "a/b", 0, 2)


def _connected(clock=None):
    c = MQTTClient("d7", "d7", "pw", 60, clock=clock or fwutil.FakeClock())
    s = fwutil.FakeSock(CONNACK_OK)
    assert c.connect(s) == 0
    return c, s


def test_connect_sends_connect_and_reads_connack():
    c, s = _connected()
    assert bytes(s.tx) == CONNECT_D7
    c2 = MQTTClient("d7", "d7", "pw", 60, clock=fwutil.FakeClock())
    assert c2.connect(fwutil.FakeSock(b"\x20\x02\x01\x00")) == 1      # session present


def test_refused_connect_is_an_oserror_and_closes():
    c = MQTTClient("d7", "d7", "pw", 60, clock=fwutil.FakeClock())
    s = fwutil.FakeSock(b"\x20\x02\x00\x05")                          # 5: not authorised
    e = raises(OSError, c.connect, s)
    assert isinstance(e, MQTTError) and "return code 5" in str(e)
    assert s.closed and c.sock is None
    s2 = fwutil.FakeSock(b"")
    s2.hang_up()
    raises(OSError, c.connect, s2)


def test_publish_writes_header_then_the_payload_bytes_unchanged():
    c, s = _connected()
    s.tx = bytearray()
    c.publish(b"a/b", b"\x01\x02", 10)
    c.publish(b"a/b", b"\x01\x02", 10, dup=True)
    assert bytes(s.tx) == PUBLISH_AB + PUBLISH_AB_DUP


def test_poll_parses_puback_and_returns_none_when_idle():
    c, s = _connected()
    assert c.poll() is None
    s.feed(b"\x40\x02\x01\x2c" + b"\x40\x02\x00\x0a")                # ids 300 and 10
    assert c.poll() == (PUBACK, 300)
    assert c.poll() == (PUBACK, 10)
    assert c.poll() is None
    s.feed(b"\x40\x03\x00\x0a\x00")
    raises(MQTTError, c.poll)


def test_poll_raises_when_the_broker_hangs_up():
    c, s = _connected()
    s.hang_up()
    raises(OSError, c.poll)


def test_keepalive_pings_at_half_interval_and_fails_without_pingresp():
    clock = fwutil.FakeClock(1000)
    c, s = _connected(clock)
    s.tx = bytearray()
    clock.ms += 29999
    c.keepalive_due(clock.ms)
    assert bytes(s.tx) == b""
    clock.ms += 1
    c.keepalive_due(clock.ms)
    assert bytes(s.tx) == b"\xc0\x00"                                 # PINGREQ
    s.feed(b"\xd0\x00")                                               # PINGRESP
    assert c.poll() == (PINGRESP, 0)
    clock.ms += 30000
    c.keepalive_due(clock.ms)
    assert bytes(s.tx) == b"\xc0\x00\xc0\x00"
    clock.ms += 60001                                                 # no answer this time
    raises(MQTTError, c.keepalive_due, clock.ms)


def test_disconnect_sends_disconnect_and_closes():
    c, s = _connected()
    s.tx = bytearray()
    c.disconnect()
    assert bytes(s.tx) == b"\xe0\x00" and s.closed
    raises(OSError, c.publish, b"a/b", b"x", 1)


def test_a_silent_broker_times_out_instead_of_hanging():
    clock = fwutil.FakeClock(0)
    c = MQTTClient("d7", "d7", "pw", 60, timeout_ms=5000, clock=clock)
    e = raises(OSError, c.connect, fwutil.FakeSock(b"\x20"))       # half a CONNACK, then nothing
    assert "timed out" in str(e)
    assert 5000 <= clock.ms <= 5002


def test_tls_without_a_ca_is_refused_before_any_connection():
    # Port 9 on a name that cannot resolve: reaching the network at all would raise another error.
    from mqtt import open_socket
    e = raises(MQTTError, open_socket, "broker.invalid", 9, True, None)
    assert "no CA certificate" in str(e), e
