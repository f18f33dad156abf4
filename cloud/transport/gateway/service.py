"""``dpsense gateway``'s loop: a board's serial line on one side, the broker on the other.

    stats = run("/dev/ttyACM0", 7, "127.0.0.1", 1883, password)    # until Ctrl-C or the line closes

Logs in as the device's own account (``d<N>``) with MQTT v5, a clean start and QoS 1 (over TLS
when ``tls_ca`` names the broker's CA), opens the port (cloud/transport/serialport.py) once the
broker accepted it, feeds what the board writes to a ``Gateway`` (relay.py), writes the
answers to its polls back, and reports each PUBACK to it, a refused one (reason code >= 0x80)
as such (relay.py's ``refused``: counted per device in the analyst's store); paho's client reconnects by itself when the broker goes away. On the
way out it waits up to 10 s for the last acknowledgements.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from dpsense.cloud.transport import topics
from dpsense.cloud.transport.gateway.relay import Gateway, GatewayStats
from dpsense.cloud.transport.serialport import open_transport


def run(port: str, device_id: int, host: str, port_no: int, password: str,
        baud: int = 115200, stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None, idle_exit: float | None = None,
        keepalive: int = 60, tls_ca: str | None = None) -> GatewayStats:
    """Relay until ``stop`` is set, the line closes, or ``idle_exit`` seconds without a line."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    stop = stop or threading.Event()
    user = topics.device_username(device_id)
    # The broker makes the account name the client id (cloud/deploy/broker.py).
    # MQTT v5: a PUBACK carries a reason code, so a publish the broker refuses is seen and counted.
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
    client.username_pw_set(user, password)
    if tls_ca:
        client.tls_set(ca_certs=tls_ca)       # chain and host name checked
    client.max_inflight_messages_set(100)
    # paho annotates the delays as int; it waits for any number of seconds.
    client.reconnect_delay_set(0.2, 5)  # type: ignore[arg-type]
    connected = threading.Event()

    def on_connect(c: mqtt.Client, userdata: Any, flags: mqtt.ConnectFlags, reason: mqtt.ReasonCode,
                   props: mqtt.Properties | None) -> None:
        if reason.is_failure:
            log("gateway: broker refused %s: %s" % (user, reason))
            return
        log("gateway: connected to %s:%d as %s" % (host, port_no, user))
        # The cloud's acknowledgements of committed records (QoS 0; a lost one costs a resend).
        c.subscribe(topics.ACK % user, qos=0)
        connected.set()

    gw = Gateway(device_id, lambda t, p: client.publish(t, p, qos=1).mid, log)
    client.on_connect = on_connect
    client.on_publish = on_publish_for(gw)
    client.on_message = lambda c, userdata, msg: gw.committed(bytes(msg.payload), msg.topic)
    client.connect(host, port_no, keepalive=keepalive, clean_start=True)
    client.loop_start()
    src = None
    try:
        if not connected.wait(15):
            from dpsense.cloud.transport.session import tls_hint
            raise ConnectionError("no connection to the broker at %s:%d as %s%s"
                                  % (host, port_no, user, tls_hint(tls_ca)))
        src = open_transport(port, baud)
        log("gateway: reading %s for device %d" % (port, device_id))
        last = time.monotonic()
        while not stop.is_set():
            try:
                data = src.read_some(0.05)
                if data:
                    gw.feed(data)
                    last = time.monotonic()
                reply = gw.take_replies()
                if reply:
                    src.write(reply)
            except OSError as e:          # the line closed (serialport.PortError) or failed
                log("gateway: %s: %s; stopping" % (port, e))
                break
            gw.tick()
            if idle_exit is not None and time.monotonic() - last > idle_exit:
                break
        deadline = time.monotonic() + 10
        while not gw.all_acked() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if src is not None:
            src.close()
        client.disconnect()
        client.loop_stop()
    s = gw.stats
    log("gateway: done: %d readings and %d corrections published, %d acknowledged, %d records "
        "acknowledged to the board, %d malformed lines, %d console lines"
        % (s.readings, s.corrections, s.acked, s.replies, s.malformed, s.console))
    return s


def on_publish_for(gw: Gateway) -> Callable[..., None]:
    """paho's (API version 2) ``on_publish`` for ``gw``: every PUBACK is reported, a refused one
    (an MQTT v5 reason code >= 0x80) also as a refusal."""
    def on_publish(c: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        gw.acked(mid)
        if reason.is_failure:
            gw.refused(str(reason), mid)
    return on_publish
