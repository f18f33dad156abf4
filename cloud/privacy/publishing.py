"""Differentially private data publishing by component analysis (Jiang et al. 2013).

DP-PCA and the LAP/EXP baselines here; DP-LDA synthetic data in ``dpsense.cloud.privacy.lda``.

    schema = Schema(bounds=((17, 90), (1, 16)), levels=(2,))     # 2 numeric columns, one 2-level categorical
    rel = dp_pca_publish(x, schema=schema, epsilon=1.0, k=2)      # rows one-to-one with x
    lap = laplace_publish(x, schema=schema, epsilon=1.0)          # baseline LAP (Jiang et al. 2013, LAP/EXP baselines)
    exp = exponential_publish(x, schema=schema, epsilon=1.0)      # baseline EXP (Jiang et al. 2013, LAP/EXP baselines)

Data layout: the ``p1`` numeric columns first (any units, clipped to the public
``bounds`` and mapped to ``[0, 1]``), then one one-hot group per categorical variable
(``levels`` gives the group sizes; each group is snapped to a one-hot pattern by its
argmax before use, so every encoded record has exactly one 1 per group). The neighbour
relation is **replace one record** (n fixed and public), as in the paper (the papers' neighbour relations: docs/curator.md).

Sensitivities of one encoded record ``x`` in this layout, used throughout (``p2`` =
number of categorical variables, ``p = p1 + sum(levels)``):

* first moment ``sum x``: L1 change ``p1 + 2 p2`` (a numeric entry moves by at most 1,
  a changed category flips two dummies);
* second moment, upper triangle of ``sum x x^T`` incl. the diagonal: L1 change at most
  ``p1(p1+1)/2 + 2 p1 p2 + p2(p2+1)``, the sum of the bounds of its blocks, each of
  which holds for any values in [0, 1]: numeric-by-numeric entries move by at most 1
  each; for a numeric column ``a`` and a categorical variable, the entries
  ``(a, level)`` hold ``x_a`` at one level and ``y_a`` at another, L1 change at most 2;
  a categorical's own block (diagonal = its dummies) at most 2; two different
  categoricals at most 2. **The paper's** ``[(p1+p2)(p1+p2+1) + p2(p2+1)]/2`` (Jiang et al. 2013, categorical variables)
  is the change when every numeric value flips 0<->1 and every category changes, but
  that is not the worst case once ``p2 >= 2``: keeping some numerics at 1 in both
  records makes each of their ``(a, level)`` blocks move by 2. Over the corners of the
  domain the maximum is ``max_s [s d + d(d+1)/2 + (2s+d) p2 + p2(p2+1)]``, ``d = p1 - s``
  (brute-force checked in the tests); for Adult (p1 = 5, six categoricals) that is
  102 against the paper's 87, and we use the block bound 117, which needs no argument
  about interior points.
* squared L2 distance between two records: at most ``p1 + 2 p2``.

Without categoricals these are ``p``, ``p(p+1)/2`` and ``p``, the paper's values.

Randomness: ``rng=None`` or any object with ``getrandbits`` releases through the exact
samplers of :mod:`dpsense.cloud.privacy.mechanisms` (one draw per released number; a few
microseconds each). ``rng`` may instead be a ``numpy.random.Generator``: the noise is
then float Laplace / inverse-CDF sampling from numpy, which is fast and has the right
distribution but is **for experiments only** (floating-point samplers leak through
their low bits, Mironov 2012). The paper-3 experiment uses it.

Accounting: with ``accountant`` and ``dataset`` given, every function validates its
parameters, calls ``accountant.check`` **before** the data source is called, then
reads, clips, computes, randomises, and calls ``accountant.spend`` before returning.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Union

import numpy as np

from .accountant import BudgetAccountant
from .discrete import default_granularity
from .mechanisms import Exponential, Laplace
from .validation import Rng, check_bounds, check_epsilon, check_rng, is_integer

__all__ = [
    "PCARelease",
    "Schema",
    "dp_pca_publish",
    "exponential_publish",
    "laplace_publish",
    "lda_sensitivity",
    "pca_sensitivity",
]

Noise = Union[Rng, np.random.Generator, None]
Data = Union[np.ndarray, Callable[[], Any]]


# -- schema ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schema:
    """Public description of the columns: numeric bounds, then one-hot group sizes.

    Parameters
    ----------
    bounds : tuple of (float, float)
        ``(lower, upper)`` of every numeric column, in data units, ``lower < upper``.
        Required: bounds computed from the data are not covered by the proof.
    levels : tuple of int
        Number of levels (dummy columns, each ``>= 2``) of every categorical variable, in
        column order after the numeric columns.
    """

    bounds: tuple[tuple[float, float], ...]
    levels: tuple[int, ...] = ()
    _lo: np.ndarray = field(init=False, repr=False, compare=False)
    _span: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bounds, (tuple, list)) or not isinstance(self.levels, (tuple, list)):
            raise TypeError("bounds and levels must be tuples")
        cleaned = []
        for b in self.bounds:
            lo, hi = check_bounds(tuple(b) if isinstance(b, list) else b)
            if lo == hi:
                raise ValueError("bounds must satisfy lower < upper, got %r" % (b,))
            cleaned.append((float(lo), float(hi)))
        for lv in self.levels:
            if not is_integer(lv):
                raise TypeError("levels must be integers, got %r" % (lv,))
            if lv < 2:
                raise ValueError("a categorical variable needs >= 2 levels, got %d" % lv)
        if not cleaned and not self.levels:
            raise ValueError("the schema has no columns")
        object.__setattr__(self, "bounds", tuple(cleaned))
        object.__setattr__(self, "levels", tuple(int(v) for v in self.levels))
        object.__setattr__(self, "_lo", np.array([b[0] for b in cleaned], dtype=float))
        object.__setattr__(self, "_span", np.array([b[1] - b[0] for b in cleaned], dtype=float))

    @property
    def p1(self) -> int:
        """Numeric columns."""
        return len(self.bounds)

    @property
    def p2(self) -> int:
        """Categorical variables."""
        return len(self.levels)

    @property
    def p(self) -> int:
        """Encoded columns: numeric plus dummies."""
        return self.p1 + sum(self.levels)

    def groups(self) -> list[slice]:
        """Column slice of every categorical variable."""
        out, j = [], self.p1
        for lv in self.levels:
            out.append(slice(j, j + lv))
            j += lv
        return out

    # sensitivities of one replaced record (see the module docstring)
    def first_moment_l1(self) -> int:
        return self.p1 + 2 * self.p2

    def second_moment_l1(self) -> int:
        p1, p2 = self.p1, self.p2
        return p1 * (p1 + 1) // 2 + 2 * p1 * p2 + p2 * (p2 + 1)

    def record_l2_squared(self) -> int:
        return self.p1 + 2 * self.p2

    def encode(self, x: object) -> np.ndarray:
        """Clip numerics to their bounds and map to [0, 1]; snap each group to one-hot (argmax)."""
        a = np.array(x, dtype=float)
        if a.ndim != 2 or a.shape[1] != self.p:
            raise ValueError("data must be an (n, %d) matrix for this schema, got shape %s" % (self.p, a.shape))
        a = np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)
        z = np.empty_like(a)
        z[:, :self.p1] = np.clip((a[:, :self.p1] - self._lo) / self._span, 0.0, 1.0)
        for g in self.groups():
            z[:, g] = _one_hot(a[:, g])
        return z

    def decode(self, z: np.ndarray, recover: bool = True) -> np.ndarray:
        """Back to data units; with ``recover`` clip numerics to [0, 1] and argmax every group."""
        z = np.asarray(z, dtype=float)
        out = z.copy()
        num = np.clip(z[:, :self.p1], 0.0, 1.0) if recover else z[:, :self.p1]
        out[:, :self.p1] = self._lo + num * self._span
        if recover:
            for g in self.groups():
                out[:, g] = _one_hot(z[:, g])
        return out

    def recover(self, z: np.ndarray) -> np.ndarray:
        """Post-processing in [0, 1] units: clip numerics, argmax every group (Jiang et al. 2013, categorical variables)."""
        out = np.array(z, dtype=float)
        out[:, :self.p1] = np.clip(out[:, :self.p1], 0.0, 1.0)
        for g in self.groups():
            out[:, g] = _one_hot(out[:, g])
        return out


def _one_hot(block: np.ndarray) -> np.ndarray:
    out = np.zeros_like(block)
    if block.shape[0]:
        out[np.arange(block.shape[0]), np.argmax(block, axis=1)] = 1.0
    return out


def pca_sensitivity(schema: Schema, k: int) -> tuple[int, float]:
    """``(s, t)``: L1 sensitivity of (S1, upper S2) and of one projected row (Jiang et al. 2013, DP-PCA Lemmas 1-2 and categorical variables).

    ``s = first_moment_l1 + second_moment_l1``; ``t = sqrt(k * record_l2_squared)``
    (Lemma 2: ``||U_k^T d||_1 <= sqrt(k) ||d||_2``).
    """
    return schema.first_moment_l1() + schema.second_moment_l1(), math.sqrt(k * schema.record_l2_squared())


def lda_sensitivity(schema: Schema) -> int:
    """L1 sensitivity of (S1 class 1, S1 class 2, upper S2): ``2 first_moment_l1 + second_moment_l1``.

    A record that changes class leaves one class sum and enters the other, so both
    first moments move (Jiang et al. 2013, DP-LDA ``s_L``, with the corrected categorical terms).
    """
    return 2 * schema.first_moment_l1() + schema.second_moment_l1()


# -- noise back-ends -----------------------------------------------------------------------


def _sqrt_up(x: int) -> Fraction:
    """A rational >= sqrt(x), for an integer x >= 0."""
    r = Fraction(math.sqrt(x))
    while r * r < Fraction(x):
        r += Fraction(1, 2**40)
    return r


def _laplace(values: np.ndarray, l1: Fraction, epsilon: Fraction, noise: Noise) -> np.ndarray:
    """``values + Lap(l1/epsilon)`` on every entry, where ``l1`` bounds the L1 change of ``values``.

    Exact path: one :class:`Laplace` per call with grid ``g`` and sensitivity
    ``l1 + m g`` (``m`` entries), which covers the extra grid step rounding can add
    per entry, so the whole vector is ``epsilon``-DP.
    """
    shape = np.shape(values)
    if isinstance(noise, np.random.Generator):
        return np.asarray(values, dtype=float) + noise.laplace(0.0, float(l1 / epsilon), size=shape)
    flat = np.asarray(values, dtype=object).ravel()
    g = default_granularity(l1)
    mech = Laplace(epsilon=epsilon, sensitivity=l1 + len(flat) * g, granularity=g, rng=noise)
    return np.array([mech.randomise(v) for v in flat], dtype=float).reshape(shape)


# -- accounting ---------------------------------------------------------------------------


def _check_account(accountant: BudgetAccountant | None, dataset: str | None) -> None:
    if accountant is not None and not isinstance(accountant, BudgetAccountant):
        raise TypeError("accountant must be a BudgetAccountant")
    if (accountant is None) != (dataset is None):
        raise ValueError("give both accountant and dataset, or neither")


def _load(data: Data) -> Any:
    return data() if callable(data) else data


def _check_noise(noise: Noise) -> Noise:
    return noise if isinstance(noise, np.random.Generator) else check_rng(noise)


def _exact_sums(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum z`` and ``sum z z^T`` computed exactly on a 2^-20 grid (object arrays of Fraction).

    Records are first rounded to multiples of ``2^-20`` (per-record post-processing;
    they stay in [0, 1]), so the sums are exact integers in units of 2^-20 and 2^-40
    and no float rounding depends on the other records.
    """
    q = np.rint(z * 2**20).astype(np.int64)
    s1 = q.sum(axis=0)
    if len(q) < 2**22:         # 2^40 per product: the int64 sum cannot overflow
        s2 = q.T @ q
    else:
        qo = q.astype(object)
        s2 = qo.T.dot(qo)      # exact Python-int matrix product
    s1f = np.array([Fraction(int(v), 2**20) for v in s1], dtype=object)
    s2f = np.array([[Fraction(int(v), 2**40) for v in row] for row in s2], dtype=object)
    return s1f, s2f


def _sums(z: np.ndarray, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    if exact:
        return _exact_sums(z)
    return z.sum(axis=0), z.T @ z


def _noisy_upper(s2: np.ndarray, noisy_upper: np.ndarray) -> np.ndarray:
    p = s2.shape[0]
    out = np.zeros((p, p))
    iu = np.triu_indices(p)
    out[iu] = noisy_upper
    return out + np.triu(out, 1).T


# -- DP-PCA -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PCARelease:
    """What :func:`dp_pca_publish` releases (all of it is differentially private)."""

    values: np.ndarray          #: published records in data units, rows one-to-one with the input
    normalised: np.ndarray      #: the same in [0, 1] units, after post-processing if ``recover``
    mean: np.ndarray            #: noisy mean (normalised units)
    components: np.ndarray      #: p x k eigenvectors of the noisy covariance
    eigenvalues: np.ndarray     #: all p eigenvalues of the noisy covariance, descending (may be < 0)
    epsilon: Fraction

    @property
    def negative_eigenvalues(self) -> int:
        return int(np.sum(self.eigenvalues < 0))


def _check_k(k: object, p: int) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError("k must be an int, got %s" % type(k).__name__)
    if not 1 <= int(k) <= p:
        raise ValueError("k must be in 1..%d, got %s" % (p, k))
    return int(k)


def dp_pca_publish(data: Data, *, schema: Schema, epsilon: object, k: int, noise: Noise = None,
                   recover: bool = True, accountant: BudgetAccountant | None = None,
                   dataset: str | None = None, query: str = "dp-pca publish") -> PCARelease:
    """Publish every record through a noisy top-k principal subspace (Jiang et al. 2013, Alg. 1).

    Parameters
    ----------
    data : ndarray (n, p) or callable returning one
        Records in the layout of ``schema``; a callable is called once, after the
        budget check.
    schema : Schema
        Public bounds and categorical layout.
    epsilon : float
        Total privacy parameter, ``> 0``; half goes to the moments, half to the
        projected records.
    k : int
        Number of components, ``1 <= k <= p``.
    noise : Rng, numpy Generator or None
        Randomness (see the module docstring); numpy generators are for experiments.
    recover : bool
        Post-process: clip numerics to the bounds, argmax each categorical group.
    accountant, dataset : optional
        Charge ``epsilon`` to this budget (checked before the data is read).

    Returns
    -------
    PCARelease

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one neighbours (n public).
    Step 1 adds ``Lap(2s/epsilon)`` to ``S1 = sum x`` and the upper triangle of
    ``S2 = sum x x^T`` (``s`` = their joint L1 sensitivity, :func:`pca_sensitivity`):
    ``epsilon/2``-DP. ``mu = S1/n``, ``D = S2/n - mu mu^T`` and its top-k eigenvectors
    ``U_k`` are post-processing. Negative eigenvalues (noise) are kept and ordered
    algebraically; the eigenvectors remain orthonormal, which is all Lemma 2 needs.
    Step 2 releases ``Y = (X - 1 mu^T) U_k + Lap(2t/epsilon)`` per entry with
    ``t = sqrt(k (p1 + 2 p2))`` bounding the L1 change of one row of ``Y`` given ``U_k``
    and ``mu``; a record affects only its own row, so this is ``epsilon/2``-DP.
    Sequential composition gives ``epsilon``. ``X = Y U_k^T + 1 mu^T`` is post-processing.
    ``Y`` is computed in float64; its rounding (relative ~1e-15) is far inside the slack
    of ``m g`` (``g ~ t 2^-30``) that the exact path adds to the sensitivity.
    Cost ``O(n p^2)``.

    References
    ----------
    X. Jiang, Z. Ji, S. Wang, N. Mohammed, S. Cheng, L. Ohno-Machado, "Differential-Private
    Data Publishing Through Component Analysis", Trans. Data Privacy 6(1), 2013, Sect. 4.
    """
    if not isinstance(schema, Schema):
        raise TypeError("schema must be a Schema")
    eps = check_epsilon(epsilon)
    k = _check_k(k, schema.p)
    noise = _check_noise(noise)
    _check_account(accountant, dataset)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps)
    z = schema.encode(_load(data))
    n = z.shape[0]
    if n < 1:
        raise ValueError("no records")
    exact = not isinstance(noise, np.random.Generator)
    s, _ = pca_sensitivity(schema, k)
    half = eps / 2
    s1, s2 = _sums(z, exact)
    iu = np.triu_indices(schema.p)
    released = _laplace(np.concatenate([s1, s2[iu]]), Fraction(s), half, noise)
    mu = released[:schema.p] / n
    m2 = _noisy_upper(s2, released[schema.p:]) / n
    cov = m2 - np.outer(mu, mu)
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    order = np.argsort(w)[::-1]
    w, v = w[order], v[:, order]
    u = v[:, :k]
    y = (z - mu) @ u
    y_noisy = _laplace(y, _sqrt_up(k * schema.record_l2_squared()), half, noise)
    xbar = y_noisy @ u.T + mu
    normalised = schema.recover(xbar) if recover else xbar
    values = schema.decode(xbar, recover=recover)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return PCARelease(values=values, normalised=normalised, mean=mu, components=u, eigenvalues=w, epsilon=eps)


# -- baselines ----------------------------------------------------------------------------


def laplace_publish(data: Data, *, schema: Schema, epsilon: object, noise: Noise = None,
                    recover: bool = True, accountant: BudgetAccountant | None = None,
                    dataset: str | None = None, query: str = "lap publish") -> tuple[np.ndarray, np.ndarray]:
    """Baseline LAP: every encoded entry plus ``Lap((p1 + 2 p2)/epsilon)`` (Jiang et al. 2013, LAP/EXP baselines).

    Returns ``(values in data units, normalised [0, 1] values)``, post-processed if ``recover``.

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one. One record's encoded row changes by at
    most ``p1 + 2 p2`` in L1 (``p`` without categoricals, the paper's ``Lap(p/epsilon)``);
    rows are disjoint, so the release of all rows costs the same (parallel composition).
    Cost ``O(n p)``.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, TCC 2006; Jiang et al. 2013, Sect. 5.
    """
    if not isinstance(schema, Schema):
        raise TypeError("schema must be a Schema")
    eps = check_epsilon(epsilon)
    noise = _check_noise(noise)
    _check_account(accountant, dataset)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps)
    z = schema.encode(_load(data))
    l1 = Fraction(schema.first_moment_l1())
    if isinstance(noise, np.random.Generator):
        out = _laplace(z, l1, eps, noise)
    else:
        out = np.vstack([_laplace(row, l1, eps, noise) for row in z]) if len(z) else z.copy()
    normalised = schema.recover(out) if recover else out
    values = schema.decode(out, recover=recover)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return values, normalised


def exponential_publish(data: Data, *, schema: Schema, epsilon: object, grid: int = 101,
                        noise: Noise = None, recover: bool = True,
                        accountant: BudgetAccountant | None = None, dataset: str | None = None,
                        query: str = "exp publish", chunk: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Baseline EXP (stand-in for the EXP baseline of Jiang et al. 2013): each entry re-drawn from a grid by the exponential mechanism.

    For every record and encoded column, a value ``v`` of ``G = {0, 1/(grid-1), ..., 1}``
    is drawn with probability ``~ exp(eps_a * (-|v - x|) / 2)``, ``eps_a = epsilon / p``.
    Returns ``(values in data units, normalised values)``; with ``recover`` each
    categorical group is argmaxed.

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one. The utility ``-|v - x|`` of one entry
    changes by at most 1 (entries in [0, 1]); ``p`` draws per record at ``epsilon/p``
    compose to ``epsilon``, and records are disjoint. The paper's exact utility (Blum,
    Ligett, Roth) is not given in Jiang et al. 2013; this is the recommended stand-in.
    Cost ``O(n p grid)``.

    References
    ----------
    F. McSherry, K. Talwar, FOCS 2007; Jiang et al. 2013, Sect. 5.
    """
    if not isinstance(schema, Schema):
        raise TypeError("schema must be a Schema")
    eps = check_epsilon(epsilon)
    if not is_integer(grid):
        raise TypeError("grid must be an int")
    if grid < 2:
        raise ValueError("grid must be >= 2, got %d" % grid)
    noise = _check_noise(noise)
    _check_account(accountant, dataset)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps)
    z = schema.encode(_load(data))
    n, p = z.shape
    eps_a = eps / p
    out = np.empty_like(z)
    if isinstance(noise, np.random.Generator):
        for a in range(0, n, chunk):
            out[a:a + chunk] = _exp_grid_sample(z[a:a + chunk], float(eps_a) / 2, int(grid), noise)
    else:
        mech = Exponential(epsilon=eps_a, sensitivity=1, rng=noise)
        gf = [Fraction(i, int(grid) - 1) for i in range(int(grid))]
        for i in range(n):
            for j in range(p):
                x = Fraction(float(z[i, j]))
                out[i, j] = float(gf[mech.select([-abs(v - x) for v in gf])])
    normalised = schema.recover(out) if recover else out
    values = schema.decode(out, recover=recover)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return values, normalised


def _exp_grid_sample(x: np.ndarray, c: float, grid: int, noise: np.random.Generator) -> np.ndarray:
    """Draw ``v`` in ``{0, h, ..., 1}`` (``h = 1/(grid-1)``) with ``P(v) ~ exp(-c |v - x|)``, entrywise.

    Closed form: the grid points left of ``x`` form a truncated geometric sequence in the
    distance, as do those right of it; pick a side by its mass, then invert the
    truncated geometric CDF (``expm1``/``log1p`` keep it accurate when ``c h`` is tiny).
    """
    h = 1.0 / (grid - 1)
    ch = c * h
    i0 = np.clip(np.floor(x / h), 0, grid - 2).astype(np.int64)     # x in [g_i0, g_i0+1]
    dl = x - i0 * h                                                  # distance to the nearest left point
    dr = (i0 + 1) * h - x
    ml = i0 + 1                                                      # points on the left (incl. g_i0)
    mr = grid - 1 - i0
    frac_l = -np.expm1(-ml * ch)                                     # 1 - r^m, r = exp(-c h)
    frac_r = -np.expm1(-mr * ch)
    # masses up to the common factor 1/(1 - r)
    left = np.exp(-c * dl) * frac_l
    right = np.exp(-c * dr) * frac_r
    go_left = noise.random(x.shape) * (left + right) < left
    frac = np.where(go_left, frac_l, frac_r)
    m = np.where(go_left, ml, mr)
    u = noise.random(x.shape)
    if ch > 0:
        j = np.floor(np.log1p(-u * frac) / -ch).astype(np.int64)
    else:
        j = np.floor(u * m).astype(np.int64)
    j = np.clip(j, 0, m - 1)
    idx = np.where(go_left, i0 - j, i0 + 1 + j)
    return idx * h


# -- DP-LDA -------------------------------------------------------------------------------
