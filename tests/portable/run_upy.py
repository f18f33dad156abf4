"""Run the portable tests under MicroPython: ``micropython tests/portable/run_upy.py``.

Imports each module of MODULES, calls every ``test_*`` function, prints one line per
failure and a closing "N passed, N failed"; exits 1 on any failure.
"""
import sys

sys.path.insert(0, ".")

MODULES = (
    "tests.portable.test_rng",
    "tests.portable.test_noise",
    "tests.portable.test_fixedpoint",
    "tests.portable.test_distance",
    "tests.portable.test_tokens",
    "tests.portable.test_layout",
    "tests.portable.test_wire",
    "tests.portable.test_seal",
    "tests.portable.test_framing",
    "tests.portable.test_mechanism",
    "tests.portable.test_node",
    "tests.portable.test_mbnode",
    "tests.portable.test_mbslim",
    "tests.portable.test_mbcfg",
    "tests.portable.test_fw_config",
    "tests.portable.test_fw_sensor",
    "tests.portable.test_fw_ring",
    "tests.portable.test_fw_ledger",
    "tests.portable.test_fw_mqtt",
    "tests.portable.test_fw_uplink",
    "tests.portable.test_fw_seriallink",
    "tests.portable.test_fw_seal",
    "tests.portable.test_fw_schedule",
)

passed = failed = 0
for name in MODULES:
    mod = __import__(name, None, None, ("x",))
    for attr in sorted(dir(mod)):
        if not attr.startswith("test_"):
            continue
        try:
            getattr(mod, attr)()
            passed += 1
        except Exception as e:
            failed += 1
            print("FAIL %s.%s: %s %s" % (name, attr, type(e).__name__, e))
print("micropython %s: %d passed, %d failed" % (".".join(str(v) for v in sys.implementation.version), passed, failed))
sys.exit(1 if failed else 0)
