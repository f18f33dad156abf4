"""The noise the device adds has the exact discrete Laplace pmf at the configured scale."""
from __future__ import annotations

import random

from dpsense.cloud.privacy.audit import chi_square_discrete_laplace

from .helpers import column, scaled

ALPHA = 1e-3


def test_released_noise_matches_the_discrete_laplace_pmf(rig):
    """Chi-square goodness of fit of (released - scaled raw) over 2 x 1100 = 2200 samples.

    Both columns have scale b = delta_q / epsilon = 25 / (1/2) = 50 quanta; the test
    fails when the p-value is below ALPHA = 1e-3, so a correct sampler fails it once
    in a thousand runs (the stated false-failure rate).
    """
    n = 1100
    gen = random.Random(7)
    cols = [column(25, raw_min=-5000, raw_max=5000),
            column(25, num=3300, den=65535, offset=0, raw_min=0, raw_max=65535)]
    rows = [[gen.randrange(-4000, 4000), gen.randrange(0, 65536)] for _ in range(n)]
    cfg = rig.config(9, columns=cols, epsilon="0.5", centre=[0, 1650], window_records=10 ** 6,
                     window_cap="100000", period_ms=0, ring_records=4096, ring_bytes=1 << 20)
    rig.start(cfg, stimulus=rows)
    rig.expect("boot ok")
    rig.cloud.wait_readings(n, 60)
    got = {r.seq: r.values for r in rig.cloud.readings()}
    assert sorted(got) == list(range(n))
    noise = [got[i][j] - scaled(cols[j], rows[i][j]) for i in range(n) for j in range(2)]
    res = chi_square_discrete_laplace(noise, 50, 1)
    assert res.pvalue > ALPHA, "chi-square %.1f on %d dof, p = %.2g" % (res.statistic, res.dof, res.pvalue)
    m = rig.expect(r"firmware cost (\d+) us per reading", 30)
    print("noise: %d samples, chi-square %.1f on %d dof, p = %.3f; firmware %s us per reading"
          % (len(noise), res.statistic, res.dof, res.pvalue, m.group(1)))
