"""docs/protocol.md sections 8-13 are the contract a third party builds a device from: every
table and example there is checked here against the code that enforces it."""
from __future__ import annotations

import json
import pathlib
import re

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import _acl_text
from dpsense.cloud.analyst.devices import MAX_STATUS_BYTES, classify_status
from dpsense.cloud.transport.gateway.relay import Gateway
from dpsense.cloud.ingest.classify import classify_correction, classify_reading
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.cloud.storage.repository import DeadLetter, Gap
from dpsense.cloud.storage.stream import STATUS_FIELDS
from dpsense.protocol import framing, wire
from tests import vectors

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text()


def _section(title: str) -> str:
    start = DOC.index("\n## " + title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:] if end < 0 else DOC[start:end]


def _blocks(text: str) -> list[str]:
    return [b.strip("\n") for b in re.findall(r"```\n(.*?)```", text, re.S)]


def _table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the markdown table whose first header cell is ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| %s |" % first_header))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def _code(cell: str) -> str:
    return cell.strip().strip("`")


# -- 7. topics and accounts --------------------------------------------------------------------

def test_the_topics_of_device_7_are_the_templates_filled_in() -> None:
    sec = _section("8. Topics and accounts")
    block = dict(re.split(r"\s{2,}", ln, maxsplit=1) for ln in _blocks(sec)[0].splitlines())
    user = topics.DEVICE_USER % 7
    assert block == {"account": user, "client id": user, "readings": topics.READINGS % user,
                     "status": topics.STATUS % user, "corrections": topics.CORRECTIONS, "ack": topics.ACK % user}
    assert topics.device_username(7) == "d7" and topics.device_id_of("d07") is None
    # Every template of the table is the topic it names.
    for row in _table(sec, "topic"):
        for name in re.findall(r"`([A-Z_]+)`", row[1]):
            pattern = getattr(topics, name)
            assert pattern.replace("%s", "d<N>") in row[0] or pattern.replace("%s", "<group>") in row[0], row


def test_the_access_list_in_the_doc_is_the_one_the_broker_writes() -> None:
    accounts = {"d7": "device", "analyst": "analyst", "analyst-ingest": "analyst-ingest",
                "analyst-status": "analyst-status", "correction": "correction",
                "correction-ingest": "correction-ingest", "curator": "curator", "alerts": "alerts"}
    generated = "\n".join(ln for ln in _acl_text(accounts).splitlines() if not ln.startswith("#")).strip()
    assert _blocks(_section("8. Topics and accounts"))[1] == generated


# -- 8. sequence numbers -------------------------------------------------------------------------

def _reading(device: int, boot: int, seq: int, values: tuple[int, ...] = (1200, -5)) -> bytes:
    return wire.encode_reading(device, boot, seq, seq.to_bytes(4, "little") * 2, 3, list(values))


def test_the_gap_vectors_are_what_the_store_counts() -> None:
    rows = _table(_section("9. Boot ids and sequence numbers"), "stored seq")
    assert len(rows) == 4
    with open_analyst_store("sqlite://") as store:
        want = []
        for boot, (stored, first, last, missing) in enumerate(rows, 1):
            batch = [classify_reading("dpsense/readings/d7", _reading(7, boot, int(s)), 0.0) for s in stored.split(",")]
            store.add_batch(batch, [])  # type: ignore[arg-type]
            want.append(Gap(7, boot, int(first), int(last), len(batch), int(missing)))
        assert store.gaps() == want


# -- 9. duplicates and wrong kinds -------------------------------------------------------------

def test_the_duplicate_and_wrong_kind_vectors() -> None:
    payloads = {"R": vectors.READING_V2, "C": vectors.CORRECTION_V2,
                "R'": wire.encode_reading(*vectors.READING_V2_FIELDS[:5], [1201, -5]),
                "C'": wire.encode_correction(*vectors.CORRECTION_V2_FIELDS[:4], 0)}
    rows = _table(_section("10. Duplicates"), "topic")
    assert len(rows) == 11
    with open_analyst_store("sqlite://") as a, open_correction_store("sqlite://") as c:
        for topic_cell, payload_cell, outcome in rows:
            topic = _code(topic_cell)
            name = _code(payload_cell)
            payload = payloads[name] if name in payloads else bytes.fromhex(name)
            corrections = topic == topics.CORRECTIONS
            # Each topic as a deployment routes it: status topics to the status ingest.
            classify = (classify_correction if corrections else
                        classify_status if topic.startswith("dpsense/status/") else classify_reading)
            r = classify(topic, payload, 0.0)
            store = c if corrections else a
            before = (store.count(), store.dead_letter_messages())
            if isinstance(r, DeadLetter):
                new = store.add_batch([], [r])
            else:
                new = store.add_batch([r], [])  # type: ignore[list-item]
            after = (store.count(), store.dead_letter_messages())
            if outcome == "stored":
                assert new == 1 and after == (before[0] + 1, before[1]), (topic, name)
            elif outcome == "duplicate":
                assert new == 0 and after == before and store.last_conflicts == 0, (topic, name)
            else:
                reason = re.fullmatch(r"dead letter `(.*)`", outcome)
                assert reason, outcome
                assert after == (before[0], before[1] + 1), (topic, name)
                assert store.dead_letters(1)[0].reason == reason.group(1), (topic, name)


# -- 10. refused publishes ---------------------------------------------------------------------

def test_the_uplink_settings_in_the_doc_are_the_firmware_s() -> None:
    from tests.portable import fwutil  # noqa: F401  (puts firmware/ on the import path)
    import uplink
    rows = dict(_table(_section("11. Refused publishes"), "setting"))
    assert rows["connections lost in a row on the same oldest never-PUBACKed record before it is dropped"] == \
        str(uplink.REFUSED_AFTER)
    app = (ROOT / "firmware" / "app.py").read_text()
    assert rows["first reconnect delay"] == "250 ms" and 'cfg["ack_timeout_ms"], 250,' in app
    cfg = (ROOT / "shared_protocol" / "config.py").read_text()
    assert rows["longest delay"] == "`backoff_max_ms`, 30000 ms by default" and "``backoff_max_ms`` (30000)" in cfg
    assert "delay += self.rng.getrandbits(16) * (delay // 4) >> 16" in (ROOT / "firmware" / "uplink.py").read_text()


# -- 11. line lengths --------------------------------------------------------------------------

def test_the_line_lengths_are_the_framing_constants() -> None:
    rows = {r[0]: r[1] for r in _table(_section("12. Line lengths"), "line")}
    assert rows["payload of one frame"] == "1..%d bytes" % framing.MAX_PAYLOAD
    assert rows["framed line, `\\r` and `\\n` included"] == "%d bytes" % framing.MAX_LINE
    longest = framing.frame(bytes(framing.MAX_PAYLOAD))
    assert len(longest) + 1 == framing.MAX_LINE          # with a "\r" before the "\n"
    assert framing.unframe(longest[:-1] + b"\r\n") == bytes(framing.MAX_PAYLOAD)
    assert rows["console or status line a gateway reads"] == "%d bytes" % framing.MAX_TEXT
    assert rows["poll (board to gateway), `\\n` included"] == "4 bytes" and len(b"!99\n") == 4
    assert rows["acknowledgement line (gateway to board), `\\n` included"] == "18 bytes"
    assert rows["status message over MQTT"] == "%d bytes" % MAX_STATUS_BYTES


# -- 12. poll replies and status messages ------------------------------------------------------

def test_the_poll_transcript_is_what_the_gateway_answers() -> None:
    lines = _blocks(_section("13. Poll replies"))[0].splitlines()
    mids = iter(range(1, 100))
    gw = Gateway(7, lambda topic, payload: next(mids), lambda s: None)
    frames = {"frame of the reading of 1.4": vectors.READING_V2_FRAME,
              "frame of the correction of 1.4": vectors.CORRECTION_V2_FRAME}
    polls = 0
    answers: list[bytes] = []
    for ln in lines:
        who, text = ln.split(">", 1)
        text = text.strip()
        if who == "board":
            if text in frames:
                gw.feed(frames[text])
                continue
            polls += 1
            if polls == 2:                     # both ingests committed the record meanwhile
                gw.acked(1)
                gw.acked(2)
                for of in (wire.KIND_READING, wire.KIND_CORRECTION):
                    for m in wire.encode_acks(of, 7, 1, [(42, 42)]):
                        gw.committed(m)
            gw.feed(text.encode() + b"\n")
            answers.append(gw.take_replies())
        else:
            assert who == "gateway"
            assert answers[-1].startswith(text.encode() + b"\n"), (ln, answers[-1])
            answers[-1] = answers[-1][len(text) + 1:]
    assert all(a == b"" for a in answers)
    assert vectors.TOKEN.hex() == "0123456789abcdef"


def test_the_status_fields_are_the_firmware_s_and_the_example_is_accepted() -> None:
    sec = _section("13. Poll replies")
    fields = [f for row in _table(sec, "field") for f in re.findall(r"`([a-z_]+)`", row[0])]
    app = (ROOT / "firmware" / "app.py").read_text()
    template = app[app.index("text = ('{\"event\""):app.index('if self.released else ""))')]
    # `error` is the gateway's, in its `stopped` message (section 2.3), never a board's
    assert [f for f in fields if f != "error"] == re.findall(r'\\?"([a-z_]+)\\?":', template.replace('\\"', '"'))
    example = _blocks(sec)[1]
    doc = json.loads(example)
    # eps_cs and eps_a are sent only by a board with epsilon_cs, epsilon_a set; the example's board has neither;
    # last_seq comes once a record was released; the example is a boot's
    assert list(doc) == [f for f in fields if f not in ("eps_cs", "eps_a", "last_seq", "error")]
    assert len(example) <= MAX_STATUS_BYTES
    got = classify_status("dpsense/status/d7", example.encode(), 0.0)
    assert not isinstance(got, DeadLetter) and (got.device_id, got.boot_id) == (7, doc["boot"])
    assert set(STATUS_FIELDS) - {"mem_free"} <= set(fields)
    assert isinstance(classify_status("dpsense/status/d8", example.encode(), 0.0), DeadLetter)
