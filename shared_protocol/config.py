"""Provisioning config: checked by the board at start-up and by tools/flash.py before it
writes one; every error names its key.

    cfg = validate(json.load(open("config.json")), PROFILE)
    # ConfigError("epsilon: must be a decimal > 0 (a string such as \\"0.5\\")")

The config is a flat JSON object. Numbers that are privacy parameters are decimal
strings (``"epsilon": "0.5"``) and become exact fractions; JSON floats are refused.
Keys, with defaults where a key is optional:

* ``board``: the board profile to run (``esp32``, ``microbit``, ``pico``, ``pico_w``,
  ``unix``; firmware/boards/), default the detected one
* ``device_id`` (1..2**32-1), ``config_id`` (0..65535, default 0)
* ``columns``: 1..16 objects ``{num, den, offset, raw_min, raw_max, delta_q}`` (ints:
  the affine scaling of docs/protocol.md 4.1 and the relaxed sensitivity in quanta)
* ``epsilon`` (per column, decimal string), ``centre`` (one int per column, quanta)
* ``window_records`` or ``window_seconds`` (exactly one), ``window_cap`` (decimal
  string, at least the epsilon of one record); ``window_seconds`` only on a board whose
  profile names a trustworthy ``clock`` (the unix port's system clock): a clock that
  restarts at boot or steps back would reopen a window's budget, and the firmware syncs
  no NTP, so the other boards take ``window_records``
* ``epsilon_cs`` (optional decimal string): the correction record's d_diff gets discrete
  Laplace noise so that it is epsilon_cs-DP towards the correction server
  (shared_protocol/mechanism.py); each record is then charged ``m x epsilon + epsilon_cs``
* ``epsilon_a`` (optional decimal string): the correction server's ``--analyst-epsilon``. A
  correction round gives the analyst a record's noisy d_diff at epsilon_a on top of its
  release (cloud/correction/honest.py), and the board cannot know at release time whether a
  round will include the record, so each record is charged ``epsilon_a`` as well: then
  ``window_cap`` and ``lifetime_cap`` bound the analyst's whole view, rounds included
* ``lifetime_cap`` (decimal string, at least the epsilon of one record; default 1000
  times ``window_cap``): the most the board releases until it is provisioned again
* boards with MQTT: ``broker_host``, ``broker_password``, ``broker_port`` (1883, or
  8883 with TLS), ``broker_user`` (``d<device_id>``), ``broker_tls`` (false),
  ``broker_ca`` (CA certificate, DER, to verify the broker with: MicroPython's
  mbedTLS rejects PEM; required with ``broker_tls``), ``broker_tls_insecure`` (false:
  true lets ``broker_tls`` go without ``broker_ca``, an unauthenticated broker, for tests
  only; the boot line and status say ``tls=insecure``), ``client_id`` (the broker
  replaces it by ``broker_user``), ``keepalive``
  (60 s), ``max_inflight`` (8 records), ``ack_timeout_ms`` (10000),
  ``backoff_max_ms`` (30000)
* serial boards: ``broker_host``, ``broker_port``, ``broker_user`` of their gateway are
  checked when given; ``broker_password`` is refused (the gateway holds it)
* boards with a ring (MQTT boards, and serial boards whose profile names a
  ``ring_path``: the Pico): ``ring_path``, ``ring_records`` (64), ``ring_bytes`` (16384)
* boards with Wi-Fi: ``wifi_ssid``, ``wifi_password``
* ``ledger_path``, ``period_ms`` (1000)
* boards with AES (all but the micro:bit): ``corrections`` (``"sealed"``, the default:
  correction records sealed for the correction server with the keys in ``seal_key_path``,
  default ``seal.key``, which provisioning writes with a fresh ledger; ``"plaintext"``:
  plain records, which the correction server takes only from a device it is told is
  plaintext)
* ``stimulus``: readings for a rig, a file of readings (one ``v1,v2`` per line) or a
  list of readings; on any board it replaces the profile's sensor (ADC), and boards
  whose sensor is a stimulus source (unix) require it
"""

try:
    from .fixedpoint import parse_decimal
    from .layout import CONFIG_ID_MAX, CORRECTION_SIZE, DEVICE_ID_MAX, MAX_COLS, SEALED_SIZE, reading_size
    from .ringlayout import slot_count, slot_size
    from .topics import DEVICE_USER
except ImportError:
    from fixedpoint import parse_decimal
    from layout import CONFIG_ID_MAX, CORRECTION_SIZE, DEVICE_ID_MAX, MAX_COLS, SEALED_SIZE, reading_size
    from ringlayout import slot_count, slot_size
    from topics import DEVICE_USER

_U32 = 0xFFFFFFFF
_COLUMN_KEYS = ("num", "den", "offset", "raw_min", "raw_max", "delta_q")
KEYS = ("board", "device_id", "config_id", "columns", "epsilon", "epsilon_cs", "epsilon_a", "centre",
        "window_records", "window_seconds", "window_cap", "lifetime_cap", "broker_host", "broker_port",
        "broker_user", "broker_password", "broker_tls", "broker_ca", "broker_tls_insecure", "client_id",
        "keepalive", "max_inflight", "ack_timeout_ms", "backoff_max_ms", "ring_path", "ring_records",
        "ring_bytes", "wifi_ssid", "wifi_password", "ledger_path", "period_ms", "stimulus",
        "corrections", "seal_key_path")
_BIG = 1 << 62


class ConfigError(ValueError):
    """``"<key>: <what is wrong>"``."""


def _int(raw, key, lo, hi, default=None, name=None):
    v = raw.get(key, default)
    name = name or key
    if v is None:
        raise ConfigError("%s: required" % name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError("%s: must be an int" % name)
    if v < lo or v > hi:
        raise ConfigError("%s: must be in %d..%d" % (name, lo, hi))
    return v


def _dec(raw, key):
    v = raw.get(key)
    if v is None:
        raise ConfigError("%s: required" % key)
    try:
        return parse_decimal(v)
    except ValueError:
        raise ConfigError('%s: must be a decimal > 0 (a string such as "0.5")' % key)


def _str(raw, key, default=None, empty=False):
    v = raw.get(key, default)
    if v is None:
        raise ConfigError("%s: required" % key)
    if not isinstance(v, str) or (not v and not empty):
        raise ConfigError("%s: must be a%s string" % (key, "" if empty else " non-empty"))
    return v


def _columns(raw):
    cols = raw.get("columns")
    if cols is None:
        raise ConfigError("columns: required")
    if not isinstance(cols, list) or not 1 <= len(cols) <= MAX_COLS:
        raise ConfigError("columns: must be a list of 1..%d column objects" % MAX_COLS)
    out = []
    for j in range(len(cols)):
        c = cols[j]
        where = "columns[%d]" % j
        if not isinstance(c, dict):
            raise ConfigError("%s: must be an object with %s" % (where, ", ".join(_COLUMN_KEYS)))
        for k in c:
            if k not in _COLUMN_KEYS:
                raise ConfigError("%s.%s: unknown key" % (where, k))
        num = _int(c, "num", -_BIG, _BIG, name=where + ".num")
        den = _int(c, "den", 1, _BIG, name=where + ".den")
        off = _int(c, "offset", -_BIG, _BIG, name=where + ".offset")
        lo = _int(c, "raw_min", -_BIG, _BIG, name=where + ".raw_min")
        hi = _int(c, "raw_max", -_BIG, _BIG, name=where + ".raw_max")
        dq = _int(c, "delta_q", 1, _BIG, name=where + ".delta_q")
        if num == 0:
            raise ConfigError("%s.num: must be non-zero" % where)
        if hi < lo:
            raise ConfigError("%s.raw_max: must be >= raw_min" % where)
        out.append((num, den, off, lo, hi, dq))
    return out


def board_name(raw):
    """The config's ``board`` (None: detect the board); read before the profile exists."""
    if not isinstance(raw, dict):
        raise ConfigError("config: must be a JSON object")
    v = raw.get("board")
    if v is None:
        return None
    return _str(raw, "board")


def validate(raw, profile):
    """The checked config as a new dict (defaults filled in); ConfigError names the key."""
    if not isinstance(raw, dict):
        raise ConfigError("config: must be a JSON object")
    for k in raw:
        if k not in KEYS:
            raise ConfigError("%s: unknown key" % k)
    c = {}
    name = board_name(raw)
    if name is not None and name != profile["name"]:
        raise ConfigError("board: the config names %s, but is checked for %s" % (name, profile["name"]))
    c["board"] = profile["name"]
    dev = c["device_id"] = _int(raw, "device_id", 1, DEVICE_ID_MAX)
    c["config_id"] = _int(raw, "config_id", 0, CONFIG_ID_MAX, 0)
    cols = c["columns"] = _columns(raw)
    m = len(cols)
    if profile.get("adc_pins") is not None and m > len(profile["adc_pins"]):
        raise ConfigError("columns: board %s has %d ADC inputs" % (profile["name"], len(profile["adc_pins"])))
    eps = c["epsilon"] = _dec(raw, "epsilon")
    centre = raw.get("centre")
    if (not isinstance(centre, list) or len(centre) != m
            or [v for v in centre if not isinstance(v, int) or isinstance(v, bool)]):
        raise ConfigError("centre: must be a list of %d ints (one per column, in quanta)" % m)
    c["centre"] = centre
    wr = raw.get("window_records")
    ws = raw.get("window_seconds")
    if (wr is None) == (ws is None):
        raise ConfigError("window_records: set exactly one of window_records and window_seconds")
    c["window_records"] = _int(raw, "window_records", 1, _U32) if ws is None else 0
    c["window_seconds"] = _int(raw, "window_seconds", 1, _U32) if wr is None else 0
    if c["window_seconds"] and not profile.get("clock"):
        raise ConfigError("window_seconds: board %s has no trustworthy clock (it restarts at "
                          "boot and syncs no NTP); give window_records" % profile["name"])
    # epsilon_cs (optional): noise on d_diff towards the correction server, charged per record.
    ecs = c["epsilon_cs"] = _dec(raw, "epsilon_cs") if "epsilon_cs" in raw else None
    rec = (m * eps[0], eps[1])
    what = "%d x %s" % (m, raw["epsilon"])
    if ecs is not None:
        rec = (rec[0] * ecs[1] + ecs[0] * rec[1], rec[1] * ecs[1])
        what += " + epsilon_cs %s" % raw["epsilon_cs"]
    # epsilon_a (optional): what a correction round gives the analyst, charged per record.
    ea = c["epsilon_a"] = _dec(raw, "epsilon_a") if "epsilon_a" in raw else None
    if ea is not None:
        rec = (rec[0] * ea[1] + ea[0] * rec[1], rec[1] * ea[1])
        what += " + epsilon_a %s" % raw["epsilon_a"]
    cap = c["window_cap"] = _dec(raw, "window_cap")
    if cap[0] * rec[1] < rec[0] * cap[1]:
        raise ConfigError("window_cap: must be at least the epsilon of one record (%s)" % what)
    if "lifetime_cap" in raw:
        life = _dec(raw, "lifetime_cap")
        if life[0] * rec[1] < rec[0] * life[1]:
            raise ConfigError("lifetime_cap: must be at least the epsilon of one record (%s)" % what)
    else:
        life = (cap[0] * 1000, cap[1])
    c["lifetime_cap"] = life
    if profile["transport"] == "mqtt":
        c["broker_host"] = _str(raw, "broker_host")
        tls = c["broker_tls"] = raw.get("broker_tls", False)
        if not isinstance(tls, bool):
            raise ConfigError("broker_tls: must be true or false")
        c["broker_port"] = _int(raw, "broker_port", 1, 0xFFFF, 8883 if tls else 1883)
        c["broker_user"] = _str(raw, "broker_user", DEVICE_USER % dev)
        c["broker_password"] = _str(raw, "broker_password")
        c["broker_ca"] = _str(raw, "broker_ca") if "broker_ca" in raw else None
        # TLS without a CA authenticates nobody: whoever answers gets the password. Only an
        # explicitly named switch allows it, and the board says so at boot and in its status.
        insecure = c["broker_tls_insecure"] = raw.get("broker_tls_insecure", False)
        if not isinstance(insecure, bool):
            raise ConfigError("broker_tls_insecure: must be true or false")
        if insecure and (not tls or c["broker_ca"] is not None):
            raise ConfigError("broker_tls_insecure: only with broker_tls and without broker_ca")
        if tls and c["broker_ca"] is None and not insecure:
            raise ConfigError("broker_ca: required with broker_tls (the broker's CA certificate, "
                              "DER); broker_tls_insecure: true skips the check, for tests only")
        c["client_id"] = _str(raw, "client_id", "dpsense-" + DEVICE_USER % dev)
        c["keepalive"] = _int(raw, "keepalive", 5, 3600, 60)
        c["max_inflight"] = _int(raw, "max_inflight", 1, 32, 8)
        c["ack_timeout_ms"] = _int(raw, "ack_timeout_ms", 200, 600000, 10000)
        c["backoff_max_ms"] = _int(raw, "backoff_max_ms", 100, 3600000, 30000)
    else:
        # A serial board's gateway logs in to the broker for it. The gateway's host, port
        # and account are checked when given (as mbcfg does) so a typo stops provisioning;
        # the password stays with the gateway.
        if "broker_password" in raw:
            raise ConfigError("broker_password: the gateway logs in for a serial board; "
                              "leave the password out of the board's config")
        if "broker_host" in raw:
            _str(raw, "broker_host")
        if "broker_port" in raw:
            _int(raw, "broker_port", 1, 0xFFFF)
        if "broker_user" in raw:
            _str(raw, "broker_user")
    # Correction records are sealed for the correction server (shared_protocol/seal.py) with
    # the keys provisioning wrote to seal_key_path; "plaintext" must be said, on the board
    # and at the correction server (never a silent fallback). A board without AES (profile
    # "aes" False: the micro:bit) sends plain records from its own node (mbnode.py).
    corr_size = CORRECTION_SIZE
    if profile.get("aes", True):
        corr = c["corrections"] = raw.get("corrections", "sealed")
        if corr not in ("sealed", "plaintext"):
            raise ConfigError("corrections: must be \"sealed\" or \"plaintext\"")
        c["seal_key_path"] = _str(raw, "seal_key_path", "seal.key")
        if corr == "sealed":
            corr_size = SEALED_SIZE
    elif "corrections" in raw or "seal_key_path" in raw:
        raise ConfigError("corrections: board %s has no AES; its correction records are plain"
                          % profile["name"])
    # The micro:bit (ring_path None) keeps records in files of its own (mbio.py).
    if profile["transport"] == "mqtt" or profile.get("ring_path"):
        c["ring_path"] = _str(raw, "ring_path", profile.get("ring_path", "ring.bin"))
        c["ring_records"] = _int(raw, "ring_records", 2, 65535, 64)
        c["ring_bytes"] = _int(raw, "ring_bytes", 64, 1 << 30, 16384)
        # firmware/ring.py's own bound, checked before a board (or the host) builds the ring.
        room = reading_size(m)
        if slot_count(room, c["ring_records"], c["ring_bytes"], corr_size) < 2:
            raise ConfigError("ring_bytes: too small for 2 records of %d bytes" % slot_size(room, corr_size))
    if profile.get("wifi"):
        c["wifi_ssid"] = _str(raw, "wifi_ssid")
        c["wifi_password"] = _str(raw, "wifi_password", None, True)
    c["ledger_path"] = _str(raw, "ledger_path", profile.get("ledger_path", "ledger.bin"))
    c["period_ms"] = _int(raw, "period_ms", 0, 86400000, 1000)
    stim = raw.get("stimulus")
    if stim is not None or profile["sensor"] == "stimulus":
        c["stimulus"] = _stimulus(stim, m)
    return c


def _stimulus(v, m):
    if v is None:
        raise ConfigError("stimulus: required (a file of readings or a list of readings)")
    if isinstance(v, str):
        if not v:
            raise ConfigError("stimulus: must be a non-empty path")
        return v
    if not isinstance(v, list):
        raise ConfigError("stimulus: must be a path or a list of readings")
    for i in range(len(v)):
        r = v[i]
        if (not isinstance(r, list) or len(r) != m
                or [x for x in r if not isinstance(x, int) or isinstance(x, bool)]):
            raise ConfigError("stimulus[%d]: must be a list of %d ints" % (i, m))
    return v
