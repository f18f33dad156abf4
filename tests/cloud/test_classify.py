"""cloud/ingest/classify.py: a reading keeps its payload's value bytes, and storing them is
storing what a packed reading stores: the same blob, the same window for detection."""
from __future__ import annotations

import numpy as np
import pytest

from dpsense.cloud.ingest.classify import classify_correction, classify_reading
from dpsense.cloud.storage import DeadLetter, Reading, open_analyst_store
from dpsense.cloud.storage.repository import pack_values, stored_values
from tests import vectors

TOPIC = "dpsense/readings/d7"


def test_a_reading_keeps_the_value_bytes_of_its_payload():
    r = classify_reading(TOPIC, vectors.READING_V2, 5.0)
    assert isinstance(r, Reading)
    assert r.values == (1200, -5)
    # b0 04 00 00 | fb ff ff ff: the last 8 bytes of the golden reading (docs/protocol.md 1.4)
    assert r.packed == bytes([0xB0, 0x04, 0x00, 0x00, 0xFB, 0xFF, 0xFF, 0xFF])
    assert stored_values(r) == pack_values(r.values) == r.packed


def test_stored_as_from_the_payload_or_packed_the_rows_are_the_same(tmp_path):
    kept = classify_reading(TOPIC, vectors.READING_V2, 5.0)
    assert isinstance(kept, Reading)
    packed = Reading(*vectors.READING_V2_FIELDS[:5], (1200, -5), TOPIC, 5.0)
    assert packed == kept                              # ``packed`` is not content
    stores = []
    for name, reading in (("kept", kept), ("packed", packed)):
        store = open_analyst_store("sqlite:///%s/%s.db" % (tmp_path, name))
        assert store.add_batch([reading], []) == 1
        assert store.add_batch([packed if reading is kept else kept], []) == 0   # a duplicate, no conflict
        assert store.dead_letter_count() == 0
        stores.append(store)
    a, b = (s.window(1, 10) for s in stores)
    assert a.values.tolist() == b.values.tolist() == [[1200, -5]]
    assert a.values.dtype == np.int64
    assert [r for _, r in stores[0].readings_after(0, 10)] == [packed]
    for s in stores:
        s.close()


def test_packed_bytes_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError, match="4 bytes per value"):
        Reading(7, 1, 42, vectors.TOKEN, 3, (1200, -5), TOPIC, 5.0, b"\x00" * 4)


def test_a_malformed_reading_is_still_a_dead_letter():
    bad = vectors.READING_V2[:-1]
    assert isinstance(classify_reading(TOPIC, bad, 1.0), DeadLetter)
    assert isinstance(classify_correction(TOPIC, vectors.CORRECTION_V2, 1.0), DeadLetter)
