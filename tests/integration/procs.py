"""Process handling the integration tests share."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def wait_for(pred: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    """Poll ``pred`` every ``step`` seconds until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def stop(p: subprocess.Popen) -> None:
    """SIGTERM, as a person's Ctrl-C or a service manager would; SIGKILL after 15 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def service(logs: Path, name: str, args: list[str], password: str | None = None) -> subprocess.Popen[bytes]:
    """``python -m dpsense.cloud.cli *args`` from the checkout, its output appended to
    ``logs/<name>.log``; ``password`` is given as DPSENSE_BROKER_PASSWORD."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if password is not None:
        env["DPSENSE_BROKER_PASSWORD"] = password
    with open(logs / ("%s.log" % name), "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args], env=env,
                                stdout=log, stderr=log)
