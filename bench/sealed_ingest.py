"""The correction server's cost of opening sealed records, against plain ones, per record.

    .venv/bin/python bench/sealed_ingest.py [--records N] [--devices D]

Prints one table: microseconds per record for ``classify_correction`` on plain 16-byte
records (the baseline, cloud/ingest/classify.py) and for ``SealedIngest.classify`` on
sealed records (tag check, decryption, replay guard in memory), plus the guard's commit to
SQLite per 500-record batch, all in the same run. Records are sealed beforehand; the
devices publish in turn, as a fleet does.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from dpsense.cloud.correction.sealed import KeyStore, ReplayGuard, SealedIngest, sealer_for
from dpsense.cloud.ingest.classify import classify_correction
from dpsense.cloud.transport.topics import CORRECTIONS
from dpsense.protocol import wire


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--devices", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ks = KeyStore.for_data_dir(d)
        sealers = [sealer_for(ks.add_device(i + 1)) for i in range(a.devices)]
        sealed, plain = [], []
        for n in range(a.records):
            dev = n % a.devices
            tok = n.to_bytes(8, "little")
            sealed.append(sealers[dev].seal(dev + 1, 1, n // a.devices, n // a.devices, tok, n - 5000))
            plain.append(wire.encode_correction(dev + 1, 1, n // a.devices, tok, n - 5000))
        t0 = time.perf_counter()
        for p in plain:
            classify_correction(CORRECTIONS, p, 0.0)
        t_plain = time.perf_counter() - t0
        guard = ReplayGuard(Path(d) / "nonces.db")
        ing = SealedIngest(ks, guard)
        t0 = time.perf_counter()
        t_commit = 0.0
        for i, p in enumerate(sealed):
            ing.classify(CORRECTIONS, p, 0.0)
            if i % 500 == 499:
                c0 = time.perf_counter()
                guard.commit()
                t_commit += time.perf_counter() - c0
        t_sealed = time.perf_counter() - t0 - t_commit
        guard.close()
    us = 1e6 / a.records
    print("| correction records (%d, %d devices) | us per record |" % (a.records, a.devices))
    print("|---|---:|")
    print("| plain, classify_correction (baseline) | %.1f |" % (t_plain * us))
    print("| sealed, SealedIngest.classify | %.1f |" % (t_sealed * us))
    print("| sealed, replay guard's commit to SQLite (per record, in 500-record batches) | %.1f |"
          % (t_commit * us))


if __name__ == "__main__":
    main()
