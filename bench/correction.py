"""Time of each correction mode on 100,000-record windows, next to numpy.sort of the same n.

    python bench/correction.py            # about 1-2 min (windows are built with DBSCAN), then mode secure
    python bench/correction.py --quick    # fewer repetitions
    python bench/correction.py --secure-only --secure-n 100000   # only mode secure

Each window is paper 1's synthetic data (separation 400, ``scale`` generator, seed 1)
perturbed with discrete Laplace noise at epsilon 0.1, 0.5 and 1, with everything the
reference gives as in ``dpsense experiment paper1`` (relaxed sensitivity, DBSCAN
calibrated on the reference, w_O, rho, band width); O' is DBSCAN on the perturbed
window. Only the correction logic is timed, in-process, both parties in one process:

* mode paper, 2017 reconstruction: ``run_protocol`` with Otsu + guard, R1;
* mode paper, never-worse rule: ``run_protocol`` with the noise split and provable layers;
* mode bands: ``make_bands`` (analyst) and ``lower_edges`` + ``band_candidates``
  (correction server).

* mode secure (cloud/correction/mpc/secure.py): once in-process, step by step (base OTs, the
  analyst's IKNP matrix, the correction server's OT answers and garbling, the analyst's
  evaluation), and once end to end over MQTT: a Mosquitto started by the bench
  (cloud/deploy/broker.py, the services' accounts and ACLs), the correction server's
  ``CorrectionServer`` loop in a child process (its store replaced by the window's d_diff
  table) and the analyst's ``_secure_round`` on its own paho client in this process, every
  message at most 64 KiB.
  Its cost does not depend on epsilon, only on n; it runs on the epsilon 0.1 window and its
  R is checked against the plaintext predicate.

The baseline, ``numpy.sort`` of 100,000 random floats, is timed in the same process so
the ratios carry over between machines. The table also gives the size of the JSON
messages of one round of each mode (``cloud/correction/messages.py``), tokens included.
The paper reports 30-40 ms in R 3.3.1 for its correction logic. A second table times the
correction server's noise per record (cloud/correction/honest.py), which every answer is
computed from.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from dpsense.cloud.correction import chunks
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.mpc import secure
from dpsense.cloud.correction.bands import band_candidates, lower_edges, make_bands
from dpsense.cloud.correction.rules import reduce_rows, run_protocol
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.sim.experiments.noise import discrete_laplace
from dpsense.cloud.sim.experiments.paper1 import Paper1Config, _dbscan, reference

N = 100_000
#: The correction server's noise key in the secure-mode rows (cloud/correction/honest.py).
BENCH_KEY = bytes(32)
SEPARATION = 400.0


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and 90th percentile of ``repeats`` timed calls, in ms (after one warm-up)."""
    fn()
    t = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return 1e3 * float(np.median(t)), 1e3 * float(np.percentile(t, 90))


def window(cfg: Paper1Config, eps: float, seed: int = 1) -> dict[str, object]:
    """One perturbed window and the parameters every party holds, in quanta."""
    hist = reference(cfg, SEPARATION, seed)
    data = paper1_synthetic(N, SEPARATION, "scale", seed=seed)
    x_q = np.rint(data.x / cfg.quantum).astype(np.int64)
    scale_q = hist.rs_q / eps
    x_p = x_q + discrete_laplace(np.random.default_rng(seed), scale_q, x_q.shape)
    d_diff = (np.rint(np.linalg.norm(x_p - hist.centre_q, axis=1))
              - np.rint(np.linalg.norm(x_q - hist.centre_q, axis=1)))
    return {
        "d_diff": d_diff, "dist": np.linalg.norm(x_p - hist.centre_q, axis=1),
        "dist_mean": np.linalg.norm(x_p - x_p.mean(axis=0), axis=1),
        "presumed": np.flatnonzero(_dbscan(cfg, x_p * cfg.quantum, hist.min_samples)),
        "recon": cfg.correction(hist.w_o_q),
        "nw": cfg.never_worse(hist.w_o_q, float(scale_q.max()), x_q.shape[1], hist.normal_radius_q),
        "width": hist.band_width_q, "rho": hist.normal_radius_q,
    }


def message_bytes(w: dict[str, object], tokens: str) -> tuple[int, int]:
    """Bytes of one round's messages: mode paper (4 messages), mode bands (2)."""
    d, dist, presumed = w["d_diff"], w["dist"], w["presumed"]
    res = run_protocol(d, dist, presumed, w["nw"])
    rows = reduce_rows(dist, presumed, res.split.d_tp, w["nw"].w_o)
    paper = [msg.encode("presumed", 1, tokens=tokens, presumed=presumed),
             msg.encode("split", 1, d_tp=res.split.d_tp, w_o=w["nw"].w_o),
             msg.encode("rows", 1, i_l2=rows.i_l2, i_l3=rows.i_l3),
             msg.encode("result", 1, fp=res.fp, fn=np.setdiff1d(res.r, presumed))]
    bands = make_bands(dist, w["width"])
    r = band_candidates(d, lower_edges(N, bands), w["rho"])
    band_msgs = [msg.encode("bands", 1, tokens=tokens, width=bands.width, edges=[float(e) for e in bands.edges],
                            bands=bands.members),
                 msg.encode("result", 1, r=r, unknown=np.empty(0, dtype=np.intp), missing=0)]
    return sum(len(m) for m in paper), sum(len(m) for m in band_msgs)


def secure_in_process(d: np.ndarray, dist: np.ndarray, rho: float) -> tuple[dict[str, float], int, np.ndarray]:
    """Mode secure, both parties in this process: seconds per step, bytes that cross, R."""
    steps: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], bytes]) -> bytes:
        t0 = time.perf_counter()
        out = fn()
        steps[name] = steps.get(name, 0.0) + time.perf_counter() - t0
        return out

    a = secure.Evaluator(dist)
    cs = secure.Garbler(d, np.arange(d.size), d.size, rho)
    opening = timed("base OTs", a.open)
    replies = timed("base OTs", lambda: cs.base_reply(opening))
    u = timed("A: IKNP matrix", lambda: a.extend(replies))
    garbled = timed("CS: OT answers + garbling", lambda: cs.garble(u))
    r = np.empty(0, dtype=np.intp)

    def finish() -> bytes:
        nonlocal r
        r = a.finish(garbled)
        return b""

    timed("A: evaluation", finish)
    return steps, len(opening) + len(replies) + len(u) + len(garbled), r


class _Table:
    """The correction server's store, reduced to the window's (token, d_diff) pairs."""

    def __init__(self, table: dict[bytes, int]) -> None:
        self.table = table

    def lookup(self, tokens: list[bytes]) -> dict[bytes, int]:
        return {t: self.table[t] for t in tokens if t in self.table}

    def close(self) -> None:
        pass


def _serve(host: str, port: int, password: str, table: dict[bytes, int], rho: float, ready: Any,
           stop: Any) -> None:
    """The correction server's loop, in its own process as in a deployment."""
    import threading

    from dpsense.cloud.correction.rules import CorrectionParams
    from dpsense.cloud.correction.server import CorrectionServer
    from dpsense.cloud.transport.session import Connection

    from dpsense.cloud.correction.honest import RoundPolicy
    server = CorrectionServer(Connection(host, port, "correction", password, "correction"),
                              CorrectionParams(w_o=0.0, normal_radius=rho), lambda: _Table(table),
                              log=lambda s: None, mode="secure", noise_key=BENCH_KEY, epsilon=Fraction(1),
                              policy=RoundPolicy(min_window=2, min_presumed=1))

    def announce() -> None:
        server.session.up.wait(30)
        time.sleep(0.5)                       # its subscription is sent on connect
        ready.set()

    threading.Thread(target=announce, daemon=True).start()
    server.run(stop)


def secure_over_mqtt(d: np.ndarray, dist: np.ndarray, rho: float, presumed: np.ndarray,
                     rounds: int) -> tuple[list[tuple[float, float, float, float]], int, int, np.ndarray,
                                           np.ndarray]:
    """Mode secure end to end over a Mosquitto started here, the correction server in a child
    process: seconds per round (total; until secure-base arrived; until secure-garbled
    arrived; the analyst's evaluation), bytes and MQTT messages of one round (both directions,
    chunks counted, as the analyst sends and receives them), R, and R expected from the server's
    noisy d_diff (its input to the comparison, cloud/correction/honest.py)."""
    import multiprocessing
    import tempfile
    from pathlib import Path

    from dpsense.cloud.analyst.service import Analyst, AnalystParams
    from dpsense.cloud.deploy.broker import Broker, free_port
    from dpsense.cloud.transport.session import Connection

    rng = np.random.default_rng(7)
    tokens = [rng.bytes(msg.TOKEN_SIZE) for _ in range(d.size)]
    table = dict(zip(tokens, (int(x) for x in d)))
    from dpsense.cloud.correction.honest import RecordNoise
    from dpsense.cloud.correction.rules import CorrectionParams
    noise = RecordNoise(BENCH_KEY, rho, Fraction(1))
    want = secure.candidates(noise.noisy(tokens, d), dist, rho + noise.margin(CorrectionParams(w_o=0.0).alpha))
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-secure-"))
    broker = Broker(tmp, port=free_port())
    pw_a, pw_c = broker.add_account("analyst"), broker.add_account("correction")
    sizes: list[int] = []
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    with broker.running():
        child = ctx.Process(target=_serve, args=(broker.host, broker.port, pw_c, table, rho, ready, stop),
                            daemon=True)
        child.start()
        analyst = Analyst(Connection(broker.host, broker.port, "analyst", pw_a, "analyst"), lambda: None,
                          AnalystParams(eps_q=1.0, min_samples=1, mode="secure", round_timeout=900.0,
                                        centre_q=(0.0, 0.0)), log=lambda s: None)
        publish, on_message = analyst._client.publish, analyst._on_message

        def counting(topic: str, payload: bytes, qos: int = 0) -> Any:
            sizes.append(len(payload))
            return publish(topic, payload, qos=qos)

        def counting_in(client: Any, userdata: Any, m: Any) -> None:
            sizes.append(len(m.payload))
            on_message(client, userdata, m)

        analyst._client.publish = counting  # type: ignore[method-assign]
        analyst._client.on_message = counting_in
        arrived: dict[str, float] = {}
        await_step = analyst._await

        def timed_await(rid: int, step: str) -> dict[str, Any]:
            body = await_step(rid, step)
            arrived[step] = time.perf_counter()
            return body

        analyst._await = timed_await  # type: ignore[method-assign]
        analyst.session.start(analyst._client)
        if not ready.wait(60):
            raise RuntimeError("the correction server did not come up")
        time.sleep(0.5)
        took = []
        r = np.empty(0, dtype=np.intp)
        try:
            for k in range(rounds):
                sizes.clear()
                t0 = time.perf_counter()
                r, _, _, _ = analyst._secure_round(k + 1, 0, True, tokens, presumed, dist, d.size)
                t1 = time.perf_counter()
                took.append((t1 - t0, arrived["secure-base"] - t0, arrived["secure-garbled"] - arrived["secure-base"],
                             t1 - arrived["secure-garbled"]))
        finally:
            stop.set()
            child.join(20)
            if child.is_alive():
                child.terminate()
            analyst._client.disconnect()
            analyst._client.loop_stop()
    if max(sizes) > chunks.CHUNK_SIZE:
        raise AssertionError("a round message part of %d bytes exceeds the %d-byte chunk"
                             % (max(sizes), chunks.CHUNK_SIZE))
    return took, sum(sizes), len(sizes), r, want


def secure_rows(w: dict[str, object], n: int, sort_ms: float, rounds: int) -> None:
    d, dist, rho, presumed = w["d_diff"][:n], w["dist"][:n], w["rho"], w["presumed"]
    presumed = presumed[presumed < n]
    want = secure.candidates(d, dist, rho)
    steps, nbytes, r = secure_in_process(d, dist, rho)
    assert np.array_equal(r, want), "mode secure disagrees with its plaintext predicate"
    total = sum(steps.values())
    print("\nMode secure on %d rows (epsilon 0.1 window; |R| = %d, equal to the plaintext predicate)\n"
          % (n, r.size))
    print("| step (in-process, one run) | s | ÷ numpy.sort |")
    print("|---|---:|---:|")
    for name, sec in steps.items():
        print("| %s | %.2f | %.0f |" % (name, sec, 1e3 * sec / sort_ms))
    print("| total in-process | %.2f | %.0f |" % (total, 1e3 * total / sort_ms))
    print("\nbytes between the parties: %.1f MB (%d per row)" % (nbytes / 1e6, nbytes // n))
    took, mqtt_bytes, messages, r_mqtt, want_noisy = secure_over_mqtt(d, dist, rho, presumed, rounds)
    assert np.array_equal(r_mqtt, want_noisy), "R over MQTT differs from the predicate on the server's noisy d_diff"
    print("\n| mode secure end to end over MQTT (Mosquitto, loopback) | s | ÷ numpy.sort | open -> secure-base s "
          "| -> secure-garbled s | A: evaluation s | MB | MQTT messages |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, (sec, base, garbled, finish) in enumerate(took):
        print("| round %d | %.2f | %.0f | %.2f | %.2f | %.2f | %.1f | %d |" % (
            k + 1, sec, 1e3 * sec / sort_ms, base, garbled, finish, mqtt_bytes / 1e6, messages))


def main(argv: list[str] | None = None) -> int:
    global N
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 repetitions instead of 100")
    ap.add_argument("--repeats", type=int, help="timed calls per cell (default 100, --quick 20)")
    ap.add_argument("--secure-only", action="store_true", help="only the mode secure rows")
    ap.add_argument("--secure-n", type=int, default=N, help="rows for mode secure (default %d, at most --size)" % N)
    ap.add_argument("--secure-rounds", type=int, default=1, help="rounds over MQTT (default 1)")
    ap.add_argument("--size", type=int, default=N,
                    help="records per window (default %d; a smaller one for a smoke run)" % N)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0],
                    help="the windows' epsilon (default 0.1 0.5 1); mode secure runs on the first")
    args = ap.parse_args(argv)
    N = args.size
    repeats = args.repeats or (20 if args.quick else 100)
    cfg = Paper1Config(n=N)

    rng = np.random.default_rng(0)
    floats = rng.random(N)
    sort_ms, sort_p90 = median_ms(lambda: np.sort(floats), repeats)
    if args.secure_only:
        print("numpy.sort of %d floats: median %.3f ms (p90 %.3f ms)" % (N, sort_ms, sort_p90))
        secure_rows(window(cfg, args.epsilons[0]), min(args.secure_n, N), sort_ms, args.secure_rounds)
        return 0
    tokens = msg.tokens_field([rng.bytes(msg.TOKEN_SIZE) for _ in range(N)])

    print("Correction modes on %d records, separation %g (median of %d calls; numpy %s, %s, Python %s)\n"
          % (N, SEPARATION, repeats, np.__version__, platform.machine(), platform.python_version()))
    print("numpy.sort of %d floats: median %.3f ms (p90 %.3f ms)\n" % (N, sort_ms, sort_p90))
    print("| ε | abs(O') | paper, 2017 ms | paper, never-worse ms | bands: A ms | bands: CS ms | bands ms (p90) "
          "| ÷ numpy.sort: 2017 / never-worse / bands | messages KB: paper / bands |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for eps in args.epsilons:
        w = window(cfg, eps)
        d, dist, dist_mean, presumed = w["d_diff"], w["dist"], w["dist_mean"], w["presumed"]
        recon, _ = median_ms(lambda: run_protocol(d, dist_mean, presumed, w["recon"]), repeats)
        nw, _ = median_ms(lambda: run_protocol(d, dist, presumed, w["nw"]), repeats)
        bands = make_bands(dist, w["width"])
        a_ms, _ = median_ms(lambda: make_bands(dist, w["width"]), repeats)
        cs_ms, _ = median_ms(lambda: band_candidates(d, lower_edges(N, bands), w["rho"]), repeats)
        both, both_p90 = median_ms(lambda: band_candidates(d, lower_edges(N, make_bands(dist, w["width"])),
                                                           w["rho"]), repeats)
        kb_paper, kb_bands = message_bytes(w, tokens)
        print("| %g | %d | %.2f | %.2f | %.2f | %.2f | %.2f (%.2f) | %.1f / %.1f / %.1f | %.0f / %.0f |"
              % (eps, presumed.size, recon, nw, a_ms, cs_ms, both, both_p90, recon / sort_ms, nw / sort_ms,
                 both / sort_ms, kb_paper / 1024, kb_bands / 1024))
        if eps == args.epsilons[0]:
            w01 = w
    secure_rows(w01, min(args.secure_n, N), sort_ms, args.secure_rounds)
    noise_table(w, [rng.bytes(msg.TOKEN_SIZE) for _ in range(N)], sort_ms, repeats)
    return 0


def noise_table(w: dict[str, object], toks: list[bytes], sort_ms: float, repeats: int) -> None:
    """The correction server's per-record noise (cloud/correction/honest.py) on one window: the
    first pass draws every record's noise (HMAC-SHA256 stream + exact sampler), later rounds
    over the same records (retries) find it cached."""
    from fractions import Fraction

    from dpsense.cloud.correction.honest import RecordNoise
    noise = RecordNoise(bytes(32), float(w["rho"]), Fraction(1))
    d = np.asarray(w["d_diff"], dtype=float)
    t0 = time.perf_counter()
    noise.noisy(toks, d)
    first = 1e3 * (time.perf_counter() - t0)
    cached, _ = median_ms(lambda: noise.noisy(toks, d), repeats)
    print("\nNoise per record at the correction server, %d records, epsilon_A 1 (scale %g quanta):\n" % (N, noise.scale))
    print("| pass | ms | ÷ numpy.sort |")
    print("|---|---:|---:|")
    print("| first (every record's noise drawn; one call) | %.0f | %.0f |" % (first, first / sort_ms))
    print("| again (cached; median) | %.1f | %.1f |" % (cached, cached / sort_ms))


if __name__ == "__main__":
    sys.exit(main())
