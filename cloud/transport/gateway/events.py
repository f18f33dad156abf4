"""Event lines (docs/protocol.md 2.2): what a board too small for its own messages writes.

    ev = parse_event(b"#done 30 12 310")      # {"event": "done", "readings": 30, ...}
    texts, status = expand_event(ev, boot)    # the full firmware's console text, status or None

The micro:bit writes ``#<name> <fields>`` instead of its console text and status
messages; the gateway expands them into the words firmware/app.py writes itself, so a
reader (and a rig) sees the same lines from every board. ``boot`` is the board's last
``boot`` event, whose device, boot id, board and entropy the later events do not repeat.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

# name -> field names of an event line (docs/protocol.md 2.2); every field is an integer
# but ``boot``'s board, entropy source and version (TEXT_FIELDS).
EVENTS = {
    "boot": ("board", "entropy", "device", "boot", "row", "unit", "cap", "worst_num", "worst_den",
             "pending", "dropped", "mem_free", "version"),
    "cap": ("window", "spent", "cap", "unit", "row", "released"),
    "done": ("readings", "released", "cost_us"),
    "idle": ("released", "resent", "pending"),
}
TEXT_FIELDS = ("board", "entropy", "version")


def _frac(n: int, unit: int) -> str:
    """ledger.frac_text of n/unit: ``"3/10"``, or ``"2"`` for a whole number."""
    f = Fraction(n, unit)
    return str(f.numerator) if f.denominator == 1 else "%d/%d" % (f.numerator, f.denominator)


def parse_event(line: bytes) -> dict[str, Any]:
    """The fields of an event line ``#<name> <fields>``; ValueError names what is wrong."""
    parts = line[1:].decode("ascii").split()
    if not parts or parts[0] not in EVENTS:
        raise ValueError("unknown event %r" % (parts[0] if parts else ""))
    names = EVENTS[parts[0]]
    if len(parts) - 1 != len(names):
        raise ValueError("event %s has %d fields, not %d" % (parts[0], len(parts) - 1, len(names)))
    ev: dict[str, Any] = {"event": parts[0]}
    for k, v in zip(names, parts[1:]):
        ev[k] = v if k in TEXT_FIELDS else int(v)
    if "unit" in ev and ev["unit"] <= 0:
        raise ValueError("event %s: unit must be > 0" % parts[0])
    if ev.get("worst_den", 0) < 0 or (ev.get("worst_den") == 0 and ev["worst_num"]):
        raise ValueError("event %s: worst_num/worst_den is not a fraction" % parts[0])
    return ev


# A micro:bit whose ledger is missing or damaged runs with the cap -1 and releases nothing
# (firmware/mbstate.py); the words are the full firmware's (firmware/ledger.py DAMAGED).
STOPPED_CAP = -1
DAMAGED = "damaged or missing ledger: provision the board again"


def expand_event(ev: dict[str, Any], boot: dict[str, Any] | None) -> tuple[list[str], dict[str, Any] | None]:
    """Console lines and status message (or None) of a parsed event, in the words of the
    full firmware (app.py). ``boot``: the board's last ``boot`` event (device, boot id,
    board, entropy), which the later events of that boot do not repeat."""
    name = ev["event"]
    if name == "boot":
        er = _frac(ev["row"], ev["unit"])
        text = ("boot ok: board=%s device=%d boot=%d entropy=%s eps_record=%s pending=%d mem_free=%d"
                " version=%s" % (ev["board"], ev["device"], ev["boot"], ev["entropy"], er,
                                 ev["pending"], ev["mem_free"], ev["version"]))
        stopped = ev["cap"] == STOPPED_CAP
        status = {"event": "boot", "device": ev["device"], "boot": ev["boot"], "board": ev["board"],
                  "entropy": ev["entropy"], "eps_record": er,
                  "cap": "0" if stopped else _frac(ev["cap"], ev["unit"]), "pending": ev["pending"],
                  "dropped": ev["dropped"], "mem_free": ev["mem_free"], "version": ev["version"],
                  "ledger": DAMAGED if stopped else "ok"}
        if ev["worst_den"]:                       # 0/0: the board was not told
            status["eps_record_worst"] = _frac(ev["worst_num"], ev["worst_den"])
        if stopped:
            return [text, "ledger: %s; releasing nothing" % DAMAGED], status
        return [text], status
    if name == "cap" and ev["cap"] == STOPPED_CAP:
        b = boot or {}
        return ["ledger: releases stopped: %s" % DAMAGED], {
            "event": "ledger_stopped", "device": b.get("device"), "boot": b.get("boot"),
            "board": b.get("board"), "entropy": b.get("entropy"), "window": ev["window"],
            "released": ev["released"], "ledger": DAMAGED}
    if name == "cap":
        w, unit = ev["window"], ev["unit"]
        cap, spent = _frac(ev["cap"], unit), _frac(ev["spent"], unit)
        text = ("ledger: window %d cap %s reached (spent %s); withholding readings until window %d"
                % (w, cap, spent, w + 1))
        b = boot or {}
        status = {"event": "window_cap", "device": b.get("device"), "boot": b.get("boot"),
                  "board": b.get("board"), "entropy": b.get("entropy"),
                  "eps_record": _frac(ev["row"], unit), "window": w, "spent": spent, "cap": cap,
                  "withheld": 1, "released": ev["released"]}
        if ev["released"] > 0:
            status["last_seq"] = ev["released"] - 1
        return [text], status
    if name == "done":
        # The boot's state as its #boot said it, so that the newest status holds it all (the
        # dashboard reads a device's epsilon and cap from its latest status).
        done: dict[str, Any] = dict(expand_event(boot, None)[1] or {}) if boot is not None else {}
        done.pop("pending", None)           # the boot's count, long out of date
        done.update(event="done", released=ev["released"])
        if ev["released"] > 0:
            # The node numbers its records from 0 in each boot: its last seq (docs/protocol.md 13.2).
            done["last_seq"] = ev["released"] - 1
        return ["stimulus done: %d readings, %d released; firmware cost %d us per reading"
                % (ev["readings"], ev["released"], ev["cost_us"])], done
    if ev["pending"]:
        return ["idle: %d records not acknowledged, kept for the next boot (%d resent)"
                % (ev["pending"], ev["resent"])], None
    return ["idle: all %d records acknowledged (%d resent)" % (ev["released"], ev["resent"])], None
