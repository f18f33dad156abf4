"""shared_protocol/config.py: one table of bad configs, each error naming its key."""
from tests.portable import fwutil  # noqa: F401  (puts firmware/ on the path)
from tests.portable.util import raises
from shared_protocol.config import ConfigError, validate
from boards import unix, esp32, microbit, pico
import boards
import sensor

UNIX = unix.PROFILE


def _base():
    return {
        "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -1000, "raw_max": 1000, "delta_q": 50},
                    {"num": 3300, "den": 65535, "offset": 0, "raw_min": 0, "raw_max": 65535, "delta_q": 40}],
        "epsilon": "0.5",
        "centre": [0, 1650],
        "window_records": 100,
        "window_cap": "10",
        "broker_host": "127.0.0.1",
        "broker_password": "secret",
        "stimulus": "readings.txt",
    }


def _with(**changes):
    c = _base()
    for k in changes:
        if changes[k] is _DROP:
            del c[k]
        else:
            c[k] = changes[k]
    return c


_DROP = object()


def _col(**changes):
    c = _base()["columns"]
    for k in changes:
        if changes[k] is _DROP:
            del c[0][k]
        else:
            c[0][k] = changes[k]
    return c


# (config, board profile, the key the message must start with)
BAD = (
    (_with(epsilon="-1"), UNIX, "epsilon"),
    (_with(epsilon=0.5), UNIX, "epsilon"),                # a float: not exact
    (_with(epsilon="1e-3"), UNIX, "epsilon"),
    (_with(epsilon=_DROP), UNIX, "epsilon"),
    (_with(device_id=0), UNIX, "device_id"),
    (_with(device_id=2 ** 32), UNIX, "device_id"),
    (_with(device_id="7"), UNIX, "device_id"),
    (_with(device_id=_DROP), UNIX, "device_id"),
    (_with(device_id=True), UNIX, "device_id"),
    (_with(config_id=70000), UNIX, "config_id"),
    (_with(columns=[]), UNIX, "columns"),
    (_with(columns=_DROP), UNIX, "columns"),
    (_with(columns=_col(delta_q=0)), UNIX, "columns[0].delta_q"),
    (_with(columns=_col(num=0)), UNIX, "columns[0].num"),
    (_with(columns=_col(den=-1)), UNIX, "columns[0].den"),
    (_with(columns=_col(raw_max=-2000)), UNIX, "columns[0].raw_max"),
    (_with(columns=_col(offset=_DROP)), UNIX, "columns[0].offset"),
    (_with(columns=_col(scale=2)), UNIX, "columns[0].scale"),
    (_with(centre=[0]), UNIX, "centre"),
    (_with(centre=[0, 1.5]), UNIX, "centre"),
    (_with(window_records=_DROP), UNIX, "window_records"),
    (_with(window_seconds=60), UNIX, "window_records"),
    (_with(window_records=0), UNIX, "window_records"),
    (_with(window_cap="0.5"), UNIX, "window_cap"),        # below 2 x 0.5 per record
    (_with(window_cap=_DROP), UNIX, "window_cap"),
    (_with(lifetime_cap="0.5"), UNIX, "lifetime_cap"),    # below one record
    (_with(lifetime_cap=5), UNIX, "lifetime_cap"),        # a number, not a decimal string
    # a clock that restarts at boot would reopen a time window's budget
    (_with(window_records=_DROP, window_seconds=60, broker_password=_DROP, stimulus=_DROP),
     pico.PROFILE, "window_seconds"),
    (_with(window_records=_DROP, window_seconds=60, wifi_ssid="x"), esp32.PROFILE, "window_seconds"),
    (_with(broker_host=""), UNIX, "broker_host"),
    (_with(broker_port=0), UNIX, "broker_port"),
    (_with(broker_port=65536), UNIX, "broker_port"),
    (_with(broker_password=_DROP), UNIX, "broker_password"),
    (_with(broker_tls="yes"), UNIX, "broker_tls"),
    (_with(broker_tls=True), UNIX, "broker_ca"),          # TLS that checks nobody: refused
    (_with(broker_tls=True, broker_tls_insecure="yes"), UNIX, "broker_tls_insecure"),
    (_with(broker_tls_insecure=True), UNIX, "broker_tls_insecure"),      # without TLS
    (_with(broker_tls=True, broker_ca="ca.der", broker_tls_insecure=True), UNIX,
     "broker_tls_insecure"),
    (_with(keepalive=1), UNIX, "keepalive"),
    (_with(ring_records=1), UNIX, "ring_records"),
    (_with(ring_bytes=100), UNIX, "ring_bytes"),
    (_with(period_ms=-1), UNIX, "period_ms"),
    (_with(stimulus=_DROP), UNIX, "stimulus"),
    (_with(stimulus=[[1, 2], [3]]), UNIX, "stimulus[1]"),
    (_with(epsilion="0.5"), UNIX, "epsilion"),            # a typo is an unknown key
    (_with(board=5), UNIX, "board"),
    (_with(board=""), UNIX, "board"),
    (_with(board="pico"), UNIX, "board"),                 # checked for another board
    (_with(stimulus=[[1, 2], [3]], broker_password=_DROP), pico.PROFILE, "stimulus[1]"),
    (_with(stimulus=7, broker_password=_DROP), pico.PROFILE, "stimulus"),
    (_with(ring_bytes=100, broker_password=_DROP), pico.PROFILE, "ring_bytes"),
    (_base(), pico.PROFILE, "broker_password"),           # the gateway holds it
    (_with(broker_password=_DROP, broker_port=0), pico.PROFILE, "broker_port"),
    (_with(broker_password=_DROP, broker_host=""), pico.PROFILE, "broker_host"),
    (_base(), esp32.PROFILE, "wifi_ssid"),
    (_with(wifi_ssid="x", columns=_base()["columns"] * 4, centre=[0] * 8), esp32.PROFILE, "columns"),
)


def test_every_bad_config_names_its_key():
    for cfg, profile, key in BAD:
        try:
            validate(cfg, profile)
        except ConfigError as e:
            msg = str(e)
            assert msg.startswith(key + ": "), (key, msg)
        else:
            raise AssertionError("accepted a bad %s: %r" % (key, cfg.get(key.split("[")[0].split(".")[0])))


def test_epsilon_message_says_what_is_expected():
    try:
        validate(_with(epsilon="-1"), UNIX)
    except ConfigError as e:
        assert str(e).startswith("epsilon: must be a decimal > 0")
    else:
        raise AssertionError("accepted epsilon -1")


def test_valid_config_gets_exact_fractions_and_defaults():
    c = validate(_base(), UNIX)
    assert c["epsilon"] == (1, 2) and c["window_cap"] == (10, 1)
    assert c["columns"][1] == (3300, 65535, 0, 0, 65535, 40)
    assert (c["broker_port"], c["broker_user"], c["client_id"]) == (1883, "d7", "dpsense-d7")
    assert (c["config_id"], c["keepalive"], c["period_ms"]) == (0, 60, 1000)
    assert (c["window_records"], c["window_seconds"]) == (100, 0)
    assert c["ring_path"] == "ring.bin" and c["broker_ca"] is None
    assert c["broker_tls_insecure"] is False
    assert validate(_with(broker_tls=True, broker_ca="ca.der"), UNIX)["broker_port"] == 8883
    # The switch that lets TLS go without a CA is named, and kept for the boot line.
    assert validate(_with(broker_tls=True, broker_tls_insecure=True), UNIX)["broker_tls_insecure"] is True
    assert validate(_with(window_records=_DROP, window_seconds=60), UNIX)["window_seconds"] == 60
    assert c["lifetime_cap"] == (10000, 1)                # 1000 windows' caps by default
    assert validate(_with(lifetime_cap="2.5"), UNIX)["lifetime_cap"] == (5, 2)


def test_serial_boards_need_no_broker():
    cfg = _with(broker_host=_DROP, broker_password=_DROP, stimulus=_DROP)
    c = validate(cfg, microbit.PROFILE)
    assert "broker_host" not in c and "ring_path" not in c


def _write(name, text):
    p = fwutil.scratch(name)
    f = open(p, "w")
    f.write(text)
    f.close()
    return p


def _json(d):
    import json
    return json.dumps(d)


def _configure_error(text):
    from app import configure
    p = _write("board.json", text)
    try:
        return str(raises(ConfigError, configure, p))
    finally:
        fwutil.remove(p)


def test_the_board_key_picks_the_profile_and_an_unknown_one_is_a_config_error():
    assert boards.load("pico") is pico.PROFILE
    assert validate(_with(board="unix"), UNIX)["board"] == "unix"
    assert str(raises(ValueError, boards.load, "x")) == "unknown board 'x' (esp32, microbit, pico, pico_w, unix)"
    assert _configure_error('{"board": "x", "device_id": 7}') == \
        "board: unknown board 'x' (esp32, microbit, pico, pico_w, unix)"
    assert _configure_error('{"board": 5, "device_id": 7}') == "board: must be a non-empty string"
    assert _configure_error('{"board": "pico", "device_id": 0}').startswith("device_id: ")
    from app import configure
    cfg = _with(board="pico", broker_host=_DROP, broker_password=_DROP)
    p = _write("board-ok.json", _json(cfg))
    c, profile = configure(p)
    fwutil.remove(p)
    assert profile["name"] == "pico" and c["board"] == "pico" and c["stimulus"] == "readings.txt"


def test_stimulus_replaces_the_adc_of_a_board_that_has_one():
    rows = [[5, 6], [7, 8]]
    c = validate(_with(broker_host=_DROP, broker_password=_DROP, stimulus=rows), pico.PROFILE)
    assert c["stimulus"] == rows
    s = sensor.make(pico.PROFILE, 2, c["stimulus"])
    assert s.kind == "stimulus" and s.read() == [5, 6] and s.read() == [7, 8] and s.read() is None
    c = validate(_with(broker_host=_DROP, broker_password=_DROP, stimulus=_DROP), pico.PROFILE)
    assert "stimulus" not in c                           # the ADC, then
    assert sensor.Analog.kind == "adc" and sensor.MicrobitAnalog.kind == "microbit"
    # the Pico keeps its records in a ring until the gateway acknowledges them
    assert (c["ring_path"], c["ring_records"], c["ring_bytes"]) == ("ring.bin", 64, 16384)
    assert "broker_host" not in c


def test_epsilon_cs_is_optional_validated_and_counted_in_the_caps():
    assert validate(_base(), UNIX)["epsilon_cs"] is None
    assert validate(_with(epsilon_cs="0.25"), UNIX)["epsilon_cs"] == (1, 4)
    for bad in ("0", "-1", 1, "x"):
        try:
            validate(_with(epsilon_cs=bad), UNIX)
        except ConfigError as e:
            assert str(e).startswith("epsilon_cs: "), str(e)
        else:
            raise AssertionError("accepted epsilon_cs %r" % (bad,))
    # One record costs 2 x 0.5 + 0.5 = 1.5: a window cap of 1 is below it.
    try:
        validate(_with(epsilon_cs="0.5", window_cap="1"), UNIX)
    except ConfigError as e:
        assert str(e).startswith("window_cap: ") and "epsilon_cs 0.5" in str(e), str(e)
    else:
        raise AssertionError("accepted a window cap below one record with epsilon_cs")
    assert validate(_with(epsilon_cs="0.5", window_cap="1.5"), UNIX)["window_cap"] == (3, 2)


def test_epsilon_a_is_optional_validated_and_charged_per_record():
    # After a correction round the analyst holds a record at epsilon_a more than its release:
    # the board charges it per record so that window_cap and lifetime_cap bound that view too.
    assert validate(_base(), UNIX)["epsilon_a"] is None
    assert validate(_with(epsilon_a="1"), UNIX)["epsilon_a"] == (1, 1)
    for bad in ("0", "-1", 1, "x"):
        try:
            validate(_with(epsilon_a=bad), UNIX)
        except ConfigError as e:
            assert str(e).startswith("epsilon_a: "), str(e)
        else:
            raise AssertionError("accepted epsilon_a %r" % (bad,))
    try:
        validate(_with(epsilon_a="1", window_cap="1"), UNIX)
    except ConfigError as e:
        assert str(e).startswith("window_cap: ") and "epsilon_a 1" in str(e), str(e)
    else:
        raise AssertionError("accepted a window cap below one record with epsilon_a")
    from app import App
    lines = []
    path, ring = fwutil.scratch("eps-a-ledger"), fwutil.scratch("eps-a-ring")
    cfg = validate(_with(epsilon_a="1", epsilon_cs="0.5", window_cap="10", ledger_path=path, ring_path=ring,
                         corrections="plaintext", stimulus=[[1, 2]]), UNIX)
    app = App(cfg, UNIX, log=lines.append, clock=fwutil.FakeClock())
    led = app.ledger
    assert (led.row, led.unit_den) == (5, 2)            # 2 x 0.5 + epsilon_cs 1/2 + epsilon_a 1
    app.uplink = None                                   # the status as a serial board prints it
    app.status("boot")
    assert '"eps_a":"1"' in lines[-1] and '"eps_record":"1"' in lines[-1], lines
    app.ring.close()
    fwutil.remove(path)
    fwutil.remove(ring)
