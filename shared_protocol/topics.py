"""MQTT topic names and the device account name: one place, so the broker's ACL, the
cloud services, the gateway and the boards agree.

    user = DEVICE_USER % 7                  # "d7": the broker account of device 7
    (READINGS % user).encode()              # b"dpsense/readings/d7", where it publishes

Devices log in as ``d<device_id>`` and publish readings and status under their own
name; the correction topic is shared (a sealed record names its device in its clear head:
the correction server needs it to pick the key, docs/privacy.md). A device reads only its own
acknowledgements, one topic per kind of record (``ACK_READINGS``, ``ACK_CORRECTIONS``; it
subscribes to both with the filter ``ACK``): the broker lets the analyst's ingest publish only
on the first and the correction server's ingest only on the second, and a device takes an
acknowledgement only for the kind its topic names (``wire.decode_ack``), so neither ingest can
release the other's records. Templates take ``%``, as the rest of the board code does; the
``*_ALL`` filters are the templates filled with the MQTT wildcard.
"""

DEVICE_USER = "d%d"                        # % device_id
READINGS = "dpsense/readings/%s"           # % device account
READINGS_ALL = READINGS % "+"
CORRECTIONS = "dpsense/corrections"
STATUS = "dpsense/status/%s"               # % device account
STATUS_ALL = STATUS % "+"
ROUND_TO_CS = "dpsense/round/to-cs"
ROUND_TO_ANALYST = "dpsense/round/to-analyst"
ACK = "dpsense/ack/%s/+"                   # % device account: both kinds of its acknowledgements
ACK_READINGS = "dpsense/ack/%s/r"          # % device account: committed readings (the analyst's ingest)
ACK_CORRECTIONS = "dpsense/ack/%s/c"       # % device account: committed corrections (the CS's ingest)
ACK_READINGS_ALL = ACK_READINGS % "+"
ACK_CORRECTIONS_ALL = ACK_CORRECTIONS % "+"
ACK_ALL = ACK % "+"
ALERTS = "dpsense/alerts/%s"               # % device group: a window's new candidates
ALERTS_ALL = ALERTS % "+"
