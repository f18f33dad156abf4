"""firmware/mbcfg.py: the micro:bit reads config.txt and names the key of every error.

The good config is hil_tests/test_boot.py's, as tools/provision.microbit_config_text
writes it for the qemu rig's provisioning dict; BAD starts with that file's BAD table in
the text format. tests/unit/test_mbcfg_host.py checks on CPython that the writer plus
this loader give node_call's arguments, and that both refuse the same configs.
"""
from tests.portable import fwutil
import mbcfg

# hil_tests/test_boot.py's config, key by key as microbit_config_text writes it
# (columns are helpers.column(20) and column(30); no broker_password, no period_ms).
_COL = (("num", "1"), ("den", "1"), ("offset", "0"), ("raw_min", "-100000000"),
        ("raw_max", "100000000"))
GOOD = ([("device_id", "7"), ("broker_host", '"127.0.0.1"'), ("broker_port", "41883"),
         ("broker_user", '"d7"')]
        + [("columns[0].%s" % k, v) for k, v in _COL] + [("columns[0].delta_q", "20")]
        + [("columns[1].%s" % k, v) for k, v in _COL] + [("columns[1].delta_q", "30")]
        + [("epsilon", '"0.5"'), ("centre", "[0,0]"), ("window_records", "1000"),
           ("window_cap", '"1000"')])
# what tools/provision.node_call passes for it
WANT = (7, 0, [(1, 1, 0, -10 ** 8, 10 ** 8, 20), (1, 1, 0, -10 ** 8, 10 ** 8, 30)], (1, 2),
        [0, 0], 1000, (1000, 1))

_DROP = None

# (changes to GOOD: key -> value text, or _DROP; the key the message must name)
BAD = (
    # hil_tests/test_boot.py's BAD table
    ({"epsilon": '"-1"'}, "epsilon"),
    ({"epsilon": "0.5"}, "epsilon"),                      # a number, not a decimal string
    ({"device_id": _DROP}, "device_id"),
    ({"centre": "[0]"}, "centre"),
    ({"columns[0].delta_q": "0"}, "columns[0].delta_q"),
    ({"window_cap": '"0.5"'}, "window_cap"),              # below 2 x 0.5 per record
    ({"broker_port": "0"}, "broker_port"),
    ({"epsilom": '"0.5"'}, "epsilom"),
    # more, as in tests/portable/test_fw_config.py
    ({"epsilon": '"1e-3"'}, "epsilon"),
    ({"epsilon": '"0"'}, "epsilon"),
    ({"epsilon": '"5."'}, "epsilon"),
    ({"epsilon": '"1.2.3"'}, "epsilon"),
    ({"epsilon": '""'}, "epsilon"),
    ({"epsilon": _DROP}, "epsilon"),
    ({"device_id": "0"}, "device_id"),
    ({"device_id": "4294967296"}, "device_id"),
    ({"device_id": '"7"'}, "device_id"),
    ({"device_id": "true"}, "device_id"),
    ({"device_id": "null"}, "device_id"),
    ({"config_id": "70000"}, "config_id"),
    ({"columns": "[]"}, "columns"),
    ({"columns[3].num": "1"}, "columns"),                 # 4 columns: 3 ADC inputs
    ({"columns[20].num": "1"}, "columns"),
    ({"columns[0].num": "0"}, "columns[0].num"),
    ({"columns[0].den": "-1"}, "columns[0].den"),
    ({"columns[0].raw_max": "-200000000"}, "columns[0].raw_max"),
    ({"columns[0].offset": _DROP}, "columns[0].offset"),
    ({"columns[1].num": "1.5"}, "columns[1].num"),
    ({"columns[0].scale": "2"}, "columns[0].scale"),
    ({"columns[1]": "5"}, "columns[1]"),
    ({"centre": "[0,1.5]"}, "centre"),
    ({"centre": "[0,true]"}, "centre"),
    ({"centre": '"0,0"'}, "centre"),
    ({"centre": _DROP}, "centre"),
    ({"window_records": _DROP}, "window_records"),
    ({"window_records": "0"}, "window_records"),
    ({"window_seconds": "60"}, "window_records"),         # both given
    ({"window_cap": _DROP}, "window_cap"),
    ({"window_cap": "1000"}, "window_cap"),
    ({"broker_host": '""'}, "broker_host"),
    ({"broker_host": "5"}, "broker_host"),
    ({"broker_port": "65536"}, "broker_port"),
    ({"broker_port": '"1883"'}, "broker_port"),
    ({"broker_user": '""'}, "broker_user"),
    ({"broker_password": '"secret"'}, "broker_password"),  # not for the board
    ({"period_ms": "0"}, "period_ms"),
)


def _text(pairs):
    return "".join(["%s=%s\n" % (k, v) for k, v in pairs])


def _changed(change):
    """GOOD with ``change`` applied; a ``columns`` value replaces every column line."""
    pairs = []
    for k, v in GOOD:
        if k in change or "columns" in change and k.startswith("columns["):
            v = change.get(k, _DROP)
            if v is _DROP:
                continue
        pairs.append((k, v))
    keys = [p[0] for p in GOOD]
    for k in change:
        if change[k] is not _DROP and k not in keys:
            pairs.append((k, change[k]))
    return _text(pairs)


def _load(text, name="mbcfg.txt"):
    path = fwutil.scratch(name)
    f = open(path, "w")
    f.write(text)
    f.close()
    out = []
    try:
        return mbcfg.load(path, out.append), out
    finally:
        fwutil.remove(path)


def _error(text):
    got, out = _load(text)
    assert got is None, got
    assert len(out) == 1, out
    line = out[0]
    assert line.startswith("config error: ") and line.endswith("\n") and line.count("\n") == 1, line
    return line[len("config error: "):-1]


def test_good_config_gives_the_node_call_arguments():
    got, out = _load(_text(GOOD))
    assert out == []
    assert got == WANT, got


def test_every_bad_config_names_its_key():
    for change, key in BAD:
        msg = _error(_changed(change))
        assert msg.startswith(key + ": "), (change, key, msg)


def test_messages_say_what_is_expected():
    assert _error(_changed({"epsilon": "0.5"})) == 'epsilon: must be a decimal > 0 (a string such as "0.5")'
    assert _error(_changed({"device_id": _DROP})) == "device_id: required"
    assert _error(_changed({"epsilom": '"0.5"'})) == "epsilom: unknown key"
    assert _error(_changed({"broker_port": "0"})) == "broker_port: must be in 1..65535"
    assert _error(_changed({"centre": "[0]"})) == "centre: must be a list of 2 ints (one per column)"
    assert _error(_changed({"window_cap": '"0.5"'})) == \
        "window_cap: must be at least the epsilon of one record (2 x 0.5)"
    assert _error(_changed({"window_records": _DROP, "window_seconds": "60"})) == \
        "window_seconds: no clock on the micro:bit: give window_records"


def test_decimals_are_exact_fractions():
    for text, want in (('"0.25"', (1, 4)), ('"2"', (2, 1)), ('".5"', (1, 2)), ('"00.50"', (1, 2)),
                       ('"0.1"', (1, 10)), ('"0.000001"', (1, 10 ** 6)), ('"3.30"', (33, 10))):
        got, out = _load(_changed({"epsilon": text}))
        assert out == [] and got[3] == want, (text, got, out)


def test_defaults_and_optional_keys():
    # config_id defaults to 0; the broker keys are optional; offset 0 stays 0
    pairs = [p for p in GOOD if not p[0].startswith("broker_")] + [("config_id", "65535")]
    got, out = _load(_text(pairs))
    assert out == [] and got[1] == 65535
    got, out = _load(_text([p for p in GOOD if p[0] != "broker_port"]))
    assert got == WANT


def test_blank_comment_and_spaced_lines_are_fine():
    text = "# dpsense\n\n" + "".join(["  %s = %s \r\n" % (k, v) for k, v in GOOD]) + "\n"
    got, out = _load(text)
    assert out == [] and got == WANT


def test_decimals_are_parse_decimal_on_every_class():
    from shared_protocol.fixedpoint import parse_decimal
    texts = ("2", "10", "007",                              # whole, leading zeros
             ".5", "0.5", "00.50", "3.30", "2.50", "1.000",  # fractions, trailing zeros
             "0.1", "0.25", "0.000001", "123456789.123456789",  # irreducible, tiny, long
             "0", "0.0", ".0", "000",                        # zero
             "", ".", "5.", "1.2.3", "-1", "+1", "1e-3", "0x10", "1_0", "1,5", "a", " 1", "1 ",
             1, 0.5, None, ["1"])                            # not strings
    accepted = 0
    for t in texts:
        try:
            want = parse_decimal(t)
        except ValueError:
            want = None
        try:
            got = mbcfg._d({"epsilon": t}, "epsilon")
        except mbcfg._E:
            got = None
        assert got == want, (t, got, want)
        accepted += want is not None
    assert 0 < accepted < len(texts)


def test_keys_the_checker_does_not_take_are_unknown_to_it():
    from shared_protocol.config import KEYS
    assert [k for k in mbcfg._K if k not in KEYS] == []
    for k in KEYS:
        if k not in mbcfg._K:
            assert _error(_text(GOOD) + "%s=1\n" % k) == "%s: unknown key" % k, k


def test_columns_in_any_order_and_one_column():
    pairs = list(GOOD)
    pairs.reverse()
    got, out = _load(_text(pairs))
    assert got == WANT, (got, out)
    one = [p for p in GOOD if not p[0].startswith("columns[1]")]
    got, out = _load(_text([p if p[0] != "centre" else ("centre", "[-5]") for p in one]))
    assert got == (7, 0, [(1, 1, 0, -10 ** 8, 10 ** 8, 20)], (1, 2), [-5], 1000, (1000, 1)), got


def test_missing_columns_and_gaps():
    assert _error(_text([p for p in GOOD if not p[0].startswith("columns")])) == "columns: required"
    gap = [p for p in GOOD if not p[0].startswith("columns[0]")]
    assert _error(_text(gap)).startswith("columns[0].num: required")
    assert _error(_text(gap + [("columns[0]", "{}")])).startswith("columns[0].num: required")


def test_garbage_lines_name_the_line_or_key():
    assert _error(_text(GOOD) + "hello\n") == "hello: not key=value"
    assert _error("=5\n" + _text(GOOD)) == "=5: not key=value"
    assert _error(_text(GOOD) + "columns[x].num=1\n").startswith("columns[x].num: unknown key")
    assert _error(_text(GOOD) + "columns[0]num=1\n").startswith("columns[0]num: unknown key")
    assert _error(_text(GOOD) + "columns[-1].num=1\n").startswith("columns[-1].num: unknown key")
    assert _error(_text(GOOD) + "columns[0].num=1\n") == "columns[0].num: given twice"
    assert _error(_text(GOOD) + "device_id=7\n") == "device_id: given twice"
    assert _error(_changed({"epsilon": '"0.5'})).startswith("epsilon: ")      # unclosed quote
    assert _error(_changed({"centre": "[0,0"})).startswith("centre: ")
    assert _error(_changed({"centre": "[[0],[0]]"})).startswith("centre: ")
    assert _error(_changed({"centre": "[" * 200 + "]" * 200})).startswith("centre: ")


def test_empty_and_missing_files():
    assert _error("") == "device_id: required"
    assert _error("\n\n# nothing\n") == "device_id: required"
    out = []
    assert mbcfg.load(fwutil.scratch("mbcfg-none.txt"), out.append) is None
    assert len(out) == 1 and out[0].endswith(": cannot open the config file\n"), out
