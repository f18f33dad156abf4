"""A service's MQTT session: at start-up, connected or one clear error; later, losses logged.

    session = Session(conn, "analyst", log)
    client.on_connect = lambda c, u, flags, reason, props: session.accepted(reason) and c.subscribe(...)
    client.on_disconnect = lambda c, u, flags, reason, props: session.lost(reason)
    session.start(client)        # BrokerUnreachable: nothing listens, refused, or no answer
    session.start(client, loop=net)  # the same, with a cloud/transport/mqttio.py NetworkLoop driving it

The ingest, the analyst and the correction server behave alike. A broker that cannot be
reached when a service starts ends the service with one line and a non-zero exit status,
so a service manager restarts it with its own backoff (systemd ``Restart=on-failure``)
and shows the reason in its status. Once the session is up, a lost connection is logged
and paho reconnects on its own with a capped backoff: the persistent session keeps the
QoS 1 messages the service has not acknowledged.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from dpsense.cloud.errors import BrokerUnreachable, UsageError

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from dpsense.cloud.transport.mqttio import NetworkLoop


@dataclass(frozen=True)
class Connection:
    """How a service reaches the broker."""

    host: str
    port: int
    username: str
    password: str
    client_id: str
    keepalive: int = 30
    tls_ca: str | None = None       # CA (PEM) to check the broker's TLS certificate; None: plain

    def apply(self, client: mqtt.Client) -> None:
        """Credentials, and TLS (certificate chain and host name checked) when ``tls_ca`` is set."""
        client.username_pw_set(self.username, self.password)
        if self.tls_ca:
            try:
                client.tls_set(ca_certs=self.tls_ca)
            except (OSError, ValueError) as e:
                raise UsageError("--tls-ca %s: %s" % (self.tls_ca, getattr(e, "strerror", None) or e)) from None


def tls_hint(tls_ca: str | None) -> str:
    """What to do when a plain client meets a broker that says nothing: it may speak TLS."""
    if tls_ca:
        return ""
    return ("; if it speaks MQTT over TLS (`dpsense broker run --tls`, usually port 8883), give --tls-ca "
            "with its CA certificate (e.g. dpsense-data/broker/tls/ca.pem)")


class Session:
    """Connection state one service's paho callbacks share with its own thread."""

    def __init__(self, conn: "Connection", who: str, log: Callable[[str], None]) -> None:
        self.conn = conn
        self.who = who
        self.log = log
        self.up = threading.Event()
        self._refused: str | None = None
        self._closed = False            # the broker closed the connection before answering
        self._started = False

    @property
    def where(self) -> str:
        return "%s:%d" % (self.conn.host, self.conn.port)

    def accepted(self, reason: Any) -> bool:
        """For ``on_connect``: whether the broker accepted the session (then subscribe)."""
        if reason.is_failure:
            self._refused = str(reason)
            if self._started:
                self.log("%s: the broker at %s refused the connection of %s: %s; retrying"
                         % (self.who, self.where, self.conn.username, reason))
            return False
        if self._started:
            self.log("%s: connected to the broker at %s again" % (self.who, self.where))
        self._refused = None
        self.up.set()
        return True

    def lost(self, reason: Any) -> None:
        """For ``on_disconnect``; the service's own disconnect (not a failure) is not news."""
        if not self._started and not self.up.is_set() and reason.is_failure:
            self._closed = True
        if self._started and self.up.is_set() and reason.is_failure:
            self.log("%s: lost the connection to the broker at %s (%s); reconnecting"
                     % (self.who, self.where, reason))
        self.up.clear()

    def start(self, client: "mqtt.Client", timeout: float = 10.0, loop: "NetworkLoop | None" = None) -> None:
        """Connect ``client`` and start its network thread (paho's, or ``loop``); return once
        the broker accepted."""
        c = self.conn
        self._refused = None
        try:
            client.connect(c.host, c.port, keepalive=c.keepalive)
        except OSError as err:
            raise BrokerUnreachable("cannot reach the broker at %s: %s"
                                    % (self.where, err.strerror or err)) from err
        if loop is None:
            client.loop_start()
        else:
            loop.start()
        deadline = time.monotonic() + timeout
        while not self.up.wait(0.05):
            if self._refused is None and time.monotonic() < deadline:
                continue
            closed = self._closed           # before our own disconnect below
            if loop is None:
                client.disconnect()         # also ends paho's reconnect attempts
                client.loop_stop()
            else:
                loop.stop()
            if self._refused is not None:
                raise BrokerUnreachable("the broker at %s refused account %s: %s"
                                        % (self.where, c.username, self._refused))
            if closed:
                raise BrokerUnreachable("the broker at %s closed the connection without answering (%.0f s)%s"
                                        % (self.where, timeout, tls_hint(c.tls_ca)))
            raise BrokerUnreachable("no answer from the broker at %s within %.0f s%s"
                                    % (self.where, timeout, tls_hint(c.tls_ca)))
        self._started = True
