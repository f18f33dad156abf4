"""The unix rig: the firmware under the MicroPython unix port, as a subprocess.

The "board" is a folder that ``tools/flash.py`` fills exactly as it fills a real
board (shared_protocol/ as a package, firmware modules at the root), plus the board
profile under boards/. ``main.py config.json`` runs there; its console goes to
``console.log``. ``reset()`` is kill -9 and a restart on the same files, so the ring
buffer and the ledger see what a power cut would leave them.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any, Sequence

from dpsense.protocol.ledgerfile import fresh
from dpsense.tools.deploy import BOARDS as FLASH_BOARDS
from dpsense.tools.deploy import FIRMWARE_DIR, deploy_folder, micropython_binary, plan, resolve_sources

from . import RigError, wait_in_log
from .cloud import CloudSide


class UnixRig:
    name = "unix"

    def __init__(self, workdir: Path, board: str, cloud: CloudSide) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.board = board
        self.cloud = cloud
        self.log_path = self.dir / "console.log"
        self.exe = micropython_binary()
        self.proc: subprocess.Popen[bytes] | None = None
        self.boots = 0
        self._config: dict[str, Any] | None = None
        self._pos = 0

    # -- files -----------------------------------------------------------------------------
    def deploy(self, paths: Sequence[str] | None = None) -> list[str]:
        """Copy shared_protocol and the firmware (or ``paths``) like tools/flash.py does."""
        uploads = plan(FLASH_BOARDS["unix"], resolve_sources(paths))
        deploy_folder(self.dir, uploads, log=lambda s: None)
        (self.dir / "boards").mkdir(exist_ok=True)
        for name in ("__init__.py", self.board + ".py"):
            shutil.copyfile(FIRMWARE_DIR / "boards" / name, self.dir / "boards" / name)
        return [u.target for u in uploads]

    def put(self, name: str, data: bytes) -> None:
        """One more file on the board's file system (a CA certificate, say)."""
        (self.dir / name).write_bytes(data)

    def config(self, device_id: int, **keys: Any) -> dict[str, Any]:
        """A provisioning config whose broker is the cloud side's relay."""
        user, password = self.cloud.add_device(device_id)
        # Keys with a fresh ledger, as provisioning writes them (the seal's nonce is its counter).
        self.put("seal.key", self.cloud.seal_keys(device_id))
        ledger = self.dir / "ledger.bin"
        if ledger.exists():
            ledger.unlink()
        cfg = {"device_id": device_id, "broker_host": "127.0.0.1",
               "broker_port": self.cloud.relay.port, "broker_user": user,
               "broker_password": password, "backoff_max_ms": 1000}
        cfg.update(keys)
        return cfg

    # -- process ---------------------------------------------------------------------------
    def start(self, config: dict[str, Any], stimulus: Sequence[Sequence[int]] | None = None) -> None:
        if stimulus is not None:
            with open(self.dir / "stimulus.txt", "w") as f:
                for row in stimulus:
                    f.write(",".join(str(v) for v in row) + "\n")
            config = dict(config, stimulus="stimulus.txt")
        (self.dir / "config.json").write_text(json.dumps(config))
        # Provisioning writes a fresh ledger (tools/provision.py write_config); a rig that
        # starts the same board again keeps the one it has, as a reset does.
        ledger = self.dir / config.get("ledger_path", "ledger.bin")
        if not ledger.exists():
            ledger.write_bytes(fresh())
        self._config = config
        self._launch()

    def _launch(self) -> None:
        self.boots += 1
        with open(self.log_path, "ab") as log:
            log.write(b"--- rig: boot %d ---\n" % self.boots)
            log.flush()
            self._pos = log.tell()
            self.proc = subprocess.Popen([self.exe, "main.py", "config.json"], cwd=self.dir,
                                         stdout=log, stderr=subprocess.STDOUT)

    def console(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def expect(self, pattern: str, timeout_s: float = 10.0) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) in the console since the last match or boot."""
        def stopped() -> str | None:
            p = self.proc
            return None if p is None or p.poll() is None else "firmware exited with %s" % p.returncode
        m, self._pos = wait_in_log(self.log_path, self._pos, pattern, timeout_s, stopped,
                                   "log: %s" % self.log_path)
        return m

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise RigError("firmware still running after %.0f s (log: %s)" % (timeout_s, self.log_path))

    def exec(self, code: str, timeout_s: float = 30.0) -> str:
        """Run ``code`` on the "board" (a fresh interpreter in its folder); its output."""
        r = subprocess.run([self.exe, "-c", code], cwd=self.dir, capture_output=True, text=True,
                           timeout=timeout_s)
        if r.returncode:
            raise RigError("exec failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
        return r.stdout

    def kill(self) -> None:
        """Power cut: SIGKILL, no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def reset(self) -> None:
        """kill -9, then boot again on the same files (config, ring, ledger, stimulus)."""
        self.kill()
        self._launch()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()

