"""Mode secure over a real Mosquitto: the correction server's loop and the analyst's round,
every MQTT message a chunk of at most 32 KiB (under the broker's 64 KiB packet limit), and R
equal to the plaintext predicate on the server's noisy d_diff (its input to the comparison)."""
from __future__ import annotations

import shutil
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.correction import chunks
from dpsense.cloud.correction.chunks import MAX_PACKET
from dpsense.cloud.correction.honest import RecordNoise, RoundPolicy
from dpsense.cloud.correction.mpc.secure import candidates

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
KEY = bytes(range(32))


class _Table:
    def __init__(self, table):
        self.table = table

    def lookup(self, tokens):
        return {t: self.table[t] for t in tokens if t in self.table}

    def close(self):
        pass


def test_secure_round_over_mosquitto(tmp_path):
    from dpsense.cloud.analyst.service import Analyst, AnalystParams
    from dpsense.cloud.correction.rules import CorrectionParams
    from dpsense.cloud.correction.server import CorrectionServer
    from dpsense.cloud.transport.session import Connection

    n, rho = 3000, 40.0
    rng = np.random.default_rng(21)
    dist = rng.uniform(0, 400, n)
    d = rng.integers(-200, 200, n)
    tokens = [rng.bytes(8) for _ in range(n)]
    table = {t: int(x) for t, x in zip(tokens[10:], d[10:])}      # rows 0-9 have no record
    presumed = np.array([0, 1, 2, 500, 501], dtype=np.intp)
    broker = Broker(tmp_path, port=free_port())
    pw_a, pw_c = broker.add_account("analyst"), broker.add_account("correction")
    with broker.running():
        server = CorrectionServer(Connection(broker.host, broker.port, "correction", pw_c, "correction"),
                                  CorrectionParams(w_o=0.0, normal_radius=rho), lambda: _Table(table),
                                  log=lambda s: None, mode="secure", noise_key=KEY, epsilon=Fraction(1),
                                  policy=RoundPolicy(min_window=100, min_presumed=1))
        sent: list[int] = []
        publish = server._client.publish
        server._client.publish = lambda topic, payload, qos=0: (sent.append(len(payload)), publish(
            topic, payload, qos=qos))[1]
        stop = threading.Event()
        th = threading.Thread(target=server.run, args=(stop,), daemon=True)
        th.start()
        analyst = Analyst(Connection(broker.host, broker.port, "analyst", pw_a, "analyst"), lambda: None,
                          AnalystParams(eps_q=1.0, min_samples=1, mode="secure", round_timeout=120.0,
                                        centre_q=(0.0, 0.0)), log=lambda s: None)
        a_publish = analyst._client.publish
        analyst._client.publish = lambda topic, payload, qos=0: (sent.append(len(payload)), a_publish(
            topic, payload, qos=qos))[1]
        try:
            analyst.session.start(analyst._client)
            deadline = time.monotonic() + 10
            while not server.session.up.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)                    # both subscriptions are sent on connect
            r, fp, fn, res = analyst._secure_round(1, 7, True, tokens, presumed, dist, n)
        finally:
            stop.set()
            th.join(10)
            analyst._client.disconnect()
            analyst._client.loop_stop()
    noise = RecordNoise(KEY, rho, Fraction(1))
    shifted = rho + noise.margin(CorrectionParams(w_o=0.0).alpha)
    d_noisy = noise.noisy(tokens[10:], d[10:].astype(float))
    known = candidates(d_noisy, dist[10:], shifted) + 10
    # The noise is in the answer: the exact d_diff gives another R (a server on the exact
    # values would leak more than epsilon_A, docs/privacy.md).
    assert not np.array_equal(known, candidates(d[10:].astype(float), dist[10:], shifted) + 10)
    assert r.tolist() == sorted(set(known.tolist()) | {0, 1, 2})      # unknown rows keep O'
    assert res["missing"] == 10
    assert max(sent) <= chunks.CHUNK_SIZE < MAX_PACKET and len(sent) > 4     # the big parts went as chunks
    assert server.rounds_done == 1
