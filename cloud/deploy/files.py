"""Private files: the data directory is 0700, every database and secret 0600, whatever the umask.

    private_dir(Path("dpsense-data"))                 # created, or tightened, to 0700
    write_private(path, b"secret")                    # created 0600 (never wider, even for a moment)
    password = read_secret(path)                      # refused if group or others may read it

Modes are set explicitly, not left to the umask: ``os.open`` with the mode at creation,
``fchmod`` in case the file existed, ``chmod`` after a library (SQLite, numpy) created a
file. The ``dpsense`` command also sets umask 077 (cloud/cli/__init__.py), so what Mosquitto and
SQLite create for themselves (the persistence file, the log, ``-wal`` and ``-shm``) is
private as well.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from dpsense.cloud.errors import UsageError

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path | str) -> Path:
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(p, DIR_MODE)
    return p


def write_private(path: Path | str, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` with mode 0600 from the first byte on."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return p


def make_private(path: Path | str) -> None:
    """Tighten a file another library created (an SQLite database, an .npz) to 0600."""
    p = Path(path)
    if p.exists():
        os.chmod(p, FILE_MODE)


def folder_owner(folder: Path | str) -> tuple[int, int] | None:
    """``(uid, gid)`` to give what root writes into another user's folder, so that the service
    owning the folder can read it (a 0600 file of root's it could not); None when this process
    is not root, or the folder is root's or does not exist yet."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def read_secret(path: Path | str) -> str:
    """The first line of a secret file, which only its owner may read (0600 or 0400)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise UsageError("password file %s: %s" % (p, e.strerror or e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError("password file %s is not a regular file" % p)
    if st.st_mode & 0o077:
        raise UsageError("password file %s is readable by others (mode %04o); chmod 600 it"
                         % (p, stat.S_IMODE(st.st_mode)))
    text = p.read_text().strip()
    if not text or "\n" in text:
        raise UsageError("password file %s must hold the password on one line" % p)
    return text
