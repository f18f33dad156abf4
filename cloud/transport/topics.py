"""MQTT topic names and device accounts for the cloud side.

The names are defined once, in shared_protocol/topics.py, which the boards import too;
this module adds what only CPython needs: turning device ids into account names and
back, and reading the device out of a readings topic.
"""
from __future__ import annotations

import re

from dpsense.protocol.layout import DEVICE_ID_MAX
from dpsense.protocol.topics import (
    ACK,
    ACK_ALL,
    ACK_CORRECTIONS,
    ACK_CORRECTIONS_ALL,
    ACK_READINGS,
    ACK_READINGS_ALL,
    ALERTS,
    ALERTS_ALL,
    CORRECTIONS,
    DEVICE_USER,
    READINGS,
    READINGS_ALL,
    ROUND_TO_ANALYST,
    ROUND_TO_CS,
    STATUS,
    STATUS_ALL,
)

__all__ = [
    "MAX_PACKET", "ACK", "ACK_ALL", "ACK_CORRECTIONS", "ACK_CORRECTIONS_ALL", "ACK_READINGS", "ACK_READINGS_ALL",
    "CORRECTIONS", "DEVICE_USER", "READINGS", "READINGS_ALL", "ROUND_TO_ANALYST", "ROUND_TO_CS",
    "STATUS", "STATUS_ALL", "device_id_of", "device_of_reading_topic", "device_username",
]

#: The broker's packet-size limit (cloud/deploy/broker.py writes it into Mosquitto's configuration;
#: cloud/correction/chunks.py cuts round messages below it).
MAX_PACKET = 64 * 1024

# DEVICE_USER with a decimal id without leading zeros (the only spelling "%d" writes).
_DEVICE_USER = re.compile(re.escape(DEVICE_USER).replace("%d", "([1-9][0-9]{0,9})"))
_READINGS_PREFIX = READINGS % ""


def device_username(device_id: int) -> str:
    if not 1 <= device_id <= DEVICE_ID_MAX:
        raise ValueError("device_id must be in 1..2**32-1")
    return DEVICE_USER % device_id


def device_id_of(username: str) -> int | None:
    """The device id a username stands for, or None if it is not a device account."""
    m = _DEVICE_USER.fullmatch(username)
    if not m:
        return None
    v = int(m.group(1))
    return v if v <= DEVICE_ID_MAX else None


def device_of_reading_topic(topic: str) -> int | None:
    if not topic.startswith(_READINGS_PREFIX):
        return None
    return device_id_of(topic[len(_READINGS_PREFIX):])
