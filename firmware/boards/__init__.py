"""Board profiles: plain data, one module per board, chosen once at start-up.

    profile = load()            # from sys.platform / sys.implementation._machine
    profile = load("pico_w")     # a config's ``board`` key; ValueError for an unknown name
    profile = of_config("config.json")   # after the config was refused: its board, or None

A profile is a dict ``PROFILE`` with:

* ``name``; ``transport``: "mqtt" (over Wi-Fi or the host's network) or "serial"
  (framed lines on the console UART, for a gateway);
* ``sensor``: "adc" (``machine.ADC`` on ``adc_pins``), "microbit" (pins
  ``adc_pins``), or "stimulus" (readings from the config, for rigs);
* ``entropy``: "urandom" (``os.urandom``, a hardware source; firmware/app.py refuses to
  run without it) or "prng_no_dp" (the micro:bit's node: the ``random`` PRNG, no
  privacy, said in its status);
* ``wifi``: needs ``wifi_ssid``/``wifi_password`` in the config;
* ``ring_path``, ``ledger_path``: default files on the board's file system;
* ``clock``: "system" when ``time.time()`` is a clock the board can trust across resets
  (time windows are accepted only then), else None;
* ``float_bits``: width of the port's floats (the firmware computes no private
  value in floating point; the rigs report it).

Adding a board is adding a file. On a flat file system (micro:bit) the deploy tool
copies the board's profile as ``board.py``; ``load`` falls back to it.
"""
import sys

# (sys.platform, text in sys.implementation._machine, profile)
_DETECT = (
    ("esp32", "", "esp32"),
    ("rp2", "Pico W", "pico_w"),
    ("rp2", "", "pico"),
    ("microbit", "", "microbit"),
    ("linux", "", "unix"),
    ("darwin", "", "unix"),
)


# Every board with a profile here, for the message that names them.
NAMES = ("esp32", "microbit", "pico", "pico_w", "unix")


def detect():
    """The profile name for the running port, or None."""
    machine = getattr(sys.implementation, "_machine", "")
    for plat, text, name in _DETECT:
        if sys.platform == plat and text in machine:
            return name
    return None


def load(name=None):
    """The ``PROFILE`` dict of board ``name`` (default: the detected board)."""
    if name is None:
        name = detect()
        if name is None:
            raise ValueError("unknown board: platform %r; name one in the config (%s)"
                             % (sys.platform, ", ".join(NAMES)))
    if name not in NAMES:
        raise ValueError("unknown board '%s' (%s)" % (name, ", ".join(NAMES)))
    try:
        mod = __import__("boards." + name, None, None, ("PROFILE",))
    except ImportError:
        try:
            mod = __import__("board")
        except ImportError:
            # A deploy copies only its own board's profile.
            raise ValueError("board '%s': its profile boards/%s.py is not on this board"
                             % (name, name))
        if mod.PROFILE["name"] != name:
            raise ValueError("board.py is %s, not %s" % (mod.PROFILE["name"], name))
    return mod.PROFILE


def of_config(path):
    """The profile of the board whose config at ``path`` was refused (its ``board`` key when
    the file says one, else the detected board), or None: where its console goes."""
    import json
    name = None
    try:
        f = open(path)
        try:
            raw = json.load(f)
        finally:
            f.close()
        if isinstance(raw, dict) and isinstance(raw.get("board"), str):
            name = raw["board"]
    except (OSError, ValueError):
        pass
    try:
        return load(name)
    except (ValueError, ImportError):
        return None
