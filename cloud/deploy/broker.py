"""Mosquitto configured so that no accepted message is lost, no account can pass for another,
and no password crosses a network in clear.

    broker = Broker(Path("dpsense-data"), port=1883)
    pw = broker.add_account("analyst")       # role accounts: analyst, correction, curator, alerts
    name, pw7 = broker.add_device(7)         # device account "d7"
    with broker.running():
        ...

Everything lives under ``<data_dir>/broker`` (0700, every file 0600): ``mosquitto.conf``,
``passwd`` (hashed by ``mosquitto_passwd``), ``acl`` (regenerated from ``accounts.json`` on
every change, never edited by hand), ``db/`` (persistence), ``tls/`` (the lab CA and the
server certificate of cloud/deploy/tls.py) and ``mosquitto.log``. No password is kept in clear:
``add_account`` returns it once and the caller shows it or writes it where the user asked
(``dpsense broker add-account NAME --password-file PATH``); each service reads its own
secret from a 0600 file or ``DPSENSE_BROKER_PASSWORD``.

Identities. ``use_username_as_clientid true``: Mosquitto replaces whatever client id a
client sends by its user name, so a connection's client id *is* its account and nobody
can take over another account's session (a device that sends ``analyst-ingest`` as its
client id gets the session ``d7``; the ingest keeps its own). The price is one account per
connection: a service that opens two (the analyst and the correction server each run an
ingest next to their round protocol) gets the pair ``NAME`` and ``NAME-ingest``, made
together with one password and each with the narrowest ACL its connection needs.
Mosquitto's dynamic-security plugin can bind a client id to an account too, but it binds
only the ids it is told about (every device would need one bound as well), keeps its
accounts in a file that only a running broker edits over MQTT with an admin password of
its own, and replaces the plain ``acl_file`` this module generates; the option above
gives the same guarantee with the files Mosquitto already reads.

Access. Devices get a section each: write their own readings and status topics and the
shared corrections topic, read their own acknowledgement topics, nothing else. Each ingest may
write one kind of acknowledgement (readings ``dpsense/ack/+/r``, corrections ``dpsense/ack/+/c``),
and a device takes an acknowledgement only of the kind its topic names. Role rules
are in ``_RULES``; an account without a section may do nothing.

TLS. ``Broker(..., tls=ServerFiles)`` makes the listener MQTT over TLS (1.2 or later); a
plain listener is refused anywhere but on loopback (``start``).

Why the settings differ from Mosquitto's defaults:

* ``max_queued_messages 0`` and ``max_queued_bytes 0``: the default queue of 1000 messages
  per client silently drops QoS 1 messages for a subscriber that falls behind (an ingest
  busy committing, or offline with a persistent session).
* ``autosave_interval 1``: the default of 1800 s keeps up to half an hour of acknowledged
  messages in RAM only. A clean stop (SIGTERM) always saves; a broker crash can lose at most
  the last second. Mosquitto has no synchronous persistence, so this is the floor.
* ``max_inflight_messages 4000``: the ingest acknowledges a batch only after committing it;
  with the default 20 unacknowledged messages per client the broker would stall each batch,
  and with 1000 (two batches of 500) it stalled while a commit waited on the disk: 4000 keeps
  the ingest reading during the commit (bench/ingest.py).
* ``set_tcp_nodelay true``: Mosquitto's small writes (a PUBACK is 4 bytes) are otherwise held
  back by Nagle's algorithm until the client's delayed TCP acknowledgement, up to 40 ms, when
  the client writes rarely, as the ingest (one write per batch) and the fleet publisher (one
  per slice, cloud/transport/mqttio.py) do.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from dpsense.cloud.deploy.files import folder_owner, make_private, private_dir, write_private
from dpsense.cloud.errors import BrokerError, UsageError
from dpsense.cloud.transport import topics
from dpsense.cloud.transport.topics import MAX_PACKET

if TYPE_CHECKING:
    from dpsense.cloud.deploy.tls import ServerFiles

ROLES = ("analyst", "correction", "curator", "alerts", "device")
# The further connections of a service (cloud/cli/commands/services.py), each its own account
# since a client id is an account name: its ingest, and the analyst's store of the boards'
# status messages.
INGEST_SUFFIX = "-ingest"
STATUS_SUFFIX = "-status"
_EXTRA = {"analyst": (INGEST_SUFFIX, STATUS_SUFFIX), "correction": (INGEST_SUFFIX,)}


def worker_account(account: str, worker: int | None) -> str:
    """The account of worker ``worker`` of a scaled-out service (docs/scale-out.md): ``analyst-2``,
    ``analyst-ingest-3``; ``account`` itself for None. A client id is an account name here, so
    each worker process needs an account of its own."""
    if worker is None:
        return account
    if worker < 1:
        raise UsageError("worker numbers start at 1, got %d" % worker)
    return "%s-%d" % (account, worker)

_RULES = {
    # The round protocol; readings and status as before (a read-only tool may log in as it).
    "analyst": ["topic deny " + topics.CORRECTIONS,
                "topic read " + topics.READINGS_ALL,
                "topic read " + topics.STATUS_ALL,
                "topic write " + topics.ROUND_TO_CS,
                "topic read " + topics.ROUND_TO_ANALYST,
                "topic write " + topics.ALERTS_ALL],
    # The analyst's ingest: stores readings, and acknowledges committed ones to each device, on
    # the devices' reading acknowledgement topics only: it cannot release a correction record.
    "analyst-ingest": ["topic deny " + topics.CORRECTIONS,
                       "topic read " + topics.READINGS_ALL,
                       "topic read " + topics.STATUS_ALL,
                       "topic write " + topics.ACK_READINGS_ALL],
    # The analyst's store of the boards' status messages (cloud/analyst/devices.py).
    "analyst-status": ["topic read " + topics.STATUS_ALL],
    "correction": ["topic read " + topics.CORRECTIONS,
                   "topic read " + topics.ROUND_TO_CS,
                   "topic write " + topics.ROUND_TO_ANALYST],
    # The correction server's ingest: stores corrections, and acknowledges committed ones to
    # each device (the record's clear header names it), on correction acknowledgement topics only.
    "correction-ingest": ["topic read " + topics.CORRECTIONS,
                          "topic write " + topics.ACK_CORRECTIONS_ALL],
    "curator": ["topic deny " + topics.CORRECTIONS,
                "topic deny " + topics.READINGS_ALL],
    # An operator's tools: the candidates of each window, nothing else.
    "alerts": ["topic read " + topics.ALERTS_ALL],
}


def _device_rules(user: str) -> list[str]:
    return ["topic write " + topics.READINGS % user,
            "topic write " + topics.STATUS % user,
            "topic write " + topics.CORRECTIONS,
            "topic read " + topics.ACK % user]


def _acl_text(accounts: dict[str, str]) -> str:
    lines = [
        "# Generated by dpsense from accounts.json; edits are overwritten.",
        "# Devices: readings and status only under their own user name, corrections on the",
        "# shared topic (the records are sealed for the correction server, docs/protocol.md 7),",
        "# and their own acknowledgements (both kinds) to read. Accounts without a section may do nothing.",
        "",
    ]
    for user, role in sorted(accounts.items()):
        rules = _device_rules(user) if role == "device" else _RULES.get(role)
        if rules:
            lines.append("user " + user)
            lines.extend(rules)
            lines.append("")
    return "\n".join(lines)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    return "exited with status %d" % code


class Broker:
    """A Mosquitto instance owned by dpsense: configuration, accounts, process."""

    def __init__(self, data_dir: Path | str, port: int = 1883, host: str = "127.0.0.1",
                 tls: "ServerFiles | None" = None, die_with_parent: bool = False) -> None:
        # die_with_parent: Mosquitto ends when the thread that started it does (a SIGKILLed
        # `dpsense broker run` or demo must not leave it holding the port); for commands
        # that start it from their main thread only.
        self.die_with_parent = die_with_parent
        self.data_dir = Path(data_dir).resolve()
        self.dir = self.data_dir / "broker"
        self.host = host
        self.port = port
        self.tls = tls
        self._proc: subprocess.Popen[bytes] | None = None

    # -- configuration -------------------------------------------------------------
    @property
    def conf_path(self) -> Path:
        return self.dir / "mosquitto.conf"

    @property
    def log_path(self) -> Path:
        return self.dir / "mosquitto.log"

    @property
    def tls_dir(self) -> Path:
        """Where ``dpsense broker make-ca`` and ``make-cert`` put their files by default."""
        return self.dir / "tls"

    def _accounts(self) -> dict[str, str]:
        p = self.dir / "accounts.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def accounts(self) -> dict[str, str]:
        """User name -> role (an ingest account's role is ``<role>-ingest``)."""
        return dict(self._accounts())

    def _prepare(self) -> None:
        """The folders (0700) and the files Mosquitto reads, accounts and ACL as they are now."""
        private_dir(self.data_dir)
        for d in (self.dir, self.dir / "db"):
            private_dir(d)
        passwd = self.dir / "passwd"
        if not passwd.exists():
            write_private(passwd, b"")
        write_private(self.dir / "acl", _acl_text(self._accounts()))

    def write_config(self) -> Path:
        self._prepare()
        user = pwd.getpwuid(os.getuid()).pw_name
        listener = ["listener %d %s" % (self.port, self.host)]
        if self.tls is not None:
            listener += ["certfile %s" % self.tls.cert, "keyfile %s" % self.tls.key,
                         "tls_version tlsv1.2"]
        conf = "\n".join([
            "# Generated by dpsense (cloud/deploy/broker.py explains each setting).",
            "per_listener_settings false",
            *listener,
            "allow_anonymous false",
            "use_username_as_clientid true",
            "password_file %s" % (self.dir / "passwd"),
            "acl_file %s" % (self.dir / "acl"),
            "persistence true",
            "persistence_location %s/" % (self.dir / "db"),
            "autosave_interval 1",
            "autosave_on_changes false",
            "max_queued_messages 0",
            "max_queued_bytes 0",
            "max_inflight_messages 4000",
            "queue_qos0_messages false",
            "set_tcp_nodelay true",
            # MAX_PACKET (64 KiB): a record is tens of bytes, a round-message chunk 32 KiB
            # (cloud/correction/chunks.py); Mosquitto drops a client that sends more.
            "max_packet_size %d" % MAX_PACKET,
            "pid_file %s" % (self.dir / "mosquitto.pid"),
            "log_dest file %s" % self.log_path,
            "log_type error",
            "log_type warning",
            "log_type notice",
            "connection_messages true",
            # Stay the invoking user: the files above are private to it.
            "user %s" % user,
            "",
        ])
        write_private(self.conf_path, conf)
        return self.conf_path

    def _check_name(self, name: str, role: str) -> None:
        if role not in ROLES:
            raise BrokerError("unknown role %r (one of %s)" % (role, ", ".join(ROLES)))
        if role == "device" and topics.device_id_of(name) is None:
            raise BrokerError("device accounts are named d<device_id>, got %r" % name)
        if role != "device" and topics.device_id_of(name) is not None:
            raise BrokerError("%r is a device name; give the %s account another name" % (name, role))
        if not name or any(c in name for c in "/+#: \t\n"):
            raise BrokerError("invalid account name %r" % name)
        for suffix in (INGEST_SUFFIX, STATUS_SUFFIX):
            if name.endswith(suffix) or re.search(re.escape(suffix) + r"-[0-9]+$", name):
                raise BrokerError("%r: names ending in %s are the accounts made with their service's"
                                  % (name, suffix))

    def add_account(self, name: str, role: str | None = None, password: str | None = None,
                    workers: int = 0) -> str:
        """Create or reset an account (and its ingest account, for the analyst and correction
        roles); its password, which is kept nowhere in clear: the caller passes it on.

        ``workers`` > 0 also makes the accounts of workers 1..``workers`` of a scaled-out service
        (``worker_account``: ``analyst-1``, ``analyst-ingest-1``, ...), each with the ACL of
        the account it is a copy of and the same password."""
        role = role or name
        self._check_name(name, role)
        if workers < 0 or (workers and role == "device"):
            raise BrokerError("workers must be >= 0, and a device has none (got %d)" % workers)
        password = password or secrets.token_urlsafe(18)
        base = {name: role}
        for suffix in _EXTRA.get(role, ()):
            base[name + suffix] = role + suffix
        entries = dict(base)
        for k in range(1, workers + 1):
            entries.update({worker_account(user, k): r for user, r in base.items()})
        self._set_passwords({user: password for user in entries}, entries)
        return password

    def add_device(self, device_id: int, password: str | None = None) -> tuple[str, str]:
        name = topics.device_username(device_id)
        return name, self.add_account(name, "device", password)

    def add_devices(self, device_ids: list[int]) -> dict[str, str]:
        """Create or reset many device accounts in one go; user name -> new password."""
        users = {topics.device_username(d): secrets.token_urlsafe(18) for d in device_ids}
        self._set_passwords(users, {u: "device" for u in users})
        return users

    def remove_device(self, device_id: int) -> bool:
        """Delete account d<ID> (a running broker re-reads its accounts: the device can no longer
        log in); False when there was none."""
        name = topics.device_username(device_id)
        accounts = self._accounts()
        passwd = self.dir / "passwd"
        lines = passwd.read_text().splitlines() if passwd.exists() else []
        kept = [line for line in lines if line and line.split(":", 1)[0] != name]
        if name not in accounts and len(kept) == len([line for line in lines if line]):
            return False
        accounts.pop(name, None)
        write_private(passwd, "".join(line + "\n" for line in kept))
        write_private(self.dir / "accounts.json", json.dumps(accounts, indent=1, sort_keys=True))
        self._prepare()
        self._give_to_folder_owner()
        self.reload()
        return True

    def _set_passwords(self, passwords: dict[str, str], roles: dict[str, str]) -> None:
        """Hash ``passwords`` with ``mosquitto_passwd -U`` from a 0600 file that lives only for
        the call (a password on its command line would show in ``ps``)."""
        tool = shutil.which("mosquitto_passwd")
        if tool is None:
            raise BrokerError("mosquitto_passwd not found: install the Debian package 'mosquitto'")
        for user, pw in passwords.items():
            if not pw or any(c in pw for c in ":\n\r"):
                raise BrokerError("a password must be one line without ':' (account %s)" % user)
        self._prepare()
        tmp = self.dir / (".passwd-new-%d" % os.getpid())
        try:
            write_private(tmp, "".join("%s:%s\n" % kv for kv in passwords.items()))
            res = subprocess.run([tool, "-U", str(tmp)], capture_output=True, text=True)
            if res.returncode != 0:
                raise BrokerError("mosquitto_passwd failed: %s" % (res.stderr.strip() or res.stdout.strip()))
            hashed = tmp.read_text().splitlines()
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        passwd = self.dir / "passwd"
        kept = [line for line in passwd.read_text().splitlines()
                if line and line.split(":", 1)[0] not in passwords]
        write_private(passwd, "\n".join(kept + hashed) + "\n")
        accounts = self._accounts()
        accounts.update(roles)
        write_private(self.dir / "accounts.json", json.dumps(accounts, indent=1, sort_keys=True))
        self._prepare()
        self._give_to_folder_owner()
        self.reload()

    def _give_to_folder_owner(self) -> None:
        """Accounts made by root (provisioning a board) in the broker user's data dir stay
        readable by the broker's user: its files get the data dir's owner."""
        owner = folder_owner(self.data_dir)
        if owner is None:
            return
        for p in (self.dir, self.dir / "db", self.dir / "passwd", self.dir / "acl", self.dir / "accounts.json"):
            if p.exists():
                os.chown(p, *owner)

    # -- process -------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not os.path.exists(exe):
            raise BrokerError("mosquitto not found: install the Debian package 'mosquitto'")
        if self.tls is None and not is_loopback(self.host):
            raise UsageError("a plain-text listener on %s would carry every password in clear: "
                             "listen on 127.0.0.1, or add --tls (after `dpsense broker make-ca` "
                             "and `dpsense broker make-cert --host NAME`)" % self.host)
        if self.tls is not None:
            for f in (self.tls.cert, self.tls.key):
                if not Path(f).is_file():
                    raise UsageError("TLS: %s is missing: make it with `dpsense broker make-ca` "
                                     "and `dpsense broker make-cert --host NAME`" % f)
        if _port_open(self.host, self.port):
            raise BrokerError("port %s:%d is already in use" % (self.host, self.port))
        self.write_config()
        errfile = self.dir / "mosquitto.stderr"
        with open(write_private(errfile, b""), "wb") as err:
            # umask 077: the persistence file and the log Mosquitto creates stay private too.
            self._proc = subprocess.Popen([exe, "-c", str(self.conf_path)],
                                          stdout=subprocess.DEVNULL, stderr=err, umask=0o077,
                                          preexec_fn=die_with_parent if self.die_with_parent else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise BrokerError("mosquitto exited with %s: %s (log: %s)"
                                  % (code, errfile.read_text(errors="replace").strip(), self.log_path))
            if _port_open(self.host, self.port):
                make_private(self.log_path)
                return
            time.sleep(0.05)
        self.stop()
        raise BrokerError("mosquitto did not listen on %s:%d within %.0f s (log: %s)"
                          % (self.host, self.port, timeout, self.log_path))

    def reload(self) -> None:
        """Make a running broker (ours, or `dpsense broker run` elsewhere) re-read passwords and ACL."""
        pid = self._proc.pid if self._proc is not None and self._proc.poll() is None else None
        if pid is None:
            try:
                pid = int((self.dir / "mosquitto.pid").read_text().split()[0])
                os.kill(pid, 0)
            except (OSError, ValueError, IndexError):
                return
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError:
            return
        time.sleep(0.2)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM: Mosquitto saves its database before exiting."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def died(self) -> str | None:
        """None while our Mosquitto runs; once it has ended by itself, a line that says how."""
        if self._proc is None or self._proc.poll() is None:
            return None
        return "mosquitto (pid %d) %s (log: %s)" % (self._proc.pid, _exit_text(self._proc.returncode),
                                                   self.log_path)

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    @contextlib.contextmanager
    def running(self) -> Iterator["Broker"]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


def die_with_parent() -> None:
    """In a child between fork and exec: ask Linux to send it SIGTERM when the thread that
    forked it ends, however that ends (kill -9 included). Elsewhere nothing: the child then
    outlives a killed parent, as any child does."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
