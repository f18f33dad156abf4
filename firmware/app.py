"""The board's main loop: read -> ledger -> scale -> perturb -> d_diff -> token -> encode -> send.

    main("config.json")          # validate, build, run: what firmware/main.py calls
    app = App(cfg, profile)      # or by hand, with a validated config
    app.boot(); app.run()

The config's ``board`` key names the profile (firmware/boards/) to run; without it
the port is detected. Per reading, the privacy ledger charges (and persists) the
record's epsilon before anything is computed from it; a withheld reading releases
nothing and takes no sequence number, so the cloud sees no gap. A released record
goes to the ring buffer on flash, which the uplink drains to the broker (MQTT
boards), or the serial link writes to the console as two framed lines for a gateway
and keeps until the gateway acknowledges it (serial boards, seriallink.py).

Release schedule: a reading is taken at each tick of ``period_ms`` and its record is
held until the next tick, when it goes to the ring or the console before the next
reading is taken. How long the noise took to draw (it grows with the noise's
magnitude) therefore never shows in when a record leaves: the loop waits for the tick's
millisecond edge by watching ``ticks_ms`` for the last ``SPIN_MS``, not with a
``sleep_ms`` counted from a call that comes after the draw (whose sub-millisecond phase
would carry the draw's time). A record drawn after its tick had passed leaves at the next
tick still ahead (the schedule skips the missed ones) and is counted in the status's
``late``: only whether a draw overran a whole period can show, never when it ended. ``period_ms`` 0 (rigs) has no
schedule: each record leaves as soon as it is drawn, and its timing follows |noise|
(tests/statistical/test_release_timing.py measures both).
Readings come from the config's ``stimulus`` when it has one (on any board), else
from the profile's sensor; the ``boot ok`` line ends with ``sensor=<kind>``.

Console lines a rig can wait for: ``boot ok: ...``, ``config error: <key>: ...``,
``stimulus error: <file>:<line>: ...`` (then exit status 2, as for a config error),
``entropy error: ...`` (no hardware entropy: nothing is released, exit status 2),
``seal error: ...`` (corrections "sealed" without a usable key file or AES: exit status 2),
``ledger: window N cap ... reached ...``, ``ledger: releases stopped: <why>`` (a damaged
or missing ledger, a clock behind the ledger, the lifetime cap; status event
``ledger_stopped``, and the status's ``ledger`` field says why), ``mqtt: connected ...``,
``mqtt: connection lost ...``, ``stimulus done: ...``, ``idle: ...``. A serial board writes
the line it stops on, and each status line, again with backoff until its gateway answers it
(seriallink.py, docs/protocol.md 2.3), so a gateway attached later still hears them. Status
events: ``boot``, ``window_cap``, ``ledger_stopped``, ``progress`` (at least every
``STATUS_MS`` while releasing) and ``done`` (the stimulus ended), each with ``last_seq``.
"""

import sys
import time

try:
    from shared_protocol import __version__
    from shared_protocol.fixedpoint import Affine
    from shared_protocol.mechanism import Column, RecordMechanism
    from shared_protocol.rng import UrandomRNG
    from shared_protocol import topics, wire
    from shared_protocol.config import ConfigError, board_name, validate
    from shared_protocol.layout import SEALED_SIZE
    # SealError: a board told to seal that cannot (no keys, no AES, a nonce that would
    # repeat) releases nothing more: main() ends it with one line.
    from shared_protocol.seal import SealError, Sealer, split_keys
except ImportError:
    __version__ = "unknown"       # flat modules carry no package __init__, nor its version
    from fixedpoint import Affine
    from mechanism import Column, RecordMechanism
    from rng import UrandomRNG
    import topics  # type: ignore[no-redef]  # flat file system: the same module
    import wire  # type: ignore[no-redef]  # flat file system: the same module
    from config import ConfigError, board_name, validate
    from layout import SEALED_SIZE
    from seal import SealError, Sealer, split_keys

from ledger import CAPPED, OK, STOPPED, Ledger, frac_text
from node import Node
import sensor


def make_sealer(cfg):
    """The sealer of a board whose config says ``corrections: sealed`` (None for plaintext).
    No key file, a damaged one or no AES on the port stops the board: a plain record in its
    place would hand token and d_diff to the broker."""
    if cfg["corrections"] != "sealed":
        return None
    path = cfg["seal_key_path"]
    try:
        f = open(path, "rb")
        data = f.read()
        f.close()
    except OSError:
        raise SealError("%s: no key file; provision the board again (tools/flash.py provision)" % path)
    try:
        enc, mac = split_keys(data)
        return Sealer(enc, mac)
    except SealError as e:
        raise SealError("%s: %s" % (path, e))
    except ImportError:
        raise SealError("this port has no cryptolib (AES); provision it with corrections "
                        "\"plaintext\" and the correction server's plaintext switch")


class EntropyError(Exception):
    """The board has no hardware entropy to draw noise from; it releases nothing."""


def make_rng(profile):
    """``(rng, description)``: the profile's hardware entropy source. A port without it
    raises EntropyError: noise from a PRNG such as ``random.getrandbits`` can be replayed
    from its state (a 32-bit state on the micro:bit), so it would be no privacy at all."""
    if profile["entropy"] == "urandom":
        try:
            rng = UrandomRNG()
            rng.getrandbits(8)
            return rng, "os.urandom"
        except (AttributeError, ImportError, OSError):
            raise EntropyError("os.urandom is missing or failing on this port; "
                               "no noise without a hardware source, so nothing is released")
    raise EntropyError("entropy source %r: firmware/app.py draws only from os.urandom "
                       "(the micro:bit's node is mbnode.py)" % profile["entropy"])


# A status message (with the last seq released) at least this often while releasing: a boot's
# tail that never reaches the cloud shows against it (docs/protocol.md 13.2).
STATUS_MS = 300000

# The last milliseconds before a tick are polled, not slept: sleep_ms may wake up to about
# a millisecond late, and a late wake would carry the phase of the draw before it.
SPIN_MS = 2


class App:
    """Everything one board runs, built from a validated config and a board profile.
    ``console``: the serial link's ``(write, read)`` (seriallink.stdio by default);
    ``clock``: ``time``-shaped (ticks_ms, ticks_us, ticks_diff, ticks_add, sleep_ms, sleep_us)."""

    def __init__(self, cfg, profile, log=print, console=None, clock=None):
        self.cfg = cfg
        self.profile = profile
        self.log = log
        self.clock = clock or time
        self.wifi = None
        if profile["wifi"]:
            from net import WifiLink
            # The ESP32's os.urandom is a true RNG only while its radio runs (ESP-IDF):
            # the radio goes on before the first random draw (boot id, noise).
            self.wifi = WifiLink(cfg["wifi_ssid"], cfg["wifi_password"])
            self.wifi.radio_on()
        self.rng, self.entropy = make_rng(profile)
        self.sealer = make_sealer(cfg) if "corrections" in cfg else None
        cols = [Column(Affine(c[0], c[1], c[2], c[3], c[4]), c[5], cfg["epsilon"])
                for c in cfg["columns"]]
        self.mech = RecordMechanism(cols, cfg["centre"], self.rng, cfg.get("epsilon_cs"))
        self.ledger = Ledger(self.mech.epsilon_charge(cfg.get("epsilon_a")), cfg["window_cap"], cfg["window_records"],
                             cfg["window_seconds"], cfg["ledger_path"],
                             lifetime=cfg["lifetime_cap"])
        self.sensor = sensor.make(profile, len(cols), cfg.get("stimulus"))
        self.boot_id = (self.rng.getrandbits(16) << 16) | self.rng.getrandbits(16)
        self.ring = None
        self.uplink = None
        self.link = None
        self.tls = None                 # MQTT boards: "off", "verified" or "insecure"
        if profile["transport"] == "mqtt":
            self.transport = self._mqtt(len(cols))
        else:
            self.transport = self._serial(len(cols), console)
        self.node = Node(self.sensor, self.mech, self.rng, cfg["device_id"], self.boot_id,
                         cfg["config_id"], self._release, sealer=self.sealer)
        self.released = 0
        self.late = 0
        self._status_at = self.clock.ticks_ms()
        self._held = None
        self._capped_window = None

    def _mqtt(self, ncols):
        from ring import Ring
        from mqtt import MQTTClient, open_socket
        from uplink import Uplink
        cfg = self.cfg
        self.ring = Ring(cfg["ring_path"], wire.reading_size(ncols), cfg["ring_records"],
                         cfg["ring_bytes"], self._corr_size())
        client = MQTTClient(cfg["client_id"], cfg["broker_user"], cfg["broker_password"],
                            cfg["keepalive"], clock=self.clock)
        host = cfg["broker_host"]
        port = cfg["broker_port"]
        tls = cfg["broker_tls"]
        ca = cfg["broker_ca"]
        insecure = cfg["broker_tls_insecure"]
        self.tls = "insecure" if insecure else ("verified" if tls else "off")
        user = cfg["broker_user"]
        self.uplink = Uplink(client, self.ring, lambda: open_socket(host, port, tls, ca, 5, insecure),
                             (topics.READINGS % user).encode(),
                             (topics.STATUS % user).encode(), (topics.ACK % user).encode(),
                             self.clock, self.rng,
                             cfg["max_inflight"], cfg["ack_timeout_ms"], 250,
                             cfg["backoff_max_ms"], self.wifi, self.log)
        ring = self.ring

        def send(reading, correction):
            ring.put(reading, correction)
        return send

    def _serial(self, ncols, console):
        from ring import Ring
        from seriallink import SerialLink, stdio
        cfg = self.cfg
        self.ring = Ring(cfg["ring_path"], wire.reading_size(ncols), cfg["ring_records"],
                         cfg["ring_bytes"], self._corr_size())
        write, read = console if console is not None else stdio()
        self.link = SerialLink(self.ring, write, read, self.clock)
        return self.link.send

    def _corr_size(self):
        return SEALED_SIZE if self.sealer is not None else wire.CORRECTION_SIZE

    def _release(self, reading, correction):
        # With a period, a record waits for the next tick of the schedule: when it reaches
        # the transport says nothing about how long its noise took to draw.
        if self.cfg["period_ms"]:
            self._held = (reading, correction)
        else:
            self.transport(reading, correction)

    def hand_over(self):
        """Give the record held since the last tick to the transport (at a tick of the schedule)."""
        held = self._held
        if held is not None:
            self._held = None
            self.transport(held[0], held[1])

    def status(self, event):
        """Publish (MQTT) or print (serial) the board's state; never carries a value."""
        led = self.ledger
        ring = self.ring
        worst = self.mech.epsilon_row_worst()
        row = self.mech.epsilon_row()
        # A serial board's status is one console line: the gateway reads at most framing.MAX_TEXT.
        text = ('{"event":"%s","device":%d,"boot":%d,"board":"%s","entropy":"%s",'
                '"eps_record":"%s","eps_record_worst":"%s","window":%d,"spent":"%s",'
                '"cap":"%s","withheld":%d,"released":%d,"dropped":%d,"pending":%d,'
                '"ledger":"%s","eps_total":"%s","eps_total_worst":"%s","lifetime_cap":"%s",'
                '"period_ms":%d,"late":%d,"version":"%s","sensor":"%s"%s%s%s%s}'
                % (event, self.cfg["device_id"], self.boot_id, self.profile["name"],
                   self.entropy, frac_text(row[0], row[1]), frac_text(worst[0], worst[1]),
                   led.window, led.spent_text(), led.cap_text(), led.withheld, self.released,
                   ring.dropped if ring else 0, ring.pending if ring else 0, led.state(),
                   led.total_text(),
                   frac_text(worst[0] * led.released, worst[1]) if led.released else "0",
                   led.lifetime_text(), self.cfg["period_ms"], self.late, __version__,
                   self.sensor.kind, ',"tls":"%s"' % self.tls if self.tls else "",
                   ',"eps_cs":"%s"' % frac_text(*self.mech.eps_cs) if self.mech.eps_cs else "",
                   ',"eps_a":"%s"' % frac_text(*self.cfg["epsilon_a"]) if self.cfg.get("epsilon_a") else "",
                   # The last seq this boot released: the cloud compares it with what it stored.
                   ',"last_seq":%d' % ((self.node.seq - 1) & 0xFFFFFFFF) if self.released else ""))
        self._status_at = self.clock.ticks_ms()
        if self.uplink is not None:
            self.uplink.status(text.encode())
        elif self.link is not None:
            self.link.say(("status: " + text).encode())     # repeated until the gateway answers
        else:
            self.log("status: " + text)

    def boot(self):
        ring = self.ring
        # sensor= last: rigs match the fields before it; a reader sees injected readings.
        # tls= (MQTT boards only) before version=: "insecure" must be seen, not scrolled past.
        self.log("boot ok: board=%s device=%d boot=%d entropy=%s eps_record=%s pending=%d dropped=%d"
                 "%s version=%s sensor=%s"
                 % (self.profile["name"], self.cfg["device_id"], self.boot_id, self.entropy,
                    frac_text(*self.mech.epsilon_row()), ring.pending if ring else 0,
                    ring.dropped if ring else 0, " tls=%s" % self.tls if self.tls else "",
                    __version__, self.sensor.kind))
        if ring is not None and ring.lost_on_open:
            self.log("ring: layout changed; %d unsent records of the old layout dropped"
                     % ring.lost_on_open)
        if self.ledger.damaged:
            self.log("ledger: %s (%s); releasing nothing" % (self.ledger.damaged, self.cfg["ledger_path"]))
        if self.link is not None:
            self.link.start()
        self.status("boot")

    def read_once(self):
        """Take one reading and release it if the ledger allows; False when the sensor is done."""
        raw = self.sensor.read()
        if raw is None:
            return False
        led = self.ledger
        code = led.charge()
        if self._capped_window is not None and led.window != self._capped_window:
            self.log("ledger: window %d open; releasing again" % led.window)
            self._capped_window = None
        if code == OK:
            # The ledger's counter, persisted before this release, is the seal's nonce.
            self.node.release(raw, led.counter)
            self.released += 1
            if self.clock.ticks_diff(self.clock.ticks_ms(), self._status_at) >= STATUS_MS:
                self.status("progress")
        elif code == STOPPED:
            self.log("ledger: releases stopped: %s" % led.state())
            self.status("ledger_stopped")
        elif code == CAPPED:
            self._capped_window = led.window
            self.log("ledger: window %d cap %s reached (spent %s); withholding readings until window %d"
                     % (led.window, led.cap_text(), led.spent_text(), led.window + 1))
            self.status("window_cap")
        return True

    def _nap(self, tick, cap=0):
        """Sleep at most ``cap`` ms (0: no cap), and up to the millisecond edge ``tick`` at most: the last
        ``SPIN_MS`` before it are spent polling ``ticks_ms``, so the loop sees the edge within
        microseconds, however long the draw before this call took."""
        t = self.clock
        left = t.ticks_diff(tick, t.ticks_ms())
        if cap and left > cap + SPIN_MS:
            t.sleep_ms(cap)
            return
        if left > SPIN_MS:
            t.sleep_ms(left - SPIN_MS)
        while t.ticks_diff(tick, t.ticks_ms()) > 0:
            t.sleep_us(0)           # returns at once: a busy poll a fake clock can advance

    def run(self):
        """The loop; returns only on a board without a network once the sensor is done
        (a serial board: once the gateway acknowledged every record, or gave up)."""
        t = self.clock
        period = self.cfg["period_ms"]
        up = self.uplink
        link = self.link
        sampling = True
        idle_said = False
        reads = 0
        cost_us = 0
        t_start = t.ticks_ms()
        next_read = t_start
        while True:
            now = t.ticks_ms()
            if sampling and t.ticks_diff(now, next_read) >= 0:
                # The record of the last tick leaves now, before this tick's reading.
                self.hand_over()
                next_read = t.ticks_add(next_read, period) if period else now
                t0 = t.ticks_us()
                sampling = self.read_once()
                cost_us += t.ticks_diff(t.ticks_us(), t0)
                if self._held is not None and period and t.ticks_diff(t.ticks_ms(), next_read) >= 0:
                    # Drawn after the tick it should leave at: it leaves at the next tick still
                    # ahead, not at once (when the draw ended is timing), and the schedule skips.
                    self.late += 1
                    while t.ticks_diff(t.ticks_ms(), next_read) >= 0:
                        next_read = t.ticks_add(next_read, period)
                if sampling:
                    reads += 1
                else:
                    ms = t.ticks_diff(t.ticks_ms(), t_start)
                    self.log("stimulus done: %d readings, %d released, %d ms; firmware cost %d us per reading"
                             % (reads, self.released, ms, cost_us // (reads or 1)))
                    self.status("done")
                    if link is not None:
                        link.finish()
                    elif up is None:
                        return
            if link is not None:
                link.service()
                if not sampling and link.idle():
                    if link.gave_up:
                        self.log("idle: %d records not acknowledged, kept for the next boot (%d resent)"
                                 % (link.pending, link.resent))
                    else:
                        self.log("idle: all %d records acknowledged (%d resent)"
                                 % (self.released, link.resent))
                    assert self.ring is not None    # _serial() made the link and the ring
                    self.ring.close()
                    return
                # Short sleeps: the gateway's answers wait on stdin.
                if sampling:
                    self._nap(next_read, 10)
                else:
                    t.sleep_ms(10)
                continue
            if up is None:
                self._nap(next_read)
                continue
            up.service()
            if not sampling and not idle_said and up.idle():
                if up.refused:
                    self.log("idle: %d records acknowledged, %d refused by the broker and dropped (%d messages "
                             "published, %d records resent, %d connects)" % (self.released - up.refused, up.refused,
                                                                             up.published, up.resent, up.connects))
                else:
                    self.log("idle: all %d records acknowledged (%d messages published, %d records resent, %d "
                             "connects)" % (self.released, up.published, up.resent, up.connects))
                idle_said = True
            if not sampling:
                t.sleep_ms(1 if up.inflight else 20)
            elif period:
                self._nap(next_read, 1 if up.inflight else 0)


def configure(path):
    """``(cfg, profile)`` from the JSON config at ``path``: the profile its ``board`` key
    names (or the detected one), then the config checked for it; ConfigError names the key."""
    import json
    import boards
    try:
        f = open(path)
    except OSError:
        raise ConfigError("%s: cannot open the config file" % path)
    try:
        raw = json.load(f)
    except ValueError:
        raise ConfigError("%s: not valid JSON" % path)
    finally:
        f.close()
    try:
        profile = boards.load(board_name(raw))
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError("board: %s" % e)
    return validate(raw, profile), profile


def stop(text, profile):
    """Say why the board stops and exit with status 2. A board whose console is a gateway's
    line writes it until the gateway answers (seriallink.tell): bytes written before a gateway
    holds the port are lost, and the gateway publishes the line as the device's status."""
    if profile is not None and profile["transport"] == "serial":
        from seriallink import stdio, tell
        write, read = stdio()
        tell(text.encode(), write, read, time)
    else:
        print(text)
    sys.exit(2)


def main(path):
    """Validate ``path`` (a JSON config), then run; a config error stops the board with its key."""
    try:
        cfg, profile = configure(path)
    except ConfigError as e:
        import boards
        stop("config error: %s" % e, boards.of_config(path))
    try:
        app = App(cfg, profile)
        app.boot()
        app.run()
    except EntropyError as e:
        stop("entropy error: %s" % e, profile)
    except SealError as e:
        stop("seal error: %s" % e, profile)
    except sensor.StimulusError as e:
        # Readings released before the bad line stay valid; nothing after it is guessed.
        stop("stimulus error: %s" % e, profile)
