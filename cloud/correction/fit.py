"""Does the radial model fit a window? The analyst's check of a correction's result R against O'.

    fit = model_fit(n, presumed, r, outlier_share=0.10)
    if not fit.fits:
        r = presumed                    # the window keeps O'; fit.reason says why

The corrections (mode bands, secure, and paper's layers) assume paper 1's outlier model: normal
readings within rho of one centre, outliers beyond it. Where the data has another shape (one
elongated cluster, two clusters with outliers between them, a ring of normal readings with
outliers inside, two groups with their own centres) R is the radial set {|x - c| > rho}, not the
outliers, and it drops nearly every row of O'. The analyst can see that from what it holds
after the round (O', R, n) and the profile's outlier share p, with no further access to the data.

In a window that fits, the detector on the released data finds about every outlier, so O' holds
the window's about ``p n`` outliers plus false positives that the noise pushed out, and the
correction removes only those false positives and adds few rows outside O' (outliers the
noise pulled in): R holds about ``e = min(|O'|, p n)`` readings. The check:

* **short**: R holds fewer than ``(1 - max_shortfall) e`` readings. In modes bands and secure
  R's rows are provably beyond rho (mode paper adds no other), so in a window that fits they
  are outliers, and an R smaller than the outliers O' found has lost some of them;
* **added**: it adds more than ``max_added |O'|`` rows outside O' (with O' empty: more than
  ``max_added p n``).

Either says the model does not fit: the analyst keeps O' for the window (R is not used), so
the window's recall is that of the uncorrected detector, and the stored outcome says why.
``max_shortfall`` is the recall a window may lose against O' (0.005: half a point, the
never-below-O' margin), so where the correction is used its R holds all but that share of
the outliers O' found, as far as the profile's share tells. The check is conservative where
a window holds fewer outliers than ``p n``: a correction that removes many false positives of
a small O' is then not used, and the window keeps O'. It is blind where a window holds more
outliers than ``p n`` and R loses some but still holds ``p n``: the outlier share is the
profile's, fixed, not measured per window.

Thresholds: ``max_shortfall`` 0.005 and ``max_added`` 0.10, checked on the tuning seeds of
cloud/sim/experiments/families.py (``TUNING_SEEDS``) and reported on others (docs/accuracy.md).
There, on paper 1's data R holds 500-502 readings of a window of 5,000 (e = 500, the check asks
for 497.5) and adds at most 0.4 % of |O'|; two radial groups' R holds 468-486, the other
families' at most 0.2 % of n. ``max_added`` leaves room for outliers the noise pulled into the core
and stops an R that sweeps up normal readings beyond rho.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_SHORTFALL = 0.005
MAX_ADDED = 0.10


@dataclass(frozen=True)
class Fit:
    """The check of one window: ``fits`` and, when not, ``reason`` (one line for people)."""

    fits: bool
    dropped: float          # share of O' not in R (0 when O' is empty)
    added: float            # rows of R outside O', as a share of |O'| (of p n when O' is empty)
    size: int               # |R|
    least: float            # the smallest |R| of a window that fits: (1 - max_shortfall) e
    reason: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"fits": self.fits, "dropped": round(self.dropped, 4), "added": round(self.added, 4),
                "size": self.size, "least": round(self.least, 2), "reason": self.reason}


def _share(name: str, value: float, upper: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and 0 <= v < upper):
        raise ValueError("%s must be in [0, %g), got %r" % (name, upper, value))
    return v


def model_fit(n: int, presumed: object, r: object, outlier_share: float,
              max_shortfall: float = MAX_SHORTFALL, max_added: float = MAX_ADDED) -> Fit:
    """Check a window's correction result ``r`` (row positions) against O' (``presumed``).

    ``n`` is the window's number of scored readings and ``outlier_share`` the profile's share
    of outliers p, in (0, 1); the thresholds are shares in [0, 1).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError("n must be an int >= 1, got %r" % (n,))
    p = float(outlier_share)
    if not 0 < p < 1:
        raise ValueError("outlier_share must be in (0, 1), got %r" % (outlier_share,))
    _share("max_shortfall", max_shortfall, 1.0)
    _share("max_added", max_added, 1.0)
    o = np.unique(np.asarray(presumed, dtype=np.int64))
    rr = np.unique(np.asarray(r, dtype=np.int64))
    size_o = int(o.size)
    kept = int(np.intersect1d(o, rr, assume_unique=True).size)
    new = int(rr.size) - kept
    expected = p * int(n)
    if size_o == 0:
        added = new / expected
        ok = added <= max_added
        reason = None if ok else ("correction not applied: the model does not fit: it added %d readings to an "
                                  "empty O' where the profile predicts <= %.0f" % (new, max_added * expected))
        return Fit(ok, 0.0, added, int(rr.size), 0.0, reason)
    dropped = 1.0 - kept / size_o
    least = (1.0 - max_shortfall) * min(float(size_o), expected)
    added = new / size_o
    if rr.size < least - 1e-9:
        return Fit(False, dropped, added, int(rr.size), least,
                   "correction not applied: the model does not fit: R holds %d readings where the profile "
                   "predicts >= %.0f (O' %d, outlier share %g of n %d); it dropped %.0f%% of O'"
                   % (rr.size, least, size_o, p, n, 100 * dropped))
    if added > max_added + 1e-12:
        return Fit(False, dropped, added, int(rr.size), least,
                   "correction not applied: the model does not fit: it added %d readings, %.0f%% of |O'| = %d, "
                   "where the profile predicts <= %.0f%%" % (new, 100 * added, size_o, 100 * max_added))
    return Fit(True, dropped, added, int(rr.size), least)
