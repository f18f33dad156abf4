"""Issue 15: the ingest's log line and `dpsense status` give the same figures for the same messages."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from dpsense.cloud import cli
from dpsense.cloud.ingest.service import Connection, IngestService, _Msg
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.protocol import wire

_LOG = re.compile(r"ingest \S+: (\d+) received, (\d+) stored, (\d+) duplicates, (\d+) dead letters")


def _reading(device: int, seq: int, value: int = 1200, topic_device: int | None = None) -> _Msg:
    payload = wire.encode_reading(device, 1, seq, bytes([seq]) * 8, 3, [value, -5])
    return _Msg("dpsense/readings/d%d" % (topic_device or device), payload, 0, 0, 1, 0.0)


def _correction(token: int, d_diff: int) -> _Msg:
    return _Msg("dpsense/corrections", wire.encode_correction(7, 1, token, token.to_bytes(8, "little"), d_diff), 0, 0, 1, 0.0)


def _run(svc: IngestService, batches: list[list[_Msg]], logs: list[str]) -> tuple[int, ...]:
    svc.start = lambda timeout=10.0: None          # type: ignore[method-assign]  # no broker here
    for b in batches:
        assert svc.process(b, threading.Event()) is True
    svc._progress()
    m = _LOG.search(logs[-1])
    assert m, logs
    return tuple(int(x) for x in m.groups())


def _status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["status", "--data-dir", str(tmp_path)]) == 0
    return capsys.readouterr().out


def test_the_ingest_log_and_status_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conn = Connection("127.0.0.1", 1, "analyst-ingest", "pw", "analyst-ingest")
    # Readings: 4 new; 3 redelivered identically (duplicates); 2 with the same key and other
    # values (conflicting: dead letters); 3 identical bad payloads, one on a wrong topic, one
    # correction on a readings topic, one whose device_id is not the account's (6 dead letters).
    batches = [[_reading(7, s) for s in range(4)],
               [_reading(7, s) for s in range(3)] + [_reading(7, 0, 999), _reading(7, 1, 999)]
               + [_Msg("dpsense/readings/d7", b"\x01", 0, 0, 1, 0.0)] * 3
               + [_Msg("dpsense/status/d7", _reading(7, 9).payload, 0, 0, 1, 0.0),
                  _Msg("dpsense/readings/d7", _correction(1, 5).payload, 0, 0, 1, 0.0),
                  _reading(8, 9, topic_device=7)]]
    logs: list[str] = []
    with open_analyst_store("sqlite:///%s" % (tmp_path / "analyst.db")) as store:
        got = _run(IngestService.for_analyst(conn, store, log=logs.append), batches, logs)
    assert got == (15, 4, 3, 8)
    # Corrections: 3 new, 2 duplicates, 1 conflicting, 2 identical bad payloads.
    cbatches = [[_correction(t, t) for t in (1, 2, 3)],
                [_correction(1, 1), _correction(2, 2), _correction(3, 30)]
                + [_Msg("dpsense/corrections", b"\x01\x02", 0, 0, 1, 0.0)] * 2]
    clogs: list[str] = []
    with open_correction_store("sqlite:///%s" % (tmp_path / "correction.db")) as cstore:
        cgot = _run(IngestService.for_correction(conn, cstore, log=clogs.append), cbatches, clogs)
    assert cgot == (8, 3, 2, 3)

    out = _status(tmp_path, capsys)
    received, stored, dups, dead = got
    assert "analyst     %d readings, %d dead letters (" % (stored, dead) in out, out
    assert "  ingest: %d received, %d stored, %d duplicates, %d dead letters" % got in out, out
    assert "correction  %d records, %d dead letters (" % (cgot[1], cgot[3]) in out, out
    assert received == stored + dups + dead and cgot[0] == cgot[1] + cgot[2] + cgot[3]
