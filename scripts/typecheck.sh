#!/usr/bin/env bash
# Type checks, one line each; exits 1 when any fails.
#
#     bash scripts/typecheck.sh             # run every check (out/typecheck/<check>.txt: mypy's output)
#     bash scripts/typecheck.sh --install   # only put the MicroPython stubs in out/stubs/ (scripts/setup.sh)
#
# * cpython: the installed package's code, dpsense.cloud, dpsense.protocol and dpsense.tools,
#   with [tool.mypy] of pyproject.toml. mypy cannot follow setuptools' editable finder, so it
#   reads the package through out/typecheck/cpython/dpsense/, links to the folders the finder
#   maps (cloud/, shared_protocol/, tools/).
# * esp32, pico_w: the board's view, as tools/deploy.py lays it out (firmware/*.py and
#   firmware/boards/ at the root, the shared_protocol package beside them), against the
#   MicroPython stubs of the port. Those stubs replace the standard library, so each port's
#   are merged into a typeshed of their own (out/stubs/<port>/typeshed) that mypy reads
#   instead of its own (--custom-typeshed-dir); scripts/mypy-board.ini has the options.
# * firmware/mb*.py (the micro:bit's own modules) are not checked: the only micro:bit stubs,
#   micropython-microbit-stubs-*, describe the V2 port, not the MicroPython 1.9.2 of the
#   micro:bit v1 this firmware runs on (the qemu rig runs that one).
# * tools/ptyboard_shims/ is MicroPython code for the unix port (the stand-in board), left out
#   of the CPython check (pyproject.toml: exclude).
#
# Paths in the output are the repository's (the links above are mapped back).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

# The stubs of each port, pinned to the MicroPython release the boards run.
declare -A STUBS=(
    [esp32]="micropython-esp32-esp32-generic-stubs~=1.29.0"
    [pico_w]="micropython-rp2-rpi-pico-w-stubs~=1.29.0"
)
PORTS=(esp32 pico_w)
OUT=out/typecheck

# Fetch the stubs of one port and merge them into a typeshed of their own: the base is
# micropython-stdlib-stubs (a reduced copy of typeshed's stdlib), the port's modules join its
# stdlib folder and VERSIONS list (a module there is found before mypy_path, and errors in
# the stubs are not ours to report). Skipped when already done for the same pins.
STDLIB="micropython-stdlib-stubs~=1.29.0"
install_stubs() {
    local port=$1 dir=out/stubs/$1
    local pin="${STUBS[$port]} $STDLIB"
    [[ -f $dir/.pin && $(cat "$dir/.pin") == "$pin" ]] && return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    python -m pip install -q --no-compile --no-deps --disable-pip-version-check \
        --target "$dir/port" "${STUBS[$port]}" || return 1
    python -m pip install -q --no-compile --no-deps --disable-pip-version-check \
        --target "$dir/std" "$STDLIB" || return 1
    python - "$dir" <<'EOF' || return 1
import os
import shutil
import sys

d = sys.argv[1]
port, ts = os.path.join(d, "port"), os.path.join(d, "typeshed")
shutil.copytree(os.path.join(d, "std", "stdlib"), os.path.join(ts, "stdlib"))
shutil.copytree(os.path.join(d, "std", "stubs"), os.path.join(ts, "stubs"))
names = []
for name in sorted(os.listdir(port)):
    path = os.path.join(port, name)
    mod = name[:-4] if name.endswith(".pyi") else name
    # __builtins__.pyi is for pyright; the rest are the package's own files.
    if mod == "__builtins__" or name.endswith(".dist-info"):
        continue
    # The port's module replaces the base's, whether a file or a package.
    dst = os.path.join(ts, "stdlib", mod)
    if name.endswith(".pyi"):
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copy(path, dst + ".pyi")
    elif os.path.isdir(path):
        if os.path.exists(dst + ".pyi"):
            os.remove(dst + ".pyi")
        shutil.copytree(path, dst, dirs_exist_ok=True)
    else:
        continue
    names.append(mod)
with open(os.path.join(ts, "stdlib", "VERSIONS"), "a") as f:
    f.write("\n# The port's own modules (scripts/typecheck.sh)\n")
    for mod in names:
        f.write("%s: 3.0-\n" % mod)
EOF
    echo "$pin" > "$dir/.pin"
}

install_all() {
    local port
    for port in "${PORTS[@]}"; do
        install_stubs "$port" || { echo "typecheck: could not install ${STUBS[$port]}" >&2; return 1; }
    done
}

if [[ ${1:-} == --install ]]; then
    install_all
    exit $?
fi

# Link trees (rebuilt each run: they follow added and removed files).
link_trees() {
    rm -rf "$OUT/cpython" "$OUT/board" "$OUT/flat-cpython" "$OUT/flat-board"
    mkdir -p "$OUT/cpython/dpsense" "$OUT/board" "$OUT/flat-cpython" "$OUT/flat-board"
    ln -s ../../../../dpsense/__init__.py "$OUT/cpython/dpsense/__init__.py"
    ln -s ../../../../cloud "$OUT/cpython/dpsense/cloud"
    ln -s ../../../../shared_protocol "$OUT/cpython/dpsense/protocol"
    ln -s ../../../../tools "$OUT/cpython/dpsense/tools"
    local f m
    for f in firmware/*.py; do
        [[ ${f##*/} == mb* ]] || ln -s "../../../$f" "$OUT/board/"
    done
    ln -s ../../../firmware/boards "$OUT/board/boards"
    ln -s ../../../shared_protocol "$OUT/board/shared_protocol"
    # On the micro:bit every module is flat, so shared_protocol's fallbacks
    # (`except ImportError: from wire import ...`) import these names; to the checker
    # each flat module is the package's own.
    for f in shared_protocol/*.py; do
        m=$(basename "$f" .py)
        [[ $m == __init__ ]] && continue
        echo "from dpsense.protocol.$m import *" > "$OUT/flat-cpython/$m.pyi"
        echo "from shared_protocol.$m import *" > "$OUT/flat-board/$m.pyi"
    done
}

# mypy's output with the linked paths mapped back to the repository's.
unlink_paths() {
    sed -e "s#^$OUT/cpython/dpsense/cloud/#cloud/#" \
        -e "s#^$OUT/cpython/dpsense/protocol/#shared_protocol/#" \
        -e "s#^$OUT/cpython/dpsense/tools/#tools/#" \
        -e "s#^$OUT/board/shared_protocol/#shared_protocol/#" \
        -e "s#^$OUT/board/#firmware/#"
}

status=0
# run NAME WHAT MYPYPATH -- mypy arguments...
run() {
    local name=$1 what=$2 path=$3 t0 ms rc last
    shift 4
    t0=${EPOCHREALTIME/./}
    MYPYPATH=$path mypy "$@" > "$OUT/$name.raw" 2>&1
    rc=$?
    ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
    unlink_paths < "$OUT/$name.raw" > "$OUT/$name.txt"
    rm -f "$OUT/$name.raw"
    last=$(tail -n 1 "$OUT/$name.txt")
    if [[ $rc -eq 0 ]]; then
        printf 'typecheck %-8s ok      %s: %s (%d.%d s)\n' "$name" "$what" "$last" $((ms / 1000)) $((ms % 1000 / 100))
    else
        printf 'typecheck %-8s FAILED  %s: %s (%d.%d s)\n' "$name" "$what" "$last" $((ms / 1000)) $((ms % 1000 / 100))
        grep -E ': (error|note):' "$OUT/$name.txt" | sed 's/^/    /'
        status=1
    fi
}

if ! command -v mypy >/dev/null; then
    echo "typecheck: no mypy in .venv (run scripts/setup.sh)" >&2
    exit 1
fi
install_all || exit 1
mkdir -p "$OUT"
link_trees

# Each check has a cache of its own: the standard library differs between them.
run cpython "dpsense.cloud, .protocol, .tools on CPython" "" -- \
    --cache-dir "$OUT/cache-cpython"
for port in esp32 pico_w; do
    run "$port" "firmware/ + shared_protocol/ against ${STUBS[$port]%%[~=]*}" "$OUT/board:$OUT/flat-board" -- \
        --config-file scripts/mypy-board.ini --custom-typeshed-dir "out/stubs/$port/typeshed" \
        --cache-dir "$OUT/cache-$port" "$OUT/board"
done
exit $status
