"""Turn one (topic, payload) into a record to store or a dead letter with its reason.

Pure functions: no I/O, never raise. The analyst accepts only reading records on a
device's own readings topic; the correction server accepts only correction records.
"""
from __future__ import annotations

from functools import lru_cache

from dpsense.cloud.transport import topics
from dpsense.cloud.storage.repository import Correction, DeadLetter, Reading
from dpsense.protocol import wire
from dpsense.protocol.wire import ProtocolError


# A fleet publishes on a few thousand topics at most; parsing each topic once saves the ingest
# a regular expression per message.
_device_of_topic = lru_cache(maxsize=1 << 16)(topics.device_of_reading_topic)


def classify_reading(topic: str, payload: bytes, received_at: float) -> Reading | DeadLetter:
    try:
        device = _device_of_topic(topic)
        if device is None:
            return DeadLetter(topic, payload, "not a device readings topic", received_at)
        kind, fields = wire.decode(payload)
        if kind != wire.KIND_READING:
            return DeadLetter(topic, payload, "kind %d message on a readings topic" % kind, received_at)
        device_id, boot_id, seq, token, config_id, values = fields
        if device_id != device:
            return DeadLetter(topic, payload, "device_id %d does not match topic user d%d"
                              % (device_id, device), received_at)
        # The payload's value bytes are the stored layout already (wire.decode_reading checked them).
        return Reading(device_id, boot_id, seq, token, config_id, values, topic, received_at,
                       bytes(payload[wire.READING_HEAD_SIZE:]))
    except ProtocolError as e:
        return DeadLetter(topic, payload, "malformed: %s" % e, received_at)
    except Exception as e:  # the service must outlive any payload
        return DeadLetter(topic, payload, "unexpected %s: %s" % (type(e).__name__, e), received_at)


def classify_correction(topic: str, payload: bytes, received_at: float) -> Correction | DeadLetter:
    try:
        if topic != topics.CORRECTIONS:
            return DeadLetter(topic, payload, "not the corrections topic", received_at)
        kind, fields = wire.decode(payload)
        if kind != wire.KIND_CORRECTION:
            return DeadLetter(topic, payload, "kind %d message on the corrections topic" % kind,
                              received_at)
        device_id, boot_id, seq, token, d_diff = fields
        return Correction(token, d_diff, received_at, device_id, boot_id, seq, topic, payload)
    except ProtocolError as e:
        return DeadLetter(topic, payload, "malformed: %s" % e, received_at)
    except Exception as e:
        return DeadLetter(topic, payload, "unexpected %s: %s" % (type(e).__name__, e), received_at)
