"""DP-LDA synthetic data (Jiang et al. 2013, DP-LDA): noisy class statistics, then
greedy synthesis of labelled records.

    syn = dp_lda_synthesise(x, y, schema=schema, epsilon=1.0)

The data layout, the sensitivities and the shared noise helpers are those of
``dpsense.cloud.privacy.publishing`` (its module docstring derives them); ``lda_sensitivity``
there is the L1 sensitivity of the class sums used here. Replace-one neighbours.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsense.cloud.privacy.publishing import (
    Data,
    Noise,
    Schema,
    _check_account,
    _check_noise,
    _laplace,
    _noisy_upper,
    _sums,
    lda_sensitivity,
)

from .accountant import BudgetAccountant
from .validation import check_epsilon, is_integer, is_real


@dataclass(frozen=True)
class LDARelease:
    """What :func:`dp_lda_synthesise` releases (all of it differentially private)."""

    values: np.ndarray          #: synthetic records in data units
    labels: np.ndarray          #: their classes, 0 or 1
    normalised: np.ndarray      #: synthetic records in [0, 1] units
    class_means: np.ndarray     #: 2 x p noisy class means (normalised units)
    second_moment: np.ndarray   #: p x p noisy second moment (normalised units)
    class_counts: np.ndarray    #: noisy class sizes (float; sum = n)
    epsilon: Fraction


def dp_lda_synthesise(data: Data, labels: object = None, *, schema: Schema, epsilon: object,
                      n_synthetic: int | None = None, count_share: float = 0.05, noise: Noise = None,
                      accountant: BudgetAccountant | None = None, dataset: str | None = None,
                      query: str = "dp-lda synthesise") -> LDARelease:
    """Synthetic labelled records matching noisy LDA statistics (Jiang et al. 2013, DP-LDA and its greedy sampling).

    Parameters
    ----------
    data : ndarray (n, p), or callable returning ``(x, labels)``
        Records in the layout of ``schema``. If ``data`` is callable it is called once,
        after the budget check, and must return ``(x, labels)``.
    labels : array of 0/1, optional
        Class of every record (when ``data`` is an array).
    schema : Schema
    epsilon : float
        Total privacy parameter, ``> 0``.
    n_synthetic : int, optional
        Records to synthesise (default ``n``). The targets scale with the counts so far,
        so a smaller sample follows the same statistics.
    count_share : float
        Share of ``epsilon`` spent on the class sizes (default 0.05), ``0 < share < 1``.
    noise, accountant, dataset
        As for :func:`dp_pca_publish`.

    Returns
    -------
    LDARelease

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one (n public). The sums
    ``(S1 class 0, S1 class 1, upper S2)`` have L1 sensitivity ``s_L``
    (:func:`lda_sensitivity`: a record that changes class moves both class sums), and
    get ``Lap(s_L / eps_s)`` per entry with ``eps_s = (1 - count_share) epsilon``. The
    size of class 1 gets ``Lap(1 / eps_c)``, ``eps_c = count_share epsilon`` (it changes
    by at most 1; class 0 is ``n`` minus it). The paper divides by the **exact** class
    sizes and generates exactly ``n1`` and ``n2`` records, which releases them (not
    covered by the paper's privacy proof); here the noisy sizes are used. Means, the second moment and the
    greedy synthesis are post-processing. The categorical sensitivity is the corrected
    one (see the module docstring), larger than the paper's.
    Synthesis cost ``O(m p^2)`` for ``m`` records (vectorised per feature).

    References
    ----------
    Jiang et al. 2013, Sect. 4.2 (Alg. 2 and the greedy sampling).
    """
    if not isinstance(schema, Schema):
        raise TypeError("schema must be a Schema")
    eps = check_epsilon(epsilon)
    if not is_real(count_share):
        raise TypeError("count_share must be a real number")
    if not 0 < float(count_share) < 1:
        raise ValueError("count_share must be in (0, 1), got %r" % (count_share,))
    if n_synthetic is not None:
        if not is_integer(n_synthetic):
            raise TypeError("n_synthetic must be an int")
        if n_synthetic < 1:
            raise ValueError("n_synthetic must be >= 1")
    if not callable(data) and labels is None:
        raise ValueError("labels are required when data is an array")
    noise = _check_noise(noise)
    _check_account(accountant, dataset)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps)
    x, y = data() if callable(data) else (data, labels)
    z = schema.encode(x)
    y = np.asarray(y)
    if y.shape != (z.shape[0],) or not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be a 0/1 vector with one entry per record")
    y = y.astype(int)
    n = z.shape[0]
    if n < 2:
        raise ValueError("need at least 2 records")
    exact = not isinstance(noise, np.random.Generator)
    share = Fraction(repr(float(count_share)))
    eps_c = eps * share
    eps_s = eps - eps_c
    p = schema.p
    iu = np.triu_indices(p)
    s1a, s2 = _sums(z[y == 0], exact)
    s1b, s2b = _sums(z[y == 1], exact)
    s2 = s2 + s2b
    vec = np.concatenate([s1a, s1b, s2[iu]])
    rel = _laplace(vec, Fraction(lda_sensitivity(schema)), eps_s, noise)
    n1 = float(_laplace(np.array([int((y == 1).sum())], dtype=object), Fraction(1), eps_c, noise)[0])
    n1 = min(max(n1, 1.0), n - 1.0)
    counts = np.array([n - n1, n1])
    means = np.vstack([rel[:p] / counts[0], rel[p:2 * p] / counts[1]])
    m2 = _noisy_upper(s2, rel[2 * p:]) / n
    m = n if n_synthetic is None else int(n_synthetic)
    zs, ys = greedy_synthesise(means, m2, counts, m, schema)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return LDARelease(values=schema.decode(zs), labels=ys, normalised=zs, class_means=means,
                      second_moment=m2, class_counts=counts, epsilon=eps)


def greedy_synthesise(means: np.ndarray, m2: np.ndarray, counts: np.ndarray, m: int,
                      schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Greedy L1 fitting of ``m`` records to (noisy) class means and second moment (Jiang et al. 2013, greedy sampling for DP-LDA).

    Pure post-processing of its inputs. The class of each new record is the one
    furthest behind its share, ``argmin m_c / n_c`` (ties to class 0). Residuals
    ``R1_c = m_c mu_c - sum_{S_c} z`` and ``R2 = m M - sum_S z z^T`` grow by one
    target when the record is opened and shrink by the record when it is closed.
    Features are decided one at a time (categorical groups first, as one-hot
    patterns; then numerics); undecided features hold the class's noisy mean. For a
    numeric feature the candidates are 0, 1 and the breakpoints of the linearised
    terms (``b/a``) plus ``sqrt`` of the diagonal residual, and each candidate is
    scored by the **exact** terms of the objective that involve it:
    ``|R1_c[j] - v| + |R2[j,j] - v^2| + sum_{l != j} |R2[j,l] - v w_l|``.
    """
    p = schema.p
    means = np.asarray(means, dtype=float)
    r1 = np.zeros((2, p))
    r2 = np.zeros((p, p))
    made = np.zeros(2)
    out = np.empty((m, p))
    lab = np.empty(m, dtype=int)
    groups = schema.groups()
    place = np.clip(means, 0.0, 1.0)
    for it in range(m):
        c = int(np.argmin(made / counts))
        r1[c] += means[c]
        r2 += m2
        z = place[c].copy()
        for g in groups:
            idx = np.arange(g.start, g.stop)
            cands = np.eye(len(idx))
            z[idx] = cands[int(np.argmin(_group_cost(idx, cands, z, r1[c], r2)))]
        for j in range(schema.p1):
            w = z.copy()
            row = r2[j]
            others = np.ones(p, dtype=bool)
            others[j] = False
            a = w[others]
            b = row[others]
            br = b[np.abs(a) > 1e-12] / a[np.abs(a) > 1e-12]
            mj = place[c, j] if place[c, j] > 1e-12 else 1.0
            cands = np.concatenate([[0.0, 1.0, r1[c, j], r2[j, j] / mj, math.sqrt(max(r2[j, j], 0.0))], br])
            cands = np.unique(np.clip(cands, 0.0, 1.0))
            cost = (np.abs(r1[c, j] - cands) + np.abs(r2[j, j] - cands ** 2)
                    + np.abs(b[None, :] - cands[:, None] * a[None, :]).sum(axis=1))
            z[j] = cands[int(np.argmin(cost))]
        r1[c] -= z
        r2 -= np.outer(z, z)
        made[c] += 1
        out[it] = z
        lab[it] = c
    return out, lab


def _group_cost(idx: np.ndarray, cands: np.ndarray, z: np.ndarray, r1: np.ndarray,
                r2: np.ndarray) -> np.ndarray:
    """Exact objective terms involving the columns ``idx`` for each candidate pattern (rows of ``cands``)."""
    p = len(z)
    rest = np.ones(p, dtype=bool)
    rest[idx] = False
    cost = np.abs(r1[idx][None, :] - cands).sum(axis=1)
    sub = r2[np.ix_(idx, idx)]
    iu = np.triu_indices(len(idx))
    prod = cands[:, :, None] * cands[:, None, :]
    cost += np.abs(sub[iu][None, :] - prod[:, iu[0], iu[1]]).sum(axis=1)
    cross = r2[np.ix_(idx, np.flatnonzero(rest))]
    cost += np.abs(cross[None, :, :] - cands[:, :, None] * z[rest][None, None, :]).sum(axis=(1, 2))
    return cost
