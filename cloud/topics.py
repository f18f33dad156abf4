"""MQTT topic names: one place, so the ACL, the services and the boards agree.

Devices authenticate as ``d<device_id>`` and publish readings under their own name; the
correction topic is shared and names no device, so the correction server cannot tie a
token to a device.
"""
from __future__ import annotations

import re

READINGS = "dpsense/readings/%s"          # % device username
READINGS_ALL = "dpsense/readings/+"
CORRECTIONS = "dpsense/corrections"
STATUS = "dpsense/status/%s"
STATUS_ALL = "dpsense/status/+"
ROUND_TO_CS = "dpsense/round/to-cs"
ROUND_TO_ANALYST = "dpsense/round/to-analyst"
ALERTS = "dpsense/alerts/%s"              # % device group: a window's candidates (cloud/alerts.py)
ALERTS_ALL = "dpsense/alerts/+"

_DEVICE_USER = re.compile(r"d([1-9][0-9]{0,9})")


def device_username(device_id: int) -> str:
    if not 1 <= device_id <= 0xFFFFFFFF:
        raise ValueError("device_id must be in 1..2**32-1")
    return "d%d" % device_id


def device_id_of(username: str) -> int | None:
    """The device id a username stands for, or None if it is not a device account."""
    m = _DEVICE_USER.fullmatch(username)
    if not m:
        return None
    v = int(m.group(1))
    return v if v <= 0xFFFFFFFF else None


def device_of_reading_topic(topic: str) -> int | None:
    parts = topic.split("/")
    if len(parts) != 3 or parts[0] != "dpsense" or parts[1] != "readings":
        return None
    return device_id_of(parts[2])
