"""The correction protocol of Böhler et al. 2017 (Sect. 6) as pure functions, one per party.

    split = split_presumed(d_diff, presumed, params)                     # line 3, CS
    rows = reduce_rows(dist_perturbed, presumed, split.d_tp, params.w_o)  # line 4, A
    fn = false_negatives(d_diff, presumed, rows, split, params)          # line 5, CS
    result = run_protocol(d_diff, dist_perturbed, presumed, params)      # all of it, in-process

Inputs are numpy arrays over the rows of one window: ``d_diff[i]`` is the distance
difference of row ``i`` (held by the correction server CS), ``dist_perturbed[i]`` the
distance of the perturbed row from the centre (held by the analyst A), and
``presumed`` the row positions of the presumed outliers O' (A's detector on the
perturbed data). Index sets are sorted int arrays of row positions. All distances are
in one unit (quanta or scaled units), which ``w_o``, ``noise_scale`` and
``normal_radius`` share.

Each function needs only what its party holds, so a service can run line 3 and 5 on
the correction server and line 4 on the analyst and send between them exactly the
messages of the paper: O' (A -> CS), d_TP and w_O (CS -> A), I_L2 and I_L3 (A -> CS),
FP and FN (CS -> A).

Two rule sets run on these messages:

* the reconstruction of the paper (``split`` gap, trimmed_gap or otsu, the bimodality
  guard, ``layers="paper"`` with the FN_L3 bound R1-R3), for reproduction;
* the never-worse rule (``split="noise"``, ``layers="provable"``), stated here.

The never-worse rule. Let b be the largest per-column noise scale (public: relaxed
sensitivity / epsilon), m the number of columns, rho the normal radius (public: half
the diagonal of the relaxed-sensitivity box, ``|RS| / 2``), c the provisioned centre,
and let A measure ``dist_perturbed`` from c. Then

* line 3 removes a presumed outlier only if ``d_diff > tau``, ``tau = kappa b + m + 1``,
  where kappa solves ``exp(-kappa) sum_{j<m} kappa^j / j! = alpha``;
* line 5 adds a row outside O' only if its raw distance from c provably exceeds rho:
  FN_L1 = {i not in O' : d_diff < -rho - 1}, FN_L2 = {i in I_L2 : d_diff < d_TP - rho - 1},
  FN_L3 = {i in I_L3 : d_diff < d_TP + w_O - rho - 1};
* and the analyst skips the round (R = O') when ``|O'|`` is already within ``margin``
  of the expected outlier share ``p n`` (:func:`needs_round`).

Guarantee, for every window and any noise: the rows of R not in O' all have a raw
distance from c above rho (no normal reading is ever added), and the rows of O' not in
R all have ``d_diff > tau``. Under the noise model, every row has ``P(d_diff > tau) <= alpha``
whatever its raw value (``d_diff <= |Y|_2 + 1 <= |Y|_1 + 1``, and each discrete Laplace
``|Y_j|`` is stochastically below an exponential of scale b plus 1, so ``|Y|_1`` is
below a Gamma(m, b) plus m). Hence the expected number of true outliers the correction
removes is at most ``alpha |O|``: recall never falls more than alpha below the
uncorrected O' in expectation, and every row the correction adds is abnormal. The
deterministic half is checked on random windows by tests/cloud/test_never_worse.py, the
bound on ``P(d_diff > tau)`` by tests/statistical/test_noise_split.py.

Rounding: ``d_diff`` is the difference of two distances each rounded to a quantum, so it
is within 1 of the exact difference; the ``+ 1`` terms above absorb that.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

SPLITS = ("gap", "trimmed_gap", "otsu", "noise")
BOUNDS = ("R1", "R2", "R3")
LAYERS = ("paper", "provable")
_EMPTY = np.empty(0, dtype=np.intp)


@dataclass(frozen=True)
class CorrectionParams:
    """Configuration of the correction server (Böhler et al. 2017, Sect. 6 and w_O).

    Parameters
    ----------
    w_o : float
        Width of the outlier layer, from historical data (Böhler et al. 2017), ``>= 0``.
    split : {"otsu", "trimmed_gap", "gap", "noise"}
        Line 3 threshold rule. ``"gap"`` is the paper's largest gap between sorted
        distance differences; ``"trimmed_gap"`` searches only the central ``central``
        share of them; ``"otsu"`` maximises the between-class variance; ``"noise"`` cuts
        at ``tau = kappa b + m + 1`` from the noise model (:func:`noise_threshold`) and
        ignores the guard.
    bound : {"R1", "R2", "R3"}
        Upper bound of FN_L3: R1 ``min(d_FP, d_TP + w_O)``, R2 ``d_FP``, R3 none.
    guard : bool
        Accept a split only if it is clearly bimodal (see ``kappa_gap``,
        ``kappa_sep``); otherwise FP is empty.
    kappa_gap : float
        The gap at the threshold must exceed ``kappa_gap`` times the median spacing of
        the sorted values (0 disables this test).
    kappa_sep : float
        The class means must differ by more than ``kappa_sep`` pooled standard
        deviations, ``sqrt((s_1^2 + s_2^2) / 2)`` (Ashman's D; 0 disables this test).
    min_class : float
        Smallest share of O' either class may hold for the split to be accepted, in
        ``[0, 0.5)``; a split that isolates a handful of extreme rows is not bimodality.
    central : float
        Share of the sorted values searched by ``"trimmed_gap"``, in ``(0, 1]``.
    layers : {"paper", "provable"}
        Line 5 rules: the paper's three layers with ``bound``, or the layers that add
        only rows whose raw distance provably exceeds ``normal_radius``.
    noise_scale : float
        b, the largest per-column noise scale (relaxed sensitivity / epsilon), ``> 0``
        for ``split="noise"``.
    columns : int
        m, the number of perturbed columns (``>= 1``).
    alpha : float
        ``split="noise"``: bound on the probability that any one row, outlier or not,
        has ``d_diff > tau``, in ``(0, 1)``.
    normal_radius : float
        rho, the distance from the provisioned centre within which a reading is normal;
        ``> 0`` for ``layers="provable"``.
    board_noise_scale : float
        The boards' noise on d_diff towards the correction server, ``cs_delta / epsilon_cs``
        quanta (shared_protocol/mechanism.py), 0 for boards without ``epsilon_cs``; the
        thresholds move by the margin of this noise and the server's own (margin.py).
    """

    w_o: float
    split: str = "otsu"
    bound: str = "R1"
    guard: bool = True
    kappa_gap: float = 0.0
    kappa_sep: float = 3.0
    min_class: float = 0.05
    central: float = 0.98
    layers: str = "paper"
    noise_scale: float = 0.0
    columns: int = 2
    alpha: float = 0.005
    normal_radius: float = 0.0
    board_noise_scale: float = 0.0

    def __post_init__(self) -> None:
        _real("w_o", self.w_o)
        _real("kappa_gap", self.kappa_gap)
        _real("kappa_sep", self.kappa_sep)
        if self.split not in SPLITS:
            raise ValueError("split must be one of %s, got %r" % (SPLITS, self.split))
        if self.bound not in BOUNDS:
            raise ValueError("bound must be one of %s, got %r" % (BOUNDS, self.bound))
        if not isinstance(self.guard, bool):
            raise TypeError("guard must be a bool, got %r" % (self.guard,))
        if not 0 <= _real("min_class", self.min_class) < 0.5:
            raise ValueError("min_class must be in [0, 0.5), got %r" % (self.min_class,))
        if not 0 < _real("central", self.central) <= 1:
            raise ValueError("central must be in (0, 1], got %r" % (self.central,))
        if self.layers not in LAYERS:
            raise ValueError("layers must be one of %s, got %r" % (LAYERS, self.layers))
        if isinstance(self.columns, bool) or not isinstance(self.columns, int) or self.columns < 1:
            raise ValueError("columns must be an int >= 1, got %r" % (self.columns,))
        if not 0 < _real("alpha", self.alpha) < 1:
            raise ValueError("alpha must be in (0, 1), got %r" % (self.alpha,))
        if self.split == "noise" and not _real("noise_scale", self.noise_scale) > 0:
            raise ValueError("split 'noise' needs noise_scale > 0 (relaxed sensitivity / epsilon)")
        if self.layers == "provable" and not _real("normal_radius", self.normal_radius) > 0:
            raise ValueError("layers 'provable' needs normal_radius > 0")
        _real("noise_scale", self.noise_scale)
        _real("normal_radius", self.normal_radius)
        _real("board_noise_scale", self.board_noise_scale)

    def tau(self) -> float:
        """The noise split's threshold (``split="noise"``)."""
        return noise_threshold(self.noise_scale, self.columns, self.alpha)


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a real number, got %r" % (name, value))
    if not math.isfinite(value) or value < 0:
        raise ValueError("%s must be finite and >= 0, got %r" % (name, value))
    return float(value)


def gamma_tail(m: int, kappa: float) -> float:
    """``P(G > kappa b)`` for G ~ Gamma(m, b): ``exp(-kappa) sum_{j<m} kappa^j / j!``."""
    term, total = 1.0, 1.0
    for j in range(1, m):
        term *= kappa / j
        total += term
    return math.exp(-kappa) * total


def noise_kappa(m: int, alpha: float) -> float:
    """The kappa with ``gamma_tail(m, kappa) = alpha`` (bisection; the tail falls in kappa)."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1), got %r" % (alpha,))
    lo, hi = 0.0, 1.0
    while gamma_tail(m, hi) > alpha:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gamma_tail(m, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def noise_threshold(noise_scale: float, columns: int, alpha: float) -> float:
    """tau with ``P(d_diff > tau) <= alpha`` for every row (module docstring)."""
    return noise_kappa(columns, alpha) * float(noise_scale) + columns + 1.0


def normal_radius(sensitivity: object) -> float:
    """rho = |RS| / 2: the distance from the centre of the relaxed-sensitivity box (one
    width RS_j per column, centred on the provisioned centre) to its corners."""
    rs = np.asarray(sensitivity, dtype=float)
    if rs.ndim != 1 or rs.size == 0 or not np.isfinite(rs).all() or (rs <= 0).any():
        raise ValueError("sensitivity must be a non-empty 1-D array of widths > 0")
    return float(np.linalg.norm(rs)) / 2.0


def needs_round(n_presumed: int, n: int, outlier_share: float, margin: float) -> bool:
    """Analyst, before line 2: is a correction round worth running for this window?

    False when ``|O'|`` is within ``margin`` (relative) of the expected outlier count
    ``outlier_share * n``: the detector already returned about as many rows as there are
    outliers, the correction has nothing to trim, and R = O'. A negative margin never
    skips.
    """
    expected = outlier_share * n
    return abs(n_presumed - expected) > margin * expected


@dataclass(frozen=True, eq=False)
class Split:
    """Line 3: presumed false and true positives and their smallest distance differences.

    ``d_tp`` is +inf when TP is empty, ``d_fp`` is +inf when FP is empty. ``threshold``
    is the split value tau (FP = d_diff > tau), NaN when no split was attempted, and
    ``accepted`` says whether the split (if any) passed the guard.
    """

    fp: np.ndarray
    tp: np.ndarray
    d_tp: float
    d_fp: float
    threshold: float
    accepted: bool


@dataclass(frozen=True, eq=False)
class RowReduction:
    """Line 4: rows outside O' far enough from the perturbed centre for layers L2 and L3."""

    i_l2: np.ndarray
    i_l3: np.ndarray


@dataclass(frozen=True, eq=False)
class FalseNegatives:
    """Line 5: presumed false negatives per layer (L1 and L3 may overlap when d_TP < 0)."""

    l1: np.ndarray
    l2: np.ndarray
    l3: np.ndarray


@dataclass(frozen=True, eq=False)
class CorrectionResult:
    """Every set of one protocol run; ``r`` = TP | FN_L1 | FN_L2 | FN_L3 is the output."""

    presumed: np.ndarray
    split: Split
    rows: RowReduction
    fn: FalseNegatives
    r: np.ndarray

    @property
    def fp(self) -> np.ndarray:
        return self.split.fp

    @property
    def tp(self) -> np.ndarray:
        return self.split.tp


def check_window(d: object, presumed: object, name: str = "d_diff") -> tuple[np.ndarray, np.ndarray]:
    """``d`` as a 1-D float array without NaN, ``presumed`` as sorted distinct row positions."""
    v = np.asarray(d, dtype=float)
    if v.ndim != 1:
        raise ValueError("%s must be 1-D, got shape %s" % (name, v.shape))
    if np.isnan(v).any():
        raise ValueError("%s contains NaN" % name)
    p = np.asarray(presumed)
    if p.size == 0:
        return v, _EMPTY
    if p.ndim != 1 or not np.issubdtype(p.dtype, np.integer):
        raise ValueError("presumed must be a 1-D array of row positions (ints)")
    p = p.astype(np.intp, copy=False)
    if not (p[1:] > p[:-1]).all():      # detectors return sorted positions: sort only if not
        p = np.sort(p)
        if (p[1:] == p[:-1]).any():
            raise ValueError("presumed holds duplicate row positions")
    if p[0] < 0 or p[-1] >= v.size:
        raise ValueError("presumed holds row positions outside [0, %d)" % v.size)
    return v, p


def _outside(n: int, p: np.ndarray) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[p] = False
    return mask


def split_presumed(d_diff: object, presumed: object, params: CorrectionParams) -> Split:
    """Line 3 (CS): split O' into presumed false positives FP and true positives TP.

    False positives are non-outliers that the noise pushed out into the outlier layer, so
    their distance difference is large; the split puts every presumed outlier above the
    threshold into FP. With fewer than two presumed outliers, or when the guard rejects
    the split, FP is empty and TP = O' (the paper never removes a true positive knowingly).
    """
    d, p = check_window(d_diff, presumed)
    return _split(d, p, params)


def _split(d: np.ndarray, p: np.ndarray, params: CorrectionParams) -> Split:
    if params.split == "noise":
        return _noise_split(d, p, params.tau())
    if p.size < 2:
        return _no_split(d, p, math.nan)
    v = np.sort(d[p])
    cut = _choose_cut(v, params)
    if cut < 0:
        return _no_split(d, p, math.nan)
    tau = float(v[cut])
    if params.guard and not _bimodal(v, cut, params):
        return _no_split(d, p, tau)
    fp_mask = d[p] > tau
    fp, tp = p[fp_mask], p[~fp_mask]
    return Split(fp=fp, tp=tp, d_tp=float(v[0]), d_fp=float(v[cut + 1]), threshold=tau, accepted=True)


def noise_split(d_diff: object, presumed: object, tau: float) -> Split:
    """Line 3 (CS) with the noise split at a given threshold ``tau`` (FP = d_diff > tau); the
    correction server uses it on noisy distance differences with a raised tau (honest.py)."""
    d, p = check_window(d_diff, presumed)
    return _noise_split(d, p, float(tau))


def _noise_split(d: np.ndarray, p: np.ndarray, tau: float) -> Split:
    v = d[p]
    fp_mask = v > tau
    if not fp_mask.any():
        return _no_split(d, p, tau)
    fp, tp = p[fp_mask], p[~fp_mask]
    d_tp = float(v[~fp_mask].min()) if tp.size else math.inf
    return Split(fp=fp, tp=tp, d_tp=d_tp, d_fp=float(v[fp_mask].min()), threshold=tau, accepted=True)


def _no_split(d: np.ndarray, p: np.ndarray, tau: float) -> Split:
    d_tp = float(d[p].min()) if p.size else math.inf
    return Split(fp=_EMPTY, tp=p, d_tp=d_tp, d_fp=math.inf, threshold=tau, accepted=False)


def _choose_cut(v: np.ndarray, params: CorrectionParams) -> int:
    """Index ``l`` of the threshold ``v[l]`` in the sorted values (``-1``: no split)."""
    gaps = np.diff(v)
    m = v.size
    if params.split == "otsu":
        # Between-class variance w1 w2 (mu1 - mu2)^2 for every cut, from prefix sums;
        # the values are centred first so the prefix sums do not cancel.
        c = np.cumsum(v - v.mean())[:-1]
        k = np.arange(1, m, dtype=float)
        score = c * c * m / (k * (m - k))
        score[gaps <= 0] = -1.0          # a cut between equal values is no cut
        cut = int(np.argmax(score))
        return cut if score[cut] > 0 else -1
    lo, hi = 0, m - 1                    # cut candidates l in [lo, hi): gap v[l+1] - v[l]
    if params.split == "trimmed_gap":
        t = int(m * (1.0 - params.central) / 2.0)
        lo, hi = t, m - 1 - t
        if hi <= lo:
            return -1
    window = gaps[lo:hi]
    # The last largest gap: on ties the higher threshold, which removes fewer rows.
    cut = lo + (window.size - 1 - int(np.argmax(window[::-1])))
    return cut if gaps[cut] > 0 else -1


def _bimodal(v: np.ndarray, cut: int, params: CorrectionParams) -> bool:
    """The guard on the 2017 reconstruction's largest-gap split: is the split at ``cut`` clearly between two modes?"""
    m = v.size
    low, high = v[:cut + 1], v[cut + 1:]
    if min(low.size, high.size) < params.min_class * m:
        return False
    if params.kappa_gap > 0 and v[cut + 1] - v[cut] <= params.kappa_gap * float(np.median(np.diff(v))):
        return False
    if params.kappa_sep > 0:
        pooled = math.sqrt((float(low.var()) + float(high.var())) / 2.0)
        separation = float(high.mean() - low.mean())
        if separation <= params.kappa_sep * pooled:
            return False
    return True


def reduce_rows(dist_perturbed: object, presumed: object, d_tp: float, w_o: float) -> RowReduction:
    """Line 4 (A): rows outside O' whose perturbed centre distance is at least d_TP (I_L2)
    and at least d_TP + w_O (I_L3).

    When TP is empty (``d_tp`` = +inf) both sets are empty: layers L2 and L3 are skipped.
    """
    dist, p = check_window(dist_perturbed, presumed, "dist_perturbed")
    return _reduce(dist, _outside(dist.size, p), float(d_tp), float(w_o))


def _reduce(dist: np.ndarray, outside: np.ndarray, d_tp: float, w_o: float) -> RowReduction:
    if math.isnan(d_tp) or math.isinf(d_tp):
        return RowReduction(i_l2=_EMPTY, i_l3=_EMPTY)
    l2 = outside & (dist >= d_tp)
    l3 = l2 & (dist >= d_tp + w_o)
    return RowReduction(i_l2=np.flatnonzero(l2), i_l3=np.flatnonzero(l3))


def false_negatives(d_diff: object, presumed: object, rows: RowReduction, split: Split,
                    params: CorrectionParams) -> FalseNegatives:
    """Line 5 (CS): presumed false negatives in three layers.

    * FN_L1: rows outside O' with ``d_diff < 0`` (outliers that moved into the core);
    * FN_L2: rows of I_L2 with ``0 <= d_diff < d_TP``;
    * FN_L3: rows of I_L3 with ``d_TP <= d_diff < U3``, where U3 is
      ``min(d_FP, d_TP + w_O)`` (R1), ``d_FP`` (R2) or +inf (R3).

    When TP is empty (d_TP = +inf) L2 and L3 are empty. When d_TP < 0, L2 is empty and
    L3 may share rows with L1. No row of O' (hence of FP) is ever returned.

    With ``params.layers == "provable"`` the layers are those of the never-worse rule
    (module docstring): the same sets I_L2 and I_L3, each row kept only when its raw
    distance provably exceeds ``normal_radius``.
    """
    d, p = check_window(d_diff, presumed)
    return _false_negatives(d, _outside(d.size, p), rows, split, params)


def _false_negatives(d: np.ndarray, outside: np.ndarray, rows: RowReduction, split: Split,
                     params: CorrectionParams) -> FalseNegatives:
    if params.layers == "provable":
        return _provable_false_negatives(d, outside, rows, split, params)
    l1 = np.flatnonzero(outside & (d < 0))
    d_tp = split.d_tp
    if math.isinf(d_tp):
        return FalseNegatives(l1=l1, l2=_EMPTY, l3=_EMPTY)
    i_l2 = _rows_outside(rows.i_l2, outside)
    i_l3 = _rows_outside(rows.i_l3, outside)
    v2 = d[i_l2]
    l2 = i_l2[(v2 >= 0) & (v2 < d_tp)]
    upper = {"R1": min(split.d_fp, d_tp + params.w_o), "R2": split.d_fp, "R3": math.inf}[params.bound]
    v3 = d[i_l3]
    l3 = i_l3[(v3 >= d_tp) & (v3 < upper)]
    return FalseNegatives(l1=l1, l2=l2, l3=l3)


def _provable_false_negatives(d: np.ndarray, outside: np.ndarray, rows: RowReduction, split: Split,
                              params: CorrectionParams) -> FalseNegatives:
    # A row of I_L has |x' - c| >= t, so its raw distance is at least t - d_diff - 1
    # (L1: t = 0); it is added only when that lower bound exceeds rho.
    slack = params.normal_radius + 1.0
    l1 = np.flatnonzero(outside & (d < -slack))
    d_tp = split.d_tp
    if math.isinf(d_tp):
        return FalseNegatives(l1=l1, l2=_EMPTY, l3=_EMPTY)
    i_l2 = _rows_outside(rows.i_l2, outside)
    i_l3 = _rows_outside(rows.i_l3, outside)
    l2 = i_l2[d[i_l2] < d_tp - slack]
    l3 = i_l3[d[i_l3] < d_tp + params.w_o - slack]
    return FalseNegatives(l1=l1, l2=l2, l3=l3)


def _rows_outside(rows: np.ndarray, outside: np.ndarray) -> np.ndarray:
    # A's sets arrive over the wire: keep only valid rows outside O', whatever A sent.
    r = np.asarray(rows, dtype=np.intp)
    r = r[(r >= 0) & (r < outside.size)]
    return r[outside[r]]


def run_protocol(d_diff: object, dist_perturbed: object, presumed: object,
                 params: CorrectionParams) -> CorrectionResult:
    """Lines 3-6 in one process: R = TP | FN_L1 | FN_L2 | FN_L3 and every intermediate set.

    Parameters
    ----------
    d_diff : array of float, shape (n,)
        Distance differences ``|x'_i - c'| - |x_i - c|`` (correction server's input).
    dist_perturbed : array of float, shape (n,)
        ``|x'_i - c'|``, the perturbed rows' distances from the perturbed centre
        (analyst's input).
    presumed : array of int
        Row positions of the presumed outliers O' found on the perturbed data.
    params : CorrectionParams
        Split rule, guard, FN_L3 bound and w_O.

    Returns
    -------
    CorrectionResult

    Notes
    -----
    O(n) vectorised passes over the window plus a sort of ``d_diff[O']``.

    References
    ----------
    .. [1] D. Böhler, D. Bernau, F. Kerschbaum, "Privacy-preserving outlier detection for
       data streams", DBSec 2017, Sect. 6 (its Fig. 2 is missing from the public text; the rules follow the prose of Sects. 6.1-6.2).
    """
    d, p = check_window(d_diff, presumed)
    dist, _ = check_window(dist_perturbed, _EMPTY, "dist_perturbed")
    if dist.size != d.size:
        raise ValueError("d_diff has %d rows but dist_perturbed %d" % (d.size, dist.size))
    outside = _outside(d.size, p)
    split = _split(d, p, params)
    rows = _reduce(dist, outside, split.d_tp, params.w_o)
    fn = _false_negatives(d, outside, rows, split, params)
    member = np.zeros(d.size, dtype=bool)
    for part in (split.tp, fn.l1, fn.l2, fn.l3):
        member[part] = True
    r = np.flatnonzero(member)
    return CorrectionResult(presumed=p, split=split, rows=rows, fn=fn, r=r)
