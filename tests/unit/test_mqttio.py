"""cloud/transport/mqttio.py's socket wrapper on a socket pair: block reads served piecewise, coalesced
writes, a write error reported where paho reads it, Nagle off for coalesced TCP."""
from __future__ import annotations

import socket

import pytest

from dpsense.cloud.transport.mqttio import READ_SIZE, BufferedSocket


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_one_read_serves_paho_s_small_reads_and_pending_counts_what_is_left(pair):
    a, b = pair
    s = BufferedSocket(a)
    b.sendall(b"\x30\x05hello\x40\x02\x00\x01")
    assert s.recv(1) == b"\x30"           # the command byte: one system call reads all of it
    assert s.pending() == 10
    assert s.recv(1) == b"\x05"
    assert s.recv(5) == b"hello"
    assert s.recv(100) == b"\x40\x02\x00\x01"    # never more than the buffer holds
    assert s.pending() == 0
    with pytest.raises(BlockingIOError):        # then the socket itself, non-blocking
        s.recv(1)


def test_a_read_larger_than_the_block_size_goes_to_the_socket_whole(pair):
    a, b = pair
    s = BufferedSocket(a)
    b.sendall(b"x" * 10)
    assert s.recv(READ_SIZE + 1) == b"x" * 10
    assert s.pending() == 0


def test_the_end_of_the_stream_reaches_paho_as_an_empty_read(pair):
    a, b = pair
    s = BufferedSocket(a)
    b.sendall(b"ab")
    b.shutdown(socket.SHUT_WR)
    assert s.recv(1) == b"a" and s.recv(1) == b"b"
    assert s.recv(1) == b""


def test_plain_writes_pass_through(pair):
    a, b = pair
    s = BufferedSocket(a)
    assert s.send(b"abc") == 3
    assert b.recv(10) == b"abc"
    assert s.unflushed == 0


def test_coalesced_writes_leave_together_on_flush(pair):
    a, b = pair
    b.setblocking(False)
    s = BufferedSocket(a, coalesce=True)
    assert s.send(b"\x40\x02\x00\x01") == 4
    assert s.send(bytearray(b"\x40\x02\x00\x02")) == 4
    assert s.unflushed == 8
    with pytest.raises(BlockingIOError):
        b.recv(100)                           # nothing sent yet
    assert s.flush() is True
    assert b.recv(100) == b"\x40\x02\x00\x01\x40\x02\x00\x02"
    assert s.unflushed == 0


def test_a_full_socket_keeps_the_rest_for_the_next_flush(pair):
    a, b = pair
    s = BufferedSocket(a, coalesce=True)
    big = bytes(range(256)) * 8192          # 2 MiB: more than a socket pair's buffers hold
    s.send(big)
    assert s.flush() is False and 0 < s.unflushed < len(big)
    got = bytearray()
    while len(got) < len(big):
        got += b.recv(1 << 20)
        s.flush()
    assert bytes(got) == big and s.unflushed == 0


def test_a_write_error_is_raised_by_the_next_read_where_paho_sees_a_lost_connection(pair):
    a, b = pair
    s = BufferedSocket(a, coalesce=True)
    b.close()
    s.send(b"\x40\x02\x00\x01")
    assert s.flush() is False
    with pytest.raises(OSError):
        s.recv(1)
    with pytest.raises(OSError):
        s.send(b"more")


def test_close_sends_what_is_kept_first(pair):
    a, b = pair
    s = BufferedSocket(a, coalesce=True)
    s.send(b"\xe0\x00")                     # DISCONNECT, then paho closes the socket
    s.close()
    assert b.recv(10) == b"\xe0\x00"


def test_coalesced_tcp_turns_nagle_off():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        c = socket.create_connection(srv.getsockname())
        peer, _ = srv.accept()
        try:
            assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            BufferedSocket(c, coalesce=True)
            assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            c.close()
            peer.close()
