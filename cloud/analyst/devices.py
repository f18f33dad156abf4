"""Device groups and board status messages, on the analyst's side.

    check_group("hall-a")                                   # a group name, or ValueError
    svc = status_ingest(conn, store)                        # dpsense/status/+ -> store.add_statuses
    svc.run(stop)

A device's group is the analyst's business: it decides which readings share a detection
window (the detector assumes one population per window). ``dpsense broker add-device 7 --group
hall-a`` writes it to the analyst's store, which the analyst reads when it closes windows; the
broker knows nothing of groups and the correction server never learns them. A device never put
in a group is in ``DEFAULT_GROUP``.

Boards publish a status message (JSON, never a value) at boot and when a ledger window reaches
its cap: the epsilon of a record, the worst case, the window's spend and cap, the entropy source
(firmware/app.py; the gateway writes the same for the micro:bit). The analyst stores the fields
it knows (``storage.stream.STATUS_FIELDS``) per device and boot; ``dpsense results devices``
shows the latest.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from dpsense.cloud.transport import topics
from dpsense.cloud.ingest.service import IngestService, shared_filter
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.storage import AnalystStore, DeadLetter, DeviceStatus
from dpsense.cloud.storage.repository import DEAD_LETTER_PREFIX
from dpsense.cloud.storage.stream import DEFAULT_GROUP
from dpsense.protocol import wire

__all__ = ["DEFAULT_GROUP", "StatusSink", "check_group", "classify_status", "status_ingest"]

MAX_STATUS_BYTES = 2048
# A group name is one MQTT topic level of the alert topic (dpsense/alerts/<group>).
_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_group(name: str) -> str:
    if not _GROUP.fullmatch(name):
        raise ValueError("a group name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or "
                         "digit, got %r" % name)
    return name


def classify_status(topic: str, payload: bytes, received_at: float) -> DeviceStatus | DeadLetter:
    """A status message of the device its topic names, or a dead letter with the reason."""
    parts = topic.split("/")
    device = topics.device_id_of(parts[2]) if len(parts) == 3 and parts[:2] == ["dpsense", "status"] else None
    if device is None:
        return DeadLetter(topic, payload, "not a device status topic", received_at)
    if len(payload) > MAX_STATUS_BYTES:
        # The store keeps a prefix; the size and SHA-256 are the whole payload's.
        return DeadLetter(topic, payload[:DEAD_LETTER_PREFIX], "status message over %d bytes" % MAX_STATUS_BYTES,
                          received_at, size=len(payload), sha256=hashlib.sha256(payload).digest())
    if len(payload) >= 2 and payload[0] == wire.VERSION:
        # A protocol record (docs/protocol.md 1.3) where JSON belongs: say which, as the other topics do.
        return DeadLetter(topic, payload, "kind %d message on a status topic" % payload[1], received_at)
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        return DeadLetter(topic, payload, "status message is not JSON: %s" % e, received_at)
    if not isinstance(doc, dict):
        return DeadLetter(topic, payload, "status message is not a JSON object", received_at)
    if doc.get("device") not in (None, device):
        return DeadLetter(topic, payload, "device %r does not match topic user d%d" % (doc.get("device"), device),
                          received_at)
    boot = doc.get("boot")
    return DeviceStatus(device, boot if isinstance(boot, int) and not isinstance(boot, bool) else None,
                        received_at, doc, topic)


class StatusSink:
    """Lets ``IngestService`` commit status messages: its ``add_batch`` is the store's ``add_statuses``."""

    # A status message that differs from a stored one is another message, never a conflict.
    last_conflicts = 0

    def __init__(self, store: AnalystStore) -> None:
        self.store = store

    def add_batch(self, records: list[DeviceStatus], dead: list[DeadLetter]) -> int:
        return self.store.add_statuses(records, dead)


def status_ingest(conn: Connection, store: AnalystStore, share: str | None = None, **kw: Any) -> IngestService:
    """The ingest loop for ``dpsense/status/+`` into the analyst's store (QoS 1, acknowledged after
    commit); ``share``: as one worker of that MQTT shared subscription group."""
    return IngestService(conn, shared_filter(share, topics.STATUS_ALL), classify_status, StatusSink(store), **kw)
