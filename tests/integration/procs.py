"""Process handling the integration tests share."""
from __future__ import annotations

import signal
import subprocess


def stop(p: subprocess.Popen) -> None:
    """SIGTERM, as a person's Ctrl-C or a service manager would; SIGKILL after 15 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
