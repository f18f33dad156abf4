"""The parameters a correction server's round ledger is bound to, and a new noise key.

A record's noise towards the analyst is fixed by the server's key and its token, and its scale
by ``Delta_A / epsilon_A``; a window's answer also depends on the mode and the rules' parameters
(normal radius, w_O, split, alpha, the boards' noise scale). Answering an answered window again
under another key or other parameters would give the analyst a second, fresh view of its records,
so the ledger (honest.RoundLedger.bind_key) records both at first use and refuses a server started
with others; ``--rotate-noise-key`` (honest.RoundLedger.rotate) binds new ones and closes every
window answered so far.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

from dpsense.cloud.errors import UsageError
from dpsense.cloud.deploy.files import write_private


def answer_parameters(mode: str, epsilon: Fraction, delta_a: int, params: object) -> dict[str, str]:
    """What shapes a record's noise and a window's answer: the mode, epsilon_A, Delta_A and every
    field of the server's CorrectionParams (normal radius, w_O, split, alpha, noise scale, ...)."""
    out = {"mode": mode, "epsilon_A": str(Fraction(epsilon)), "delta_A": str(int(delta_a))}
    for f in fields(params):  # type: ignore[arg-type]
        out[f.name] = repr(getattr(params, f.name))
    return out


def fingerprint(key: bytes) -> bytes:
    return hashlib.sha256(b"dpsense noise key" + key).digest()


def encode(params: dict[str, str] | None) -> bytes | None:
    return None if params is None else json.dumps(params, sort_keys=True).encode()


def decode(raw: bytes) -> dict[str, str]:
    try:
        out = json.loads(raw)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise UsageError("the round ledger's parameters are damaged; restore the correction database")
    return {str(k): str(v) for k, v in out.items()}


def check(rows: dict[str, bytes], fp: bytes, params: dict[str, str] | None) -> None:
    """Refuse (UsageError) a key fingerprint ``fp`` or ``params`` other than the ledger's ``rows``."""
    if bytes(rows["key"]) != fp:
        raise UsageError("the correction server's noise key is not the one its round ledger was written "
                         "with: restore the key (correction-noise.key) from a backup; a new key would let "
                         "answered windows be asked again with fresh noise")
    if params is not None and bytes(rows["params"]) != encode(params):
        was = decode(bytes(rows["params"]))
        diff = ", ".join("%s %s -> %s" % (k, was.get(k, "-"), params.get(k, "-"))
                         for k in sorted(set(was) | set(params)) if was.get(k) != params.get(k))
        raise UsageError("the correction server's parameters are not the ones its round ledger answered with "
                         "(%s): answered windows would be answered again from new noise; start it with the "
                         "ledger's parameters, or with --rotate-noise-key (a new key; the windows answered so "
                         "far are then never answered again)" % diff)


def new_key(path: Path, size: int) -> bytes:
    """A fresh noise key at ``path`` (0600), replacing the old one in one rename."""
    key = os.urandom(size)
    tmp = path.with_name(path.name + ".new")
    write_private(tmp, key)
    os.replace(tmp, path)
    return key
