"""DBSCAN's core and noise points in 1 to 3 dimensions on a uniform grid: no tree, no neighbour lists.

    core, noise = grid_core_noise(x, eps=12.0, min_samples=60)   # boolean masks, shape (n,)

The grid has cells of side just under ``eps / sqrt(d)``, so any two points of one cell are
within ``eps`` of each other, and every point within ``eps`` of a point lies in one of the
``5**d`` cells at most two steps away along each axis. Each nonempty cell keeps the
bounding box of its points, and boxes bound distances from below and above. First whole
cells: a cell whose neighbour boxes surely hold ``min_samples`` points within ``eps`` of
all its points is all core (a cell holding ``min_samples`` points already is: that is
where most points of a dense window are), and one whose neighbour boxes cannot is not
core. Then the points of the remaining cells, neighbour cell by neighbour cell, nearest
first, until ``min_samples`` is reached: a cell entirely beyond ``eps`` of the point is
skipped, one entirely within counts whole, and only a cell the ball's boundary cuts is
compared point by point. Non-core points look for a core point the same way, against the
boxes of each cell's core points. Memory is O(n) plus blocks of ``PAIR_BLOCK`` pairs.

"Within eps" is decided by exactly the arithmetic of scikit-learn's KD-tree:
``sum over axes of (p - q)**2 <= eps**2`` in float64, the axes summed in order. The box
bounds are computed with the same operations on the box corners, and rounding is monotone,
so a bound never decides a pair differently from the pair's own test: ties at exactly
``eps`` are found, whatever the rounding.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

#: Dimensions the grid serves (``5**d`` neighbour cells per cell).
MAX_DIM = 3
#: Point pairs compared per block; bounds the temporaries (about 40 bytes a pair).
PAIR_BLOCK = 1 << 18
#: Widest grid per axis, in cells: keys must fit int64 and ``(x - min) / side`` must
#: floor to within far less than one cell of the exact value (2**-52 relative error).
_MAX_CELLS = {1: 1 << 40, 2: 1 << 30, 3: 1 << 20}
#: The side is shrunk by this factor so that a cell's diagonal stays below ``eps`` after
#: rounding; the box test below checks it anyway.
_SHRINK = 1.0 - 1e-9
#: Neighbour cells reach two steps along each axis: ``eps / side`` is ``sqrt(d) < 2``.
_REACH = 2


def grid_fits(x: np.ndarray, eps: float) -> bool:
    """Whether ``x`` (n, d) suits the grid: ``1 <= d <= 3`` and not too many cells per axis."""
    d = x.shape[1]
    if not 1 <= d <= MAX_DIM:
        return False
    span = float(np.max(x.max(axis=0) - x.min(axis=0)))
    side = eps / math.sqrt(d) * _SHRINK
    return math.isfinite(span) and span / side < _MAX_CELLS[d]


class _Grid:
    """Points sorted by cell, with each cell's extent and bounding box."""

    def __init__(self, x: np.ndarray, eps: float) -> None:
        n, d = x.shape
        side = eps / math.sqrt(d) * _SHRINK
        low = x.min(axis=0)
        idx = np.floor((x - low) / side).astype(np.int64) + _REACH
        widths = idx.max(axis=0) + _REACH + 1
        # Row-major keys; the padding of _REACH cells on each side keeps key + offset from
        # wrapping into another row.
        strides = np.ones(d, dtype=np.int64)
        for a in range(d - 2, -1, -1):
            strides[a] = strides[a + 1] * widths[a + 1]
        key = idx @ strides
        self.order = np.argsort(key, kind="stable")
        key = key[self.order]
        self.cols = [np.ascontiguousarray(x[self.order, a]) for a in range(d)]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        self.keys = key[first]
        self.start = first
        self.count = np.diff(np.r_[first, n])
        self.cell_of = np.repeat(np.arange(first.size), self.count)
        self.lo = [np.minimum.reduceat(c, first) for c in self.cols]
        self.hi = [np.maximum.reduceat(c, first) for c in self.cols]
        steps = itertools.product(range(-_REACH, _REACH + 1), repeat=d)
        # Nearest cells first, so that most points are decided after a few of them.
        self.offsets = sorted(steps, key=lambda s: (sum(max(abs(v) - 1, 0) ** 2 for v in s),
                                                    sum(v * v for v in s)))
        self.strides = strides

    def neighbour(self, cells: np.ndarray, offset: tuple[int, ...]) -> np.ndarray:
        """For each cell index, the index of the cell ``offset`` away, or -1 when empty."""
        want = self.keys[cells] + int(np.dot(offset, self.strides))
        pos = np.searchsorted(self.keys, want)
        pos[pos == self.keys.size] = 0
        return np.where(self.keys[pos] == want, pos, -1)

    def box_bounds(self, pts: np.ndarray, cells: np.ndarray, lo: list[np.ndarray],
                   hi: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of the squared distance from each point to the box of its cell.

        Both come from the same subtraction, squaring and summation order as the pair
        test, applied to the nearest and farthest box coordinates, so by monotone
        rounding ``low <= pair test value <= high`` for every point of the box.
        """
        near = np.zeros(pts.size)
        far = np.zeros(pts.size)
        for c, l, h in zip(self.cols, lo, hi, strict=True):
            p, bl, bh = c[pts], l[cells], h[cells]
            below, above = bl - p, p - bh
            gap = np.maximum(np.maximum(below, above), 0.0)
            near += gap * gap
            reach = np.maximum(p - bl, bh - p)
            far += reach * reach
        return near, far

    def box_box_bounds(self, cells: np.ndarray, others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of the squared distance between points of two cells' boxes."""
        near = np.zeros(cells.size)
        far = np.zeros(cells.size)
        for l, h in zip(self.lo, self.hi, strict=True):
            al, ah, bl, bh = l[cells], h[cells], l[others], h[others]
            gap = np.maximum(np.maximum(bl - ah, al - bh), 0.0)
            near += gap * gap
            reach = np.maximum(bh - al, ah - bl)
            far += reach * reach
        return near, far

    def pairs_within(self, pts: np.ndarray, cells: np.ndarray, eps2: float,
                     only: np.ndarray | None = None) -> np.ndarray:
        """For each point, how many points of the paired cell (of ``only`` there) are within eps."""
        out = np.zeros(pts.size, dtype=np.int64)
        sizes = self.count[cells]
        ends = np.cumsum(sizes)
        lo = 0
        while lo < pts.size:
            # Points whose pairs fit one block; at least one point per block.
            base = ends[lo - 1] if lo else 0
            hi = max(lo + 1, int(np.searchsorted(ends, base + PAIR_BLOCK, side="right")))
            sz = sizes[lo:hi]
            seg = np.r_[0, np.cumsum(sz)[:-1]]
            owner = np.repeat(np.arange(hi - lo), sz)
            other = np.arange(int(sz.sum())) - np.repeat(seg - self.start[cells[lo:hi]], sz)
            mine = pts[lo:hi][owner]
            d2 = np.zeros(owner.size)
            for c in self.cols:
                diff = c[mine] - c[other]
                d2 += diff * diff
            hit = d2 <= eps2
            if only is not None:
                hit &= only[other]
            out[lo:hi] = np.add.reduceat(hit.astype(np.int64), seg)
            lo = hi
        return out


def grid_core_noise(x: np.ndarray, eps: float, min_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Core and noise masks of DBSCAN(eps, min_samples) on ``x`` (n, d), ``d <= 3``.

    A point is core when at least ``min_samples`` points (itself included) are within
    ``eps``; noise when it is not core and no core point is within ``eps``.
    """
    eps2 = eps * eps
    g = _Grid(x, eps)
    n = x.shape[0]

    # Whole cells first: box-to-box bounds settle a cell whose neighbours surely hold
    # min_samples points (all core), or surely do not (none core).
    cells = np.arange(g.keys.size)
    lower = np.zeros(cells.size, dtype=np.int64)
    upper = np.zeros(cells.size, dtype=np.int64)
    for offset in g.offsets:
        others = g.neighbour(cells, offset)
        has = others >= 0
        mine, others = cells[has], others[has]
        near, far = g.box_box_bounds(mine, others)
        upper[mine] += np.where(near <= eps2, g.count[others], 0)
        lower[mine] += np.where(far <= eps2, g.count[others], 0)
    core = (lower >= min_samples)[g.cell_of]
    open_cell = (lower < min_samples) & (upper >= min_samples)

    # Core points of the other cells: count neighbours cell by cell until min_samples.
    seen = np.zeros(n, dtype=np.int64)
    pending = np.flatnonzero(open_cell[g.cell_of])
    for offset in g.offsets:
        if pending.size == 0:
            break
        cells = g.neighbour(g.cell_of[pending], offset)
        has = cells >= 0
        pts, cells = pending[has], cells[has]
        near, far = g.box_bounds(pts, cells, g.lo, g.hi)
        whole = far <= eps2
        seen[pts[whole]] += g.count[cells[whole]]
        cut = ~whole & (near <= eps2)
        seen[pts[cut]] += g.pairs_within(pts[cut], cells[cut], eps2)
        done = seen[pending] >= min_samples
        core[pending[done]] = True
        pending = pending[~done]

    # Border points: a non-core point with a core point within eps is not noise.
    noise = ~core
    if core.any():
        inf = np.inf
        core_lo = [np.minimum.reduceat(np.where(core, c, inf), g.start) for c in g.cols]
        core_hi = [np.maximum.reduceat(np.where(core, c, -inf), g.start) for c in g.cols]
        has_core = np.add.reduceat(core.astype(np.int64), g.start) > 0
        pending = np.flatnonzero(noise)
        for offset in g.offsets:
            if pending.size == 0:
                break
            cells = g.neighbour(g.cell_of[pending], offset)
            ok = cells >= 0
            ok[ok] = has_core[cells[ok]]
            pts, cells = pending[ok], cells[ok]
            near, far = g.box_bounds(pts, cells, core_lo, core_hi)
            border = pts[far <= eps2]
            cut = (far > eps2) & (near <= eps2)
            hits = g.pairs_within(pts[cut], cells[cut], eps2, only=core)
            border = np.concatenate([border, pts[cut][hits > 0]])
            noise[border] = False
            pending = pending[noise[pending]]

    out_core = np.empty(n, dtype=bool)
    out_noise = np.empty(n, dtype=bool)
    out_core[g.order] = core
    out_noise[g.order] = noise
    return out_core, out_noise
