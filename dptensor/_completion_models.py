"""CP and Tucker models on observed entries only: evaluation, ALS, (DP) gradient descent, offsets.

Plain functions on arrays, usable without scikit-learn. Every per-row sum runs over the observed
entries in one of two layouts, chosen from public quantities (:meth:`Observations.grid`), which
give the same sums to rounding:

* sparse (:class:`ModeLayout`): the entries are kept sorted by each mode, the rows of each factor
  that an entry uses are gathered into contiguous ``(rank, n_obs)`` arrays, and the sums over the
  entries of each row are one ``np.add.reduceat`` per pass. One epoch costs ``O(|Omega| rank^2
  order)`` for CP and ``O(|Omega| rank^(2 order - 2) order)`` for Tucker; memory is ``O(|Omega|
  rank^2 + sum(shape) rank)`` (CP) and no dense ``n1 x n2 x ...`` array is formed.
* dense (:class:`DenseGrid`), for tensors observed densely enough: the mask and the values on the
  full grid, every per-row sum a BLAS product of a grid array with a matrix indexed by the columns
  of the unfolding (an entry's design depends only on its column). One epoch costs
  ``O(prod(shape) rank^2 order)`` at BLAS speed; a few ``prod(shape)`` arrays are held.

Model, on values already centred and scaled by the caller::

    x_hat[e] = intercept + sum_m biases[m][X[e, m]] + f(X[e])
    f = sum_r prod_m U_m[i_m, r]                           (CP)
    f = core x_1 U_1[i_1] x_2 U_2[i_2] ... x_d U_d[i_d]    (Tucker, core rank^order)

Objective (both solvers): ``1/2 sum_Omega (y - x_hat)^2 + reg/2 sum_m ||U_m||^2 + reg_core/2 ||core||^2``
(+ ``reg/2 sum_m ||b_m||^2`` while ALS refines the biases).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ._implicit import LANCZOS_MAXITER, TOP_DIRECTIONS, ImplicitDesign
from .mechanisms import Rounding, gaussian_release, joint_gaussian_release, laplace_release

__all__ = ["Observations", "Model", "predict", "interaction_design", "clipped_gradient", "als",
           "gradient_descent", "row_offsets", "offset_noise", "OffsetNoise", "init_model", "dp_als",
           "residual_scale", "spectral_start", "fit_floats", "entry_rounding",
           "ModeLayout"]

_CHUNK = 1 << 21  # floats per block when a Khatri-Rao product over entries would be large
_SSR_BLOCK = 1 << 15  # grid cells per block of the residual sum of squares (256 KiB: stays in cache)
#: The dense layout (:class:`DenseGrid`) is used up to this many grid cells per observed entry
#: (CP; Tucker: ``DENSE_RATIO_TUCKER``, its ALS ``DENSE_RATIO_TUCKER_ALS``). Measured at 100^3
#: rank 3 (one thread), one ALS sweep on the grid costs about 0.010 s (CP) and 0.0054 s (Tucker,
#: :class:`TuckerSweep3`) whatever the number of entries, the sparse layout's sweep as much at
#: about 1.2e5 (CP) and 2.5e4 (Tucker) entries (at 32^4, 0.021 s and 3e4); a Tucker gradient
#: step (0.032 s on the grid) as much at about 6e4.
DENSE_RATIO = 8
DENSE_RATIO_TUCKER = 16
DENSE_RATIO_TUCKER_ALS = 32
#: ... and up to this many cells (a few float64 arrays of this size are held).
DENSE_MAX_CELLS = 1 << 23
#: Restarts of the small CP in :func:`spectral_start` (post-processing of released values, so
#: free): one start landed in a poor local optimum in two of eight draws on the 100^3 study at
#: epsilon = 4, five in none.
N_RESTARTS = 5


class Observations:
    """The public index set Omega: entries ``X`` (n_obs, order) in a tensor of ``shape``.

    Holds the row counts of every mode and, built on first use, the entries sorted by each mode
    (:class:`ModeLayout`), through which every per-row sum of the solvers goes.
    """

    def __init__(self, X: np.ndarray, shape, layout="auto"):
        # column-major: every pass reads one mode's indices, now contiguous (about 1.5x faster)
        self.X = np.asfortranarray(X)
        self.shape = tuple(int(n) for n in shape)
        self.counts = [np.bincount(self.X[:, m], minlength=n).astype(float) for m, n in enumerate(self.shape)]
        self._layouts, self._designs = {}, {}
        if layout not in ("auto", "dense", "sparse"):
            raise ValueError(f"layout must be 'auto', 'dense' or 'sparse', got {layout!r}")
        self._layout = layout
        self._grid = None

    def grid(self, model: "Model | None" = None, als=False) -> "DenseGrid | None":
        """The dense layout (:class:`DenseGrid`) when it is the faster one for ``model``, else ``None``.

        Chosen from public quantities only (the shape, the number of observed entries and the kind
        of model): the grid is used when it has at most ``DENSE_RATIO`` cells per observed entry
        (``DENSE_RATIO_TUCKER`` for Tucker, whose sparse sweeps cost more per entry), at most
        ``DENSE_MAX_CELLS`` cells, and no position is observed twice (the grid holds one value per
        cell). ``layout="dense"`` or ``"sparse"`` forces the choice. A model with modes without a
        factor (``Model.fixed``) runs on the sparse layout. ``als``: the choice for Tucker ALS
        sweeps (``DENSE_RATIO_TUCKER_ALS``), cheaper on the grid than gradient steps.
        """
        if self._layout == "sparse":
            return None
        if model is not None and model.fixed:
            if self._layout == "dense":
                raise ValueError("layout='dense' fits models with a factor on every mode")
            return None
        if self._layout == "auto":
            tucker = model is not None and model.core is not None
            ratio = (DENSE_RATIO_TUCKER_ALS if als else DENSE_RATIO_TUCKER) if tucker else DENSE_RATIO
            cells = math.prod(self.shape)
            if cells > ratio * len(self.X) or cells > DENSE_MAX_CELLS:
                return None
        if self._grid is None:
            self._grid = DenseGrid(self.X, self.shape)
        if self._grid.repeated:
            if self._layout == "dense":
                raise ValueError("layout='dense' needs every observed position to be distinct")
            return None
        return self._grid

    def layout(self, m: int) -> "ModeLayout":
        """The entries sorted by mode ``m`` (built once, on first use)."""
        if m not in self._layouts:
            self._layouts[m] = ModeLayout(self.X, m, self.shape[m])
        return self._layouts[m]

    def implicit_design(self, lead: int, partner: int, rank: int) -> ImplicitDesign:
        """The implicit-feedback design of two modes (:class:`~dptensor._implicit.ImplicitDesign`),
        built once: a function of Omega, so a fit can build it before its spend."""
        key = (lead, partner, rank)
        if key not in self._designs:
            self._designs[key] = ImplicitDesign(self, lead, partner, rank)
        return self._designs[key]

    @property
    def order(self) -> int:
        return len(self.shape)

    def scatter(self, m: int, W: np.ndarray) -> np.ndarray:
        """Per-row sums over mode ``m`` of the per-entry values ``W`` (n_obs,) or (n_obs, p)."""
        idx, n = self.X[:, m], self.shape[m]
        if W.ndim == 1:
            return np.bincount(idx, weights=W, minlength=n)
        return np.stack([np.bincount(idx, weights=W[:, j], minlength=n) for j in range(W.shape[1])], axis=1)


class ModeLayout:
    """The observed entries sorted by their index in one mode, for segment sums without scatter.

    ``perm`` sorts the entries by ``X[:, m]`` (stable); ``rows`` are the rows with at least one
    entry and ``starts`` where each begins in the sorted order, so ``np.add.reduceat(W, starts,
    axis=-1)`` sums a ``(p, n_obs)`` array (entries in sorted order, contiguous) over every
    non-empty row at memory speed. ``others[k]`` is ``X[perm, k]``: the gathers of the design.
    """

    def __init__(self, X, m, n_rows):
        self.perm = np.argsort(X[:, m], kind="stable")
        counts = np.bincount(X[:, m], minlength=n_rows)
        self.rows = np.flatnonzero(counts)
        self.starts = (np.cumsum(counts) - counts)[self.rows]
        self.index = X[self.perm].T.copy()  # (order, n_obs): every mode's index, sorted by mode m
        self.counts = counts.astype(float)
        self.n_rows = n_rows

    def segment_sum(self, Wt):
        """Per-row sums ``(n_rows, p)`` of ``Wt`` ``(p, n_obs)`` in sorted order (empty rows 0)."""
        out = np.zeros((self.n_rows, Wt.shape[0]))
        out[self.rows] = np.add.reduceat(Wt, self.starts, axis=1).T
        return out

    def normal_equations(self, Kt, base, bias=False):
        """Every row's ``sum_e z_e z_e^T`` ``(n_rows, p, p)`` and ``sum_e z_e base_e`` ``(n_rows, p)``.

        ``z_e`` is the column ``Kt[:, e]`` (``Kt`` is ``(r, n_obs)`` in sorted order), with a
        trailing 1 when ``bias`` (``p = r + 1``). All the per-entry terms (``r (r + 1) / 2``
        products, the design itself for the bias column, the right-hand side) go into one
        ``(terms, n_obs)`` array summed per row by one ``reduceat``: a Python loop over the
        ``O(r^2)`` terms, never over rows or entries.
        """
        r, n = Kt.shape
        ia, ib = np.triu_indices(r)
        n_pairs = len(ia)
        terms = np.empty((n_pairs + (2 * r + 1 if bias else r), n))
        for k, (a, b) in enumerate(zip(ia, ib)):
            np.multiply(Kt[a], Kt[b], out=terms[k])
        np.multiply(Kt, base, out=terms[n_pairs:n_pairs + r])
        if bias:
            terms[n_pairs + r:n_pairs + 2 * r] = Kt
            terms[-1] = base
        sums = self.segment_sum(terms)
        bias_sums = (sums[:, n_pairs + r:n_pairs + 2 * r], sums[:, -1]) if bias else None
        return _assemble(sums[:, :n_pairs], sums[:, n_pairs:n_pairs + r], self.counts, bias_sums)


@functools.lru_cache(maxsize=16)
def _pair_index(k):
    """Upper-triangle pairs ``(ia, ib)`` of ``k`` columns and the ``(k, k)`` map from a pair to its position."""
    ia, ib = np.triu_indices(k)
    where = np.empty((k, k), dtype=np.intp)
    where[ia, ib] = where[ib, ia] = np.arange(len(ia))
    return ia, ib, where


def _assemble(pair_sums, rhs_sums, counts, bias_sums=None):
    """Per-row Grams and right-hand sides from the sums of the upper-triangle products
    ``pair_sums`` (rows, r (r + 1) / 2) and of ``z_e base_e`` (rows, r); with ``bias_sums =
    (sum z_e, sum base_e)`` a trailing unknown with a constant 1 in every design (the row's bias)."""
    n_rows, r = rhs_sums.shape
    ia, ib, _ = _pair_index(r)
    p = r + 1 if bias_sums is not None else r
    gram = np.zeros((n_rows, p, p))
    gram[:, ia, ib] = pair_sums
    gram[:, ib, ia] = pair_sums
    rhs = np.empty((n_rows, p))
    rhs[:, :r] = rhs_sums
    if bias_sums is not None:
        gram[:, :r, r] = gram[:, r, :r] = bias_sums[0]
        gram[:, r, r] = counts
        rhs[:, r] = bias_sums[1]
    return gram, rhs


class DenseGrid:
    """The observed entries on the full grid, for tensors observed densely enough.

    ``mask`` is 1 at every observed cell and 0 elsewhere; a per-entry vector is placed on the
    grid by :meth:`scatter` (0 at the other cells). In the mode-``m`` unfolding an entry's design
    depends only on its column (the other modes' indices), so every per-row sum of the solvers is
    a product of a grid array with a matrix indexed by columns (:meth:`contract`): the same sums as
    :class:`ModeLayout`, as a few BLAS products of ``prod(shape) x O(rank^2)`` flops, with no
    gather and no per-entry temporary.
    """

    def __init__(self, X, shape):
        self.shape = tuple(shape)
        self.flat = np.ravel_multi_index(tuple(X.T), self.shape)
        hits = np.bincount(self.flat, minlength=math.prod(self.shape))
        self.repeated = bool(hits.max() > 1)
        self.mask = hits.astype(float).reshape(self.shape)
        self._column_counts = {}

    def scatter(self, values):
        """The per-entry ``values`` on the grid, 0 at unobserved cells."""
        out = np.zeros(math.prod(self.shape))
        out[self.flat] = values
        return out.reshape(self.shape)

    def column_counts(self, m):
        """Observed entries in every column of the mode-``m`` unfolding (columns in C order)."""
        if m not in self._column_counts:
            self._column_counts[m] = self.mask.sum(axis=m).ravel().astype(np.int64)
        return self._column_counts[m]

    def contract(self, T, m, A):
        """``out[i] = sum_c T_(m)[i, c] A[c]``: the mode-``m`` unfolding of the grid array ``T``
        times ``A`` (columns in the C order of the other modes), without forming the unfolding."""
        before = math.prod(self.shape[:m])
        n, after = self.shape[m], math.prod(self.shape[m + 1:])
        if before == 1:
            return T.reshape(n, after) @ A
        if after == 1:
            return T.reshape(before, n).T @ A
        return np.matmul(T.reshape(before, n, after), A.reshape(before, after, -1)).sum(axis=0)

    def normal_equations(self, m, Z, base, counts, col_offset=None, row_offset=None, bias=False):
        """Dense twin of :meth:`ModeLayout.normal_equations` for mode ``m``.

        The entry in row ``i`` and column ``c`` of the unfolding has design ``Z[c]`` (``Z`` is
        ``(n_columns, r)``) and value ``base[e] - col_offset[c] - row_offset[i]`` (``base`` on the
        grid, 0 where unobserved). Two products: the mask with the design's pair products, the
        design itself and its products with ``col_offset``; ``base`` with the design.
        """
        n_cols, r = Z.shape
        ia, ib, _ = _pair_index(r)
        n_pairs = len(ia)
        A = np.empty((n_cols, n_pairs + r + (r + 1 if col_offset is not None else 0)))
        # one column at a time: a ufunc writing a block of columns of A is several times slower
        for k, (a, b) in enumerate(zip(ia, ib)):
            np.multiply(Z[:, a], Z[:, b], out=A[:, k])
        for a in range(r):
            A[:, n_pairs + a] = Z[:, a]
            if col_offset is not None:
                np.multiply(Z[:, a], col_offset, out=A[:, n_pairs + r + a])
        if col_offset is not None:
            A[:, -1] = col_offset
        S = self.contract(self.mask, m, A)
        A = np.empty((n_cols, r + 1))
        A[:, :r], A[:, r] = Z, 1.0
        V = self.contract(base, m, A)
        z_sums = S[:, n_pairs:n_pairs + r]
        rhs, base_sums = V[:, :r], V[:, r]
        if col_offset is not None:
            rhs = rhs - S[:, n_pairs + r:n_pairs + 2 * r]
            base_sums = base_sums - S[:, -1]
        if row_offset is not None:
            rhs = rhs - row_offset[:, None] * z_sums
            base_sums = base_sums - row_offset * counts
        return _assemble(S[:, :n_pairs], rhs, counts, (z_sums, base_sums) if bias else None)


@dataclass
class Model:
    """Parameters of a fitted completion model (in the caller's scaled units)."""

    factors: list
    core: np.ndarray | None = None
    intercept: float = 0.0
    biases: list = field(default_factory=list)
    #: Modes without factors of their own (CP): their factor is all ones and never fitted, so the
    #: interaction does not vary along them and they contribute only their offsets.
    fixed: tuple = ()

    def free_modes(self):
        return [m for m in range(len(self.factors)) if m not in self.fixed]

    @property
    def rank(self) -> int:
        return self.factors[0].shape[1]


def init_model(shape, rank, kind, rng, scale=0.1, *, offset_like=False, fixed=()):
    """A data-independent starting point.

    By default, random normal factors scaled so that ``f`` has standard deviation about ``scale``.
    With ``offset_like`` (the start for gradient descent) ``f`` starts at exactly 0 but not at a
    saddle point: for CP, component ``r`` has an all-zero column on mode ``r % order`` and all-ones
    columns elsewhere, so it acts as a per-mode offset whose first gradient is that mode's row sums
    of residuals, and interactions grow from it in later steps; for Tucker, the core is 0 and the
    factors random with unit-norm rows, so the first step fits the core.
    """
    d = len(shape)
    biases = [np.zeros(n) for n in shape]
    if kind == "cp":
        fixed = tuple(sorted(fixed))
        free = [m for m in range(d) if m not in fixed]
        if offset_like:
            factors = [np.ones((n, rank)) for n in shape]
            for r in range(rank):
                factors[free[r % len(free)]][:, r] = 0.0
            return Model(factors=factors, core=None, biases=biases, fixed=fixed)
        s = (scale / np.sqrt(rank)) ** (1.0 / len(free))
        factors = [np.ones((n, rank)) if m in fixed else rng.standard_normal((n, rank)) * s
                   for m, n in enumerate(shape)]
        return Model(factors=factors, core=None, biases=biases, fixed=fixed)
    if fixed:
        raise ValueError("fixed modes are a CP feature")
    if offset_like:
        factors = [rng.standard_normal((n, rank)) for n in shape]
        factors = [U / np.linalg.norm(U, axis=1, keepdims=True) for U in factors]
        return Model(factors=factors, core=np.zeros((rank,) * d), biases=biases)
    factors = [rng.standard_normal((n, rank)) / np.sqrt(max(n, 1)) for n in shape]
    core = rng.standard_normal((rank,) * d)
    # each f(e) is a sum of rank^d products of O(1/sqrt(n)) rows: rescale the core to ``scale``.
    core *= scale / np.sqrt(rank**d / np.prod([max(n, 1) for n in shape]))
    return Model(factors=factors, core=core, biases=biases)


# ----------------------------------------------------------------------------- evaluation
def _khatri_rao_rows(mats):
    """Row-wise Kronecker product of ``(n, r_k)`` matrices: ``(n, prod r_k)``, C order.

    Computed column-wise (:func:`_khatri_rao_cols` on the transposes) so that every product runs
    along the entries; the result is the transpose of a C-ordered array.
    """
    return _khatri_rao_cols([np.ascontiguousarray(M.T) for M in mats]).T


def _khatri_rao_cols(mats_t):
    """Column-wise Khatri-Rao of ``(r_k, n)`` matrices: ``(prod r_k, n)``, C order over the ``r_k``.

    The transposed twin of :func:`_khatri_rao_rows`: every product runs along the ``n`` entries
    (contiguous), not along a rank-sized inner axis.
    """
    out = mats_t[0]
    for M in mats_t[1:]:
        out = (out[:, None, :] * M[None, :, :]).reshape(-1, out.shape[1])
    return out


def _unfold(core, m):
    """Mode-``m`` unfolding whose columns follow the C order of the other modes."""
    return np.moveaxis(core, m, 0).reshape(core.shape[m], -1)


def interaction_design(model: Model, X: np.ndarray):
    """The gathered rows ``R_m = U_m[X[:, m]]`` and the leave-one-out designs ``K_m``.

    ``K_m[e]`` is the derivative of ``f(X[e])`` with respect to row ``X[e, m]`` of ``U_m``, so that
    ``f(X[e]) = R_m[e] . K_m[e]`` for every ``m``: the per-entry regression of an ALS step and the
    per-entry gradient of a GD step in one array. CP uses prefix and suffix products (no division);
    Tucker contracts the core with the other modes' rows.
    """
    R = [U[X[:, m]] for m, U in enumerate(model.factors)]
    d = len(R)
    if model.core is None:
        prefix = [np.ones_like(R[0])]
        for m in range(d - 1):
            prefix.append(prefix[-1] * R[m])
        K = [None] * d
        suffix = np.ones_like(R[0])
        for m in range(d - 1, -1, -1):
            K[m] = prefix[m] * suffix
            suffix = suffix * R[m]
        return R, K
    K = []
    for m in range(d):
        others = [R[k] for k in range(d) if k != m]
        K.append(_blocked(lambda s: _khatri_rao_rows([o[s] for o in others]) @ _unfold(model.core, m).T,
                          len(X), model.rank ** (d - 1), model.rank))
    return R, K


def _blocked(fn, n, width, out_cols):
    """Apply ``fn`` to slices of the entries so that no block holds more than ``_CHUNK`` floats."""
    step = max(1, _CHUNK // max(width, 1))
    if n <= step:
        return fn(slice(0, n))
    out = np.empty((n, out_cols))
    for start in range(0, n, step):
        s = slice(start, min(n, start + step))
        out[s] = fn(s)
    return out


def offsets(model: Model, X: np.ndarray) -> np.ndarray:
    out = np.full(X.shape[0], float(model.intercept))
    for m, b in enumerate(model.biases):
        if b is not None and len(b):
            out += b[X[:, m]]
    return out


def predict(model: Model, X: np.ndarray) -> np.ndarray:
    """Model values at the index tuples ``X`` (n, order)."""
    R, K = interaction_design(model, X)
    return offsets(model, X) + np.einsum("er,er->e", R[0], K[0])


# ----------------------------------------------------------------------------- offsets
def release_rows(values, seen, release):
    """The rows of ``values`` that hold an entry (``seen``, a function of Omega: public) released by
    ``release`` (a mechanism on those rows together). The other rows are sums over no entry, 0
    whatever the data: they are no part of the query and are returned as they are."""
    out = np.array(values, dtype=np.float64, copy=True)
    out[seen] = release(out[seen])
    return out


def entry_rounding(n_obs, bound, longest, later=0) -> Rounding:
    """The floating-point rounding (:class:`~dptensor.mechanisms.Rounding`) of a release of sums
    over observed entries: every entry adds terms of norm at most ``bound`` (in the release's norm)
    to it, ``n_obs`` entries at most ``n_obs bound`` together; a coordinate sums at most ``longest``
    of them (a value times its public design is one summand, as in a dot product), and ``later``
    multiplications by public values follow partial sums. All of it public: Omega, its counts and
    public bounds (``docs/derivations/completion.rst``, "Rounding")."""
    return Rounding(total=float(n_obs) * float(bound), terms=int(longest) + int(later))


#: The norm, in l1 and so in l2, of one value's terms ``(y, min(y^2, 1/4))`` in
#: :func:`total_statistics` for values in ``[-1/2, 1/2]``: at most ``1/2 + 1/4``.
TOTAL_TERM_BOUND = 0.75


#: Sensitivity, in l1 and in l2 alike, of :func:`total_statistics` for values in ``[-1/2, 1/2]``
#: (where the clip of the squares is inactive): a value moving from ``y`` to ``y'`` by
#: ``d = |y - y'| <= 1`` moves the pair by ``d (1 + |y + y'|)`` in l1 and ``d sqrt(1 + (y + y')^2)``
#: in l2, and ``|y + y'| <= 1 - d``, so by at most ``d (2 - d) <= 1`` and
#: ``d sqrt(1 + (1 - d)^2) <= 1``.
TOTAL_SENSITIVITY = 1.0


def total_statistics(y: np.ndarray) -> np.ndarray:
    """``(sum y, sum min(y^2, 1/4))``: released together, the global mean and the values' spread."""
    return np.array([y.sum(), np.minimum(y * y, 0.25).sum()])


#: Share of the offsets' budget given to each of their sums over every entry (the total with its
#: spread, the statistics mode's residual scale) by :func:`offset_noise`. Their noise is divided by
#: all ``n`` entries, so a small share keeps it far below any row's: on MovieLens-100K at
#: epsilon = 1 moving the total from a fifth of the offsets' budget to 0.02 took the private
#: offsets' test RMSE from 1.034 to 1.025 (0.005 gave 1.0245: no more to win).
GLOBAL_SHARE = 0.02


@dataclass(frozen=True)
class OffsetNoise:
    """The noise of the offsets' releases (the total first, one per mode, then the other sums over
    every entry): ``"laplace"`` with one epsilon per release (pure DP, epsilons add up), or
    ``"gaussian"`` with one noise multiplier per release (``sum 1/z_k^2`` is the group's ``mu^2``).
    Each release touches one coordinate per entry, with the same sensitivity in l1 and l2."""

    mechanism: str
    levels: np.ndarray

    def release(self, k, values, sensitivity, rng, *, rounding: Rounding | None):
        """Release ``k``: ``values`` (sensitivity ``sensitivity``, floating-point ``rounding``: the
        same bound in l1 and l2, one coordinate per entry) plus its noise."""
        level = float(self.levels[k])
        if self.mechanism == "laplace":
            return laplace_release(values, sensitivity, level, rng, rounding=rounding)
        return gaussian_release(values, sensitivity, level, rng, rounding=rounding)

    def variance(self, k, sensitivity=1.0):
        """The noise variance of release ``k`` (``Lap(b)``: ``2 b^2``)."""
        level = float(self.levels[k])
        return 2.0 * (sensitivity / level) ** 2 if self.mechanism == "laplace" else (level * sensitivity) ** 2


def offset_noise(obs: Observations, mechanism: str, budget: float, n_global: int = 1) -> OffsetNoise:
    """The offsets' releases for a group's ``budget`` (Laplace: its epsilon; Gaussian: its noise
    multiplier as ``n_global + order`` releases, ``mu^2 = (n_global + order) / budget^2``).

    Each sum over every entry gets ``GLOBAL_SHARE`` of the budget (of epsilon, or of ``mu^2``). The
    modes share the rest by their public counts so that the noise on a typical row mean is the same
    fraction of its sampling error (``s / sqrt(c_m)``, ``c_m`` the median number of entries in a row
    of mode ``m``) in every mode: Laplace ``eps_m`` proportional to ``c_m^(-1/2)``, Gaussian
    ``z_m^2`` to ``c_m``. The sparsest mode (items of a ratings matrix) gets the least noise. Counts
    are functions of Omega: public.
    """
    typical = np.asarray([float(np.median(c[c > 0])) if np.any(c > 0) else 1.0 for c in obs.counts])
    rows_share = 1.0 - n_global * GLOBAL_SHARE
    if mechanism == "laplace":
        weights = typical ** -0.5
        glob, rows = GLOBAL_SHARE * budget, rows_share * budget * weights / weights.sum()
    else:
        mu2 = (n_global + obs.order) / budget**2
        glob = 1.0 / math.sqrt(GLOBAL_SHARE * mu2)
        rows = np.sqrt(typical * np.sum(1.0 / typical) / (rows_share * mu2))
    return OffsetNoise(mechanism, np.concatenate([[glob], rows, np.full(n_global - 1, glob)]))


def row_offsets(obs: Observations, y: np.ndarray, *, shrink=1.0, noise: OffsetNoise | None = None, rng=None,
                empirical_bayes=False, spread=None):
    """Global mean and per-mode row effects by one backfitting sweep, optionally released privately.

    With ``noise`` (:func:`offset_noise`; releases 0 to ``order``), ``intercept = (sum y + noise) /
    n``, released jointly with the clipped sum of squares (:func:`total_statistics`, sensitivity
    ``TOTAL_SENSITIVITY`` for values in ``[-1/2, 1/2]``, which the noisy path assumes) whose spread
    is the per-entry variance of the shrinkage; then for each mode in turn
    ``b_m[i] = (S_i + noise) / (n_i + kappa_i)`` where ``S_i`` sums, over row ``i``'s entries, ``y``
    minus the offsets released so far. Without noise ``kappa_i = shrink``; with noise it is the
    empirical-Bayes shrinkage of :func:`eb_shrinkage`, computed from the noisy sums and public
    counts only. Returns ``(intercept, biases)``.

    Privacy (used by the estimator): changing one entry's value (in an interval of width 1) moves
    the total by at most 1, and one row sum of each mode by at most 1 (the offsets subtracted were
    released before, so they are constants): the release of mode ``m`` has sensitivity 1 in l1 and
    l2, and the ``order + 1`` releases compose (Laplace: their epsilons add; Gaussian: their
    ``1/z^2`` add). Rows with no entry sum to 0 whatever the data: no noise there
    (:func:`release_rows`).
    """
    noisy = noise is not None
    n = max(len(y), 1)
    s2 = None
    if noisy:
        # Private values lie in [-1/2, 1/2]: the total and the clipped sum of squares are one joint
        # release, whose spread stands for the per-entry variance of the empirical-Bayes shrinkage
        # below (an upper bound: it still holds the row effects).
        total, squares = noise.release(0, total_statistics(y), TOTAL_SENSITIVITY, rng,
                                       rounding=entry_rounding(n, TOTAL_TERM_BOUND, n))
        # Clamping (post-processing) can only bring the mean closer: it lies in [-1/2, 1/2].
        intercept = float(np.clip(total / n, -0.5, 0.5))
        s2 = float(np.clip(squares / n - intercept**2, 1e-4, 0.25))
    else:
        intercept = float(y.sum()) / n
    resid = y - intercept
    biases = []
    for m in range(obs.order):
        sums = obs.scatter(m, resid)
        counts = obs.counts[m]
        noise_var = 0.0
        if noisy:
            # |resid| <= 1/2 + 1/2 + m: the value, the clamped mean and m clamped row effects
            rounding = entry_rounding(n, 1.0 + m, counts.max())
            sums = release_rows(sums, counts > 0,
                                lambda v: noise.release(m + 1, v, 1.0, rng, rounding=rounding))
            noise_var = noise.variance(m + 1)
        if noisy or empirical_bayes:
            # Values that carry their own noise: their spread is measured directly (post-processing).
            s2_m = float(np.var(resid)) if (empirical_bayes and not noisy) else s2
            kappa, s2_fit = eb_shrinkage(sums, counts, noise_var, s2=s2_m, return_s2=True)
            if spread is not None:
                spread.append(s2_fit)
        else:
            kappa = shrink
        b = np.where(counts > 0, sums / np.maximum(counts + kappa, 1e-12), 0.0)
        if noisy:
            # A row effect beyond the range's width would by itself move predictions out of the
            # range: clamping it (post-processing) only removes noise.
            b = np.clip(b, -1.0, 1.0)
        biases.append(b)
        resid = resid - b[obs.X[:, m]]
    return float(intercept), biases


def eb_shrinkage(sums, counts, noise_var, s2=None, return_s2=False, n_se=2.0):
    """Per-row shrinkage ``kappa_i = (s^2 + noise_var / n_i) / tau^2`` from noisy row sums.

    Model: row effect ``beta_i ~ (0, tau^2)``, per-entry residual variance ``s^2``, released sum
    ``S_i = n_i beta_i + data noise + N(0, noise_var)``. Then the raw mean ``S_i / n_i`` has
    second moment ``tau^2 + s^2 / n_i + noise_var / n_i^2`` and ``S_i / (n_i + kappa_i)`` is the
    posterior mean of ``beta_i``. A known ``s2`` is used as given and ``tau^2`` is fitted as for
    the factor rows (:func:`_fit_signal_variance`, with ``G = n_i``), ``n_se`` standard errors low
    so that rows swamped by noise fall back to 0; otherwise ``tau^2`` and ``s^2`` are fitted
    together from the row means. Only released sums and public counts enter: post-processing.
    """
    seen = counts > 0
    n = counts[seen]
    if s2 is not None:
        # The released sum is the one-coordinate case of a noisy normal equation: G = n_i, so the
        # signal variance is fitted exactly as for the factor rows (:func:`_fit_signal_variance`:
        # weights refitted to the variance of each sum, sandwich standard error).
        tau2 = max(_fit_signal_variance(n, sums[seen] ** 2, noise_var, s2, n_se=n_se), 1e-8)
    else:  # non-private values: fit s^2 beside tau^2 from the row means
        mean = sums[seen] / n
        design = np.stack([np.ones_like(n), 1.0 / n], axis=1)
        w = n  # the spread of a mean's square falls with the row's count
        A, t = design * np.sqrt(w)[:, None], (mean**2 - noise_var / n**2) * np.sqrt(w)
        coef, *_ = np.linalg.lstsq(A, t, rcond=None)
        dof = max(len(n) - A.shape[1], 1)
        se = np.sqrt(np.sum((t - A @ coef) ** 2) / dof * np.linalg.pinv(A.T @ A)[0, 0])
        tau2 = max(coef[0] - n_se * se, 1e-8)
        s2 = max(coef[1], 0.0)
    kappa = (s2 + noise_var / np.maximum(counts, 1)) / tau2
    return (kappa, s2) if return_s2 else kappa


# ----------------------------------------------------------------------------- ALS
def mode_design(model: Model, layout: ModeLayout, m: int) -> np.ndarray:
    """``K_m`` for the entries in mode-``m`` order, transposed: ``(rank, n_obs)``.

    CP: the product of the other modes' gathered rows (``np.take`` on the transposed factors, so
    every gather and product runs over contiguous memory). Tucker: the core contracted with them.
    """
    idx = layout.index
    others = [k for k in range(len(model.factors)) if k != m]
    if model.core is None:
        Kt = np.take(np.ascontiguousarray(model.factors[others[0]].T), idx[others[0]], axis=1)
        for k in others[1:]:
            Kt *= np.take(np.ascontiguousarray(model.factors[k].T), idx[k], axis=1)
        return Kt
    Rt = [np.take(np.ascontiguousarray(model.factors[k].T), idx[k], axis=1) for k in others]
    core_m = _unfold(model.core, m)
    n, width = idx.shape[1], model.rank ** len(others)
    step = max(1, _CHUNK // width)  # bounded memory for the Khatri-Rao block
    out = np.empty((model.rank, n))
    for start in range(0, n, step):
        s = slice(start, min(n, start + step))
        out[:, s] = core_m @ _khatri_rao_cols([R[:, s] for R in Rt])
    return out


def _interaction_sorted(model: Model, layout: ModeLayout, m: int) -> np.ndarray:
    """The CP interaction ``f`` at the entries in ``layout``'s (mode ``m``'s) order."""
    U = np.take(np.ascontiguousarray(model.factors[m].T), layout.index[m], axis=1)
    return np.einsum("re,re->e", U, mode_design(model, layout, m))


def _offsets_sorted(model: Model, layout: ModeLayout, skip=None) -> np.ndarray:
    """Intercept plus every mode's bias (but ``skip``'s) at the entries in ``layout``'s order."""
    out = np.full(layout.index.shape[1], float(model.intercept))
    for k, b in enumerate(model.biases):
        if k != skip and b is not None and len(b):
            out += np.take(b, layout.index[k])
    return out


def _core_normal_equations(model: Model, L: ModeLayout, base):
    """The core's normal equations ``(sum_e kr_e kr_e^T, sum_e kr_e base_e)`` over the entries in
    ``L``'s order, ``kr_e`` the Kronecker product of the entry's rows (the core's design).

    In blocks of entries, each block's ``(rank^d, block)`` Kronecker rows built along the entries
    and multiplied by themselves in one BLAS product (measured faster than grouping the entries
    by their mode-0 row and summing ``rank^(d-1)``-wide products per row).
    """
    Rt = [np.take(np.ascontiguousarray(U.T), L.index[k], axis=1) for k, U in enumerate(model.factors)]
    width = model.rank ** len(Rt)
    gram, rhs = np.zeros((width, width)), np.zeros(width)
    step = max(1, _CHUNK // width)
    for start in range(0, len(base), step):
        kr = _khatri_rao_cols([R[:, start:start + step] for R in Rt])
        gram += kr @ kr.T
        rhs += kr @ base[start:start + step]
    return gram, rhs


def _ridge_solve(gram, rhs):
    """``gram^{-1} rhs`` for (stacked) ridge normal equations; the least-norm solution where the
    ridge is lost in the Gram's rounding and leaves it singular (values under heavy input noise
    grow the factors to ~1e15 while the ridge stays ~1e-3), where ``solve`` raised after the spend."""
    try:
        return np.linalg.solve(gram, rhs)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(gram, hermitian=True) @ rhs


def _set_core(model: Model, gram, rhs, reg_core):
    """The core's ridge solution from its normal equations (``gram`` is modified)."""
    gram[np.diag_indices_from(gram)] += reg_core + 1e-12
    model.core = _ridge_solve(gram, rhs).reshape(model.core.shape)


def _tucker_core_step(model: Model, L: ModeLayout, y_sorted, reg_core):
    """Solve the core's ridge regression; return the sum of squared residuals after it."""
    base = y_sorted - _offsets_sorted(model, L)
    _set_core(model, *_core_normal_equations(model, L, base), reg_core)
    rows = np.take(np.ascontiguousarray(model.factors[0].T), L.index[0], axis=1)
    resid = base - np.einsum("re,re->e", rows, mode_design(model, L, 0))
    return float(resid @ resid)


# ----------------------------------------------------------------------------- the dense layout
def _grid_rows(mats, kron=False):
    """Every combination of one row of each of ``mats`` (C order), combined by elementwise product
    (``(prod n_k, r)``, the CP designs) or by Kronecker product (``(prod n_k, prod r_k)``)."""
    out = mats[0]
    for M in mats[1:]:
        if kron:
            out = (out[:, None, :, None] * M[None, :, None, :]).reshape(out.shape[0] * M.shape[0], -1)
        else:
            out = (out[:, None, :] * M[None, :, :]).reshape(-1, out.shape[1])
    return out


def grid_design(model: Model, m: int) -> np.ndarray:
    """``K_m`` at every column of the mode-``m`` unfolding (C order of the other modes): ``(n_cols, rank)``.

    CP: the elementwise products of the other modes' rows. Tucker: the core multiplied by the
    other factors one mode at a time, last first (each product puts its mode in front, so the
    next rank axis to contract is always at the same place), never a Kronecker product.
    """
    others = [k for k in range(len(model.factors)) if k != m]
    if model.core is None:
        return _grid_rows([model.factors[k] for k in others])
    T = np.moveaxis(model.core, m, -1)
    for k in reversed(others):
        T = np.tensordot(model.factors[k], T, axes=([1], [len(others) - 1]))
    return T.reshape(-1, model.rank)


def _grid_offsets(model: Model, m: int) -> np.ndarray:
    """Intercept plus the other modes' biases at every column of the mode-``m`` unfolding."""
    others = [k for k in range(len(model.factors)) if k != m]
    out = np.full([len(model.factors[k]) for k in others], float(model.intercept))
    for j, k in enumerate(others):
        b = model.biases[k] if k < len(model.biases) else None
        if b is not None and len(b):
            out += b.reshape([-1 if i == j else 1 for i in range(len(others))])
    return out.ravel()


def _row_bias(model: Model, m: int):
    b = model.biases[m] if m < len(model.biases) else None
    return b if b is not None and len(b) else None


def _grid_ssr(grid: DenseGrid, Yg, model: Model, design0):
    """Sum of squared residuals over the observed cells, from mode 0's design ``design0``
    (:func:`grid_design`): the model on the mode-0 unfolding is one product, the offsets riding
    along as two more columns; in blocks of rows, so that the block stays in cache while it is
    masked, compared and summed."""
    U0 = model.factors[0]
    b = _row_bias(model, 0)
    A = np.hstack([U0, np.ones((len(U0), 1)), (b if b is not None else np.zeros(len(U0)))[:, None]])
    Bt = np.hstack([design0, _grid_offsets(model, 0)[:, None], np.ones((len(design0), 1))]).T
    M, Y = grid.mask.reshape(len(U0), -1), Yg.reshape(len(U0), -1)
    step = max(1, _SSR_BLOCK // M.shape[1])
    ssr = 0.0
    for start in range(0, len(U0), step):
        rows = slice(start, start + step)
        E = A[rows] @ Bt
        E *= M[rows]
        E -= Y[rows]
        ssr += float(np.vdot(E, E))
    return ssr


def _project(T, mats):
    """``T`` ``(lead, n_1, ..., n_L)`` multiplied along every ``n_k`` by ``mats[k]`` ``(n_k, c_k)``:
    ``(lead, c_1, ..., c_L)``. Each product drops axis 1 and appends its ``c_k``, so the next is on axis 1."""
    for A in mats:
        T = np.tensordot(T, A, axes=([1], [0]))
    return T


def _grid_core_normal_equations(model: Model, grid: DenseGrid, base, col_offset=None, row_offset=None,
                                masked_row_offset=None):
    """The core's normal equations on the dense layout: ``sum_e kr_e kr_e^T`` and ``sum_e kr_e t_e``
    over the observed cells, ``kr_e`` the Kronecker product of the entry's rows and ``t_e =
    base[e] - col_offset[c] - row_offset[i]`` (mode-0 unfolding, as :meth:`DenseGrid.normal_equations`).

    Sums over mode 0 first: one product of the grid with the pair products ``u_i u_i^T`` of mode
    0's rows (and ``u_i``) gives every column's ``T_c = sum_i mask[i, c] u_i u_i^T`` and ``r_c =
    sum_i u_i t_ic``; the Gram ``sum_c T_c (x) q_c q_c^T`` and right-hand side ``sum_c r_c (x) q_c``
    (``q_c`` the Kronecker product of the other rows) are then products with one mode's factor at a
    time (:func:`_project`): ``O(prod(shape) rank^2)`` flops, no Kronecker product formed.
    ``masked_row_offset`` (a list): receives ``sum_i mask[i, c] row_offset[i]`` per column, one
    more row of the same product (for the residuals' sum of squares, :func:`_grid_core_step`).
    """
    d, r = len(model.factors), model.rank
    U0, others = model.factors[0], model.factors[1:]
    n0, ns = len(U0), [len(U) for U in others]
    ia, ib, where = _pair_index(r)
    W = [U0[:, ia] * U0[:, ib], U0]
    if row_offset is not None:
        W += [U0 * row_offset[:, None], row_offset[:, None]]
    MW = np.vstack([x.T for x in W]) @ grid.mask.reshape(n0, -1)  # (pairs + r (+ r + 1), n_cols)
    n_up = len(ia)
    R = U0.T @ base.reshape(n0, -1)
    if col_offset is not None:
        R -= MW[n_up:n_up + r] * col_offset
    if row_offset is not None:
        R -= MW[n_up + r:n_up + 2 * r]
        if masked_row_offset is not None:
            masked_row_offset.append(MW[-1])
    outer = [(U[:, :, None] * U[:, None, :]).reshape(len(U), r * r) for U in others]
    G = _project(MW[:n_up].reshape(n_up, *ns), outer).reshape((n_up,) + (r, r) * (d - 1))
    # G[pair(a, b), p_1, q_1, ..., p_L, q_L] -> gram[(a, p_1..p_L), (b, q_1..q_L)]
    perm = [0] + [2 + 2 * k for k in range(d - 1)] + [1] + [3 + 2 * k for k in range(d - 1)]
    gram = G[where].transpose(perm).reshape(r**d, r**d)
    return gram, _project(R.reshape(r, *ns), others).ravel()


def _grid_core_step(model: Model, grid: DenseGrid, Yg, reg_core, value_sums):
    """:func:`_tucker_core_step` on the dense layout (:func:`_grid_core_normal_equations`).

    The sum of squared residuals comes from the core's normal equations, ``|t|^2 - 2 c.rhs +
    c^T G c`` with ``t`` the values less the offsets on the observed cells, instead of another
    pass that forms the model at every cell: ``|t|^2`` from the values' sums (``value_sums``, fixed
    for the fit: ``sum y^2`` and the mode-0 unfolding's column and row sums) and one product of the
    mask with the column offsets."""
    col_offset, row_bias = _grid_offsets(model, 0), _row_bias(model, 0)
    masked = []
    gram, rhs = _grid_core_normal_equations(model, grid, Yg, col_offset, row_bias, masked_row_offset=masked)
    _set_core(model, gram, rhs, reg_core)
    c = model.core.ravel()
    # _set_core added reg_core + 1e-12 to the Gram's diagonal: c^T G c without it
    fit = float(c @ gram @ c) - (reg_core + 1e-12) * float(c @ c)
    yy, col_sums, row_sums, row_counts = value_sums
    tt = yy - 2.0 * float(col_offset @ col_sums) + float(col_offset**2 @ grid.column_counts(0))
    if row_bias is not None:
        tt += (-2.0 * float(row_bias @ row_sums) + float(row_bias**2 @ row_counts)
               + 2.0 * float(masked[0] @ col_offset))
    return max(tt - 2.0 * float(c @ rhs) + fit, 0.0)


def grid_value_sums(grid: DenseGrid, Yg, row_counts):
    """``(sum y^2, column sums, row sums, row counts)`` of the values in the grid's mode-0 unfolding."""
    Y0 = Yg.reshape(grid.shape[0], -1)
    return float(np.vdot(Y0, Y0)), Y0.sum(axis=0), Y0.sum(axis=1), row_counts


class TuckerSweep3:
    """The normal equations of one ALS sweep of an order-3 Tucker model on the dense layout, two
    updates per pass over the grid.

    Mode ``m``'s sums over its row ``i`` (:meth:`DenseGrid.normal_equations`) are, with the
    entry's design ``z = G_(m) (u_j (x) u_l)``, ``G_(m) [sum_jl mask_ijl (u_j u_j^T (x) u_l u_l^T)]
    G_(m)^T`` and alike: contractions of the mask with per-row features of the OTHER two modes,
    ``F_k = [u_k, b_k u_k, u_k u_k^T]`` (the factor row, times the row's bias, its pair products).
    The mask is contracted with one mode's features once (a pass over the grid: ``prod(shape) x
    (2 r + r (r + 1) / 2)`` flops), the other mode's on the small result. Mode 2's features stay
    fixed while modes 0 and 1 update, and mode 0's while mode 2 and the core update: one pass for
    each pair, two per sweep where :meth:`DenseGrid.normal_equations` and the core's
    (:func:`_grid_core_normal_equations`) make four, each with more columns. The values likewise
    (``Y x_k U_k``). The offsets enter through the ``b u`` features and the mask's pair marginals
    (counts per pair of indices), and the sum of squared residuals comes from the core's normal
    equations (as :func:`_grid_core_step`), with ``sum mask o^2`` from the same marginals.

    Call :meth:`normal_equations` for modes 0, 1, 2 in turn, then :meth:`core_step`: each uses
    the factors the previous ones left (the order of :func:`als`).
    """

    def __init__(self, grid: DenseGrid, Yg, counts):
        M, n = grid.mask, grid.shape
        self.mask, self.counts = M, counts
        self.pair_counts = {(0, 1): M.sum(axis=2), (0, 2): M.sum(axis=1), (1, 2): M.sum(axis=0)}
        self.row_sums = [Yg.sum(axis=(1, 2)), Yg.sum(axis=(0, 2)), Yg.sum(axis=(0, 1))]
        self.yy = float(np.vdot(Yg, Yg))
        self._flat = (M.reshape(n[0] * n[1], n[2]), M.reshape(n[0], n[1] * n[2]))
        self._yflat = (Yg.reshape(n[0] * n[1], n[2]), Yg.reshape(n[0], n[1] * n[2]))
        self._pivot = self._value = self._last = None

    @staticmethod
    def _bias(model, k):
        b = _row_bias(model, k)
        return np.zeros(len(model.factors[k])) if b is None else b

    def _features(self, model: Model, k: int):
        """``F_k = [u, b u, u u^T]`` (upper-triangle pairs) for every row of mode ``k``."""
        U = model.factors[k]
        ia, ib, _ = _pair_index(U.shape[1])
        return np.hstack([U, self._bias(model, k)[:, None] * U, U[:, ia] * U[:, ib]])

    def _others_offsets(self, model, m):
        """``sum_c mask[i, c] o_c`` per row ``i`` of mode ``m``: the intercept and the other modes' biases."""
        out = model.intercept * self.counts[m]
        for k in range(3):
            if k != m:
                C = self.pair_counts[(min(m, k), max(m, k))]
                out = out + (C @ self._bias(model, k) if m < k else C.T @ self._bias(model, k))
        return out

    def normal_equations(self, model: Model, m: int, bias: bool):
        """Mode ``m``'s per-row Grams and right-hand sides, as :meth:`DenseGrid.normal_equations`
        with the offsets of ``model`` (its own row bias a trailing unknown when ``bias``)."""
        n, r = self.mask.shape, model.rank
        U = model.factors
        if m == 0:  # mode 2's features, fixed until mode 2 updates: one pass serves modes 0 and 1
            # (features first: the wide product runs several times faster than the tall one)
            self._pivot = (self._features(model, 2).T @ self._flat[0].T).reshape(-1, n[0], n[1])
            self._value = (U[2].T @ self._yflat[0].T).reshape(r, n[0], n[1])
            Q = np.tensordot(self._pivot, self._features(model, 1), axes=([2], [0])).transpose(1, 2, 0)
            V = np.tensordot(self._value, U[1], axes=([2], [0])).transpose(1, 2, 0)  # (i, p1, p2)
        elif m == 1:
            Q = np.tensordot(self._pivot, self._features(model, 0), axes=([1], [0])).transpose(1, 2, 0)
            V = np.tensordot(self._value, U[0], axes=([1], [0])).transpose(1, 2, 0)
        else:  # mode 0's features, fixed until the next sweep: one pass serves mode 2 and the core
            F0 = self._features(model, 0)
            pivot = (F0.T @ self._flat[1]).reshape(-1, n[1], n[2])
            value = (U[0].T @ self._yflat[1]).reshape(r, n[1], n[2])
            Q = np.tensordot(pivot, self._features(model, 1), axes=([1], [0])).transpose(1, 0, 2)
            V = np.tensordot(value, U[1], axes=([1], [0])).transpose(1, 0, 2)
            self._last = (Q, V)
        K, a, off = _kron_terms(Q, r)
        rows = len(K)
        Gm = np.moveaxis(model.core, m, 0).reshape(r, r * r)
        gram = np.matmul(np.matmul(Gm, K), Gm.T)
        z_sums = a @ Gm.T
        rhs = (V.reshape(rows, r * r) - model.intercept * a - off) @ Gm.T
        if not bias:
            b = _row_bias(model, m)
            if b is not None:
                rhs -= b[:, None] * z_sums
            return gram, rhs
        full = np.empty((rows, r + 1, r + 1))
        full[:, :r, :r] = gram
        full[:, :r, r] = full[:, r, :r] = z_sums
        full[:, r, r] = self.counts[m]
        return full, np.hstack([rhs, (self.row_sums[m] - self._others_offsets(model, m))[:, None]])

    def core_step(self, model: Model, reg_core):
        """Solve the core's ridge regression (after mode 2); return the sum of squared residuals."""
        r = model.rank
        Q, V = self._last
        C = np.tensordot(Q, self._features(model, 2), axes=([0], [0]))  # (f0, f1, f2)
        value = np.tensordot(V, model.factors[2], axes=([0], [0])).ravel()  # (p0, p1, p2)
        gram = C[_kron_index(r, 3)].reshape(r**3, r**3)
        u = slice(0, r)
        bu = slice(r, 2 * r)
        a = C[u, u, u].ravel()
        off = (C[bu, u, u] + C[u, bu, u] + C[u, u, bu]).ravel()
        rhs = value - model.intercept * a - off
        _set_core(model, gram, rhs, reg_core)
        c = model.core.ravel()
        fit = float(c @ gram @ c) - (reg_core + 1e-12) * float(c @ c)  # _set_core added to the diagonal
        return max(self._offset_squares(model) - 2.0 * float(c @ rhs) + fit, 0.0)

    def _offset_squares(self, model):
        """``sum mask (Y - o)^2`` with ``o = intercept + b_0 + b_1 + b_2``, from the values' sums and
        the mask's marginals."""
        mu = model.intercept
        b = [self._bias(model, k) for k in range(3)]
        total = float(self.counts[0].sum())
        yo = mu * float(self.row_sums[0].sum()) + sum(float(b[k] @ self.row_sums[k]) for k in range(3))
        oo = mu * mu * total + sum(2.0 * mu * float(b[k] @ self.counts[k]) + float(b[k] ** 2 @ self.counts[k])
                                   for k in range(3))
        oo += 2.0 * sum(float(b[j] @ C @ b[k]) for (j, k), C in self.pair_counts.items())
        return self.yy - 2.0 * yo + oo


@functools.lru_cache(maxsize=16)
def _kron_index(r, order):
    """Index into the features' product (:class:`TuckerSweep3`) giving the Kronecker Gram
    ``sum (u u^T) (x) (v v^T) (x) ...`` of ``order`` modes: rows and columns ``(p, q, ...)`` in C order,
    indexed as ``C[..., *idx]`` and reshaped to ``(r^order, r^order)``. Mode ``k``'s index is ``(r, r)``
    on axes ``k`` and ``order + k`` and 1 on the others: broadcast by the indexing, where full index
    arrays (``r^(2 order)`` entries each, 400 MB cached at rank 16) cost more than the Gram itself."""
    _, _, where = _pair_index(r)
    return tuple((2 * r + where).reshape([r if a in (k, order + k) else 1 for a in range(2 * order)])
                 for k in range(order))


def _kron_terms(Q, r):
    """From ``Q[i, f, g]`` (features of two modes summed against the mask) the Kronecker Gram, the
    design sums ``sum (u (x) v)`` and the offsets' ``sum (b_u + b_v) (u (x) v)`` per row."""
    rows = len(Q)
    i0, i1 = _kron_index(r, 2)
    K = Q[:, i0, i1].reshape(rows, r * r, r * r)
    a = Q[:, :r, :r].reshape(rows, r * r)
    off = (Q[:, r:2 * r, :r] + Q[:, :r, r:2 * r]).reshape(rows, r * r)
    return K, a, off


def _grid_gradient_statistics(model: Model, grid: DenseGrid, Yg, counts, clip_norm):
    """:func:`clipped_gradient` and the per-row sums of :func:`gradient_descent` on the dense layout.

    Returns ``(grams, sums, core_gram, ssr)``: every mode's Gauss-Newton matrices and summed
    clipped gradients (negated), the core's (Tucker), and the residuals' sum of squares. Each
    entry's squared design norm is a sum over modes of a function of the other modes' indices
    (plus, for Tucker, a product over modes), so it is formed on the grid by broadcasting.
    """
    d = len(model.factors)
    designs = [grid_design(model, m) for m in range(d)]
    U0 = model.factors[0]
    b = _row_bias(model, 0)
    A = np.hstack([U0, np.ones((len(U0), 1)), (b if b is not None else np.zeros(len(U0)))[:, None]])
    B = np.hstack([designs[0], _grid_offsets(model, 0)[:, None], np.ones((len(designs[0]), 1))])
    resid = Yg - (A @ B.T).reshape(grid.shape)
    resid *= grid.mask
    ssr = float(np.vdot(resid, resid))
    weights = resid
    if clip_norm is not None and np.isfinite(clip_norm):
        sq = np.zeros(grid.shape)
        for m, Z in enumerate(designs):
            sq += np.expand_dims(np.einsum("cr,cr->c", Z, Z).reshape(grid.shape[:m] + grid.shape[m + 1:]), m)
        if model.core is not None:
            rows = np.ones(grid.shape)
            for m, U in enumerate(model.factors):
                rows = rows * np.einsum("ir,ir->i", U, U).reshape([-1 if k == m else 1 for k in range(d)])
            sq += rows
        norm = np.abs(resid) * np.sqrt(sq)
        weights = resid * np.minimum(1.0, clip_norm / np.maximum(norm, 1e-300))
    grams, sums = [], []
    for m, Z in enumerate(designs):
        gram, rhs = grid.normal_equations(m, Z, weights, counts[m])
        grams.append(gram)
        sums.append(rhs)
    core_gram = None
    if model.core is not None:
        core_gram, core_sum = _grid_core_normal_equations(model, grid, weights)
        sums.append(core_sum.reshape(model.core.shape))
    return grams, sums, core_gram, ssr


def als(obs: Observations, y: np.ndarray, model: Model, *, reg, reg_core, n_iter, tol=1e-10,
        fit_biases=True, prior_var=None, warmup=5, history=None, callback=None):
    """Alternating least squares over the observed entries only, in place on ``model``.

    Mode by mode, every row solves its own ridge regression of the residual on the leave-one-out
    design ``K_m`` (plus a constant column for the row's bias when ``fit_biases``). The entries are
    kept sorted by each mode (:class:`ModeLayout`), so the per-row normal equations of all rows are
    a few contiguous products and one ``reduceat``, solved as one stacked ``np.linalg.solve``:
    ``O(|Omega| p^2)`` flops per mode with ``p = rank + 1``, no Python loop over rows or entries.
    Tucker then solves the core's ridge regression on the Kronecker rows. Stops when the
    objective's relative decrease falls below ``tol``. Appends the training RMSE of each sweep to
    ``history`` when given; ``callback(sweep, rmse)`` is called after each sweep.
    """
    d, r = obs.order, model.rank
    grid = obs.grid(model, als=True)
    if grid is None:
        layouts = [obs.layout(m) for m in range(d)]
        ys = [y[L.perm] for L in layouts]
    else:
        Yg = grid.scatter(y)
        tucker3 = TuckerSweep3(grid, Yg, obs.counts) if model.core is not None and d == 3 else None
        value_sums = grid_value_sums(grid, Yg, obs.counts[0]) if model.core is not None and tucker3 is None else None
    prev, mse = np.inf, None
    reg0, reg_core0 = reg, reg_core
    for sweep in range(n_iter):
        if prior_var is not None and sweep >= warmup and mse is not None:
            # Empirical Bayes: ridge = residual variance / prior variance of a parameter.
            reg, reg_core = reg0 + mse / prior_var, reg_core0 + mse / prior_var
        for m in range(d):
            if m in model.fixed:  # no factor to fit: only the row effects, by their own ridge
                if fit_biases:  # (a model with fixed modes always runs on the sparse layout)
                    L = layouts[m]
                    base = ys[m] - _offsets_sorted(model, L) - _interaction_sorted(model, L, m)
                    model.biases[m] = (model.biases[m] * L.counts
                                       + L.segment_sum(base[None])[:, 0]) / (L.counts + reg + 1e-12)
                continue
            if grid is None:
                L = layouts[m]
                Kt = mode_design(model, L, m)
                base = ys[m] - _offsets_sorted(model, L, skip=m if fit_biases else None)
                gram, rhs = L.normal_equations(Kt, base, bias=fit_biases)
            elif tucker3 is not None:
                gram, rhs = tucker3.normal_equations(model, m, fit_biases)
            else:
                gram, rhs = grid.normal_equations(m, grid_design(model, m), Yg, obs.counts[m],
                                                  _grid_offsets(model, m),
                                                  None if fit_biases else _row_bias(model, m), bias=fit_biases)
            p = gram.shape[1]
            gram[:, np.arange(p), np.arange(p)] += reg + 1e-12
            sol = _ridge_solve(gram, rhs[:, :, None])[:, :, 0]
            model.factors[m] = sol[:, :r]
            if fit_biases:
                model.biases[m] = sol[:, r]
        if model.core is not None:
            if grid is None:
                ssr = _tucker_core_step(model, layouts[0], ys[0], reg_core)
            elif tucker3 is not None:
                ssr = tucker3.core_step(model, reg_core)
            else:
                ssr = _grid_core_step(model, grid, Yg, reg_core, value_sums)
        elif grid is None:
            L = layouts[d - 1]
            resid = ys[-1] - _offsets_sorted(model, L) - _interaction_sorted(model, L, d - 1)
            ssr = float(resid @ resid)
        else:
            ssr = _grid_ssr(grid, Yg, model, grid_design(model, 0))
        mse = ssr / len(y)
        loss = 0.5 * ssr + 0.5 * reg * sum(np.sum(model.factors[m] ** 2) for m in model.free_modes())
        if model.core is not None:
            loss += 0.5 * reg_core * np.sum(model.core**2)
        if history is not None:
            history.append(float(np.sqrt(mse)))
        if callback is not None:
            callback(sweep, float(np.sqrt(mse)))
        if abs(prev - loss) <= tol * max(prev, 1e-300) and sweep > warmup:
            break
        prev = loss
    return model


# ----------------------------------------------------------------------------- gradients
def clipped_gradient(model: Model, X: np.ndarray, resid: np.ndarray, clip_norm, design=None):
    """Per-entry gradients of ``1/2 resid^2``, clipped jointly over all parameters, and their sums.

    Entry ``e``'s gradient is ``-resid[e] v_e`` with ``v_e`` the stacked designs ``K_m[e]`` of every
    mode (and, for Tucker, the Kronecker product of its rows for the core): a fixed direction times
    the residual. Its joint l2 norm is ``|resid[e]| ||v_e||``; clipping to ``clip_norm`` scales the
    residual by ``min(1, clip_norm / (|resid[e]| ||v_e||))``. Returns ``(weights, K, R)`` where
    ``weights[e]`` is the clipped residual: the gradient sums are ``-S_m (weights * K_m)`` for the
    factors and ``-sum_e weights[e] kr_e`` for the core.
    """
    R, K = interaction_design(model, X) if design is None else design
    # Fixed modes (all-ones factors) have no parameters, hence no gradient.
    sq = sum(np.einsum("er,er->e", K[m], K[m]) for m in model.free_modes())
    if model.core is not None:
        sq = sq + np.prod([np.einsum("er,er->e", r, r) for r in R], axis=0)
    weights = resid
    if clip_norm is not None and np.isfinite(clip_norm):
        norm = np.abs(resid) * np.sqrt(sq)
        weights = resid * np.minimum(1.0, clip_norm / np.maximum(norm, 1e-300))
    return weights, K, R


def gradient_descent(obs: Observations, y: np.ndarray, model: Model, *, learning_rate, n_iter, reg,
                     reg_core, clip_norm=None, noise_multiplier=0.0, damping=0.0, rng=None, history=None,
                     callback=None):
    """(DP) full-batch gradient descent over every factor and the core, in place on ``model``.

    Each step: the clipped per-entry gradients are summed per row (one sparse product per mode)
    and over all entries for the core; ``N(0, (noise_multiplier * 2 clip_norm)^2)`` is added to
    every coordinate of every sum (rows without entries excepted: their sum is 0 whatever the data),
    since one entry's clipped gradient (norm ``<= clip_norm``) moves all these sums together by at
    most ``2 clip_norm`` in l2; then each row moves by
    ``-learning_rate * (H_i + damping I)^{-1} (noisy sum + reg u_i)`` where
    ``H_i = sum_{e in row i} K_m[e] K_m[e]^T + reg I`` is a Gauss-Newton preconditioner. ``H_i``
    depends only on Omega and on parameters already released, so it is public: using it is
    post-processing, and ``damping`` (public too) shrinks noisy rows with few entries. All modes
    move at once from the same noisy gradient, so one step is one Gaussian release
    (:func:`~dptensor.mechanisms.joint_gaussian_release` of all the sums together).
    The biases (offsets) stay fixed.
    """
    d = obs.order
    X = obs.X
    noisy = noise_multiplier > 0
    if noisy and clip_norm is None:
        raise ValueError("noise_multiplier > 0 needs clip_norm: it sets the sensitivity")
    grid = obs.grid(model)
    if grid is not None:
        Yg = grid.scatter(y)
    free = model.free_modes()  # a mode without a factor has no gradient (never on the grid)
    rounding = gradient_rounding(obs, model, clip_norm) if noisy else None
    for step in range(n_iter):
        if grid is None:
            base = y - offsets(model, X)
            design = interaction_design(model, X)
            resid = base - np.einsum("er,er->e", design[0][0], design[1][0])
            ssr = float(resid @ resid)
            w, K, R = clipped_gradient(model, X, resid, clip_norm, design=design)
            # The per-row gradient sums and Gauss-Newton matrices in one pass over the entries sorted
            # by mode m (as in ALS): rhs = sum_e K_m[e] w_e = -gradient; then the core's.
            grams, sums = [], []
            for m in free:
                L = obs.layout(m)
                gram, rhs = L.normal_equations(mode_design(model, L, m), w[L.perm])
                grams.append(gram)
                sums.append(rhs)
            if model.core is not None:
                L = obs.layout(0)
                core_gram, core_sum = _core_normal_equations(model, L, w[L.perm])
                sums.append(core_sum.reshape(model.core.shape))
        else:
            grams, sums, core_gram, ssr = _grid_gradient_statistics(model, grid, Yg, obs.counts, clip_norm)
        rmse = math.sqrt(ssr / len(y))
        if history is not None:
            history.append(rmse)
        nf = len(free)
        if noisy:  # one release of every sum of the step (the rows that hold an entry, and the core)
            seen = [obs.counts[m] > 0 for m in free]
            released = joint_gaussian_release([sums[j][seen[j]] for j in range(nf)] + sums[nf:],
                                              2.0 * clip_norm, noise_multiplier, rng,
                                              rounding=rounding)
            for j in range(nf):
                sums[j][seen[j]] = released[j]
            sums[nf:] = released[nf:]
        new = list(model.factors)
        for j, m in enumerate(free):
            U, gram = model.factors[m], grams[j]
            r = U.shape[1]
            grad = -sums[j] + reg * U
            gram[:, np.arange(r), np.arange(r)] += reg + damping + 1e-12
            new[m] = U - learning_rate * np.linalg.solve(gram, grad[:, :, None])[:, :, 0]
        if model.core is not None:
            grad = -sums[nf] + reg_core * model.core
            gram = core_gram
            gram[np.diag_indices_from(gram)] += reg_core + damping + 1e-12
            core_step = np.linalg.solve(gram, grad.ravel()).reshape(grad.shape)
            model.core = model.core - learning_rate * core_step
        model.factors = new
        if callback is not None:
            # The training loss is passed on only when it is recorded (non-private fits).
            callback(step, rmse if history is not None else None)
    if history is not None:
        history.append(float(np.sqrt(np.mean((y - predict(model, X))**2))))
    return model


def gradient_rounding(obs: Observations, model: Model, clip_norm) -> Rounding:
    """The rounding of a DP gradient step's joint release: each entry's clipped gradient has norm
    at most ``clip_norm`` over every sum together; a row's sum has at most its count of summands,
    the Tucker core's every entry's, and on the dense layout the core's partial sums over mode 0
    are multiplied by the other modes' rows, one product per mode."""
    longest = max(int(obs.counts[m].max()) for m in model.free_modes())
    if model.core is None:
        return entry_rounding(len(obs.X), clip_norm, longest)
    return entry_rounding(len(obs.X), clip_norm, max(longest, len(obs.X)), later=obs.order - 1)


# ----------------------------------------------------------------------------- DP-ALS
def clip_designs(Kt, quantile, counts=None):
    """Scale every entry's design ``Kt[:, e]`` to l2 norm at most ``C``, the ``quantile`` of the norms.

    The designs depend only on Omega and released factors, so ``C`` is public; returns
    ``(clipped Kt, C)``. ``C`` bounds how far one value moves the right-hand side of its row.
    With ``counts`` the columns of ``Kt`` are the columns of an unfolding (:class:`DenseGrid`),
    each the design of ``counts[c]`` entries: ``C`` is the same quantile over the entries.
    """
    norms = np.sqrt(np.einsum("re,re->e", Kt, Kt))
    per_entry = norms if counts is None else np.repeat(norms, counts)
    bound = float(np.quantile(per_entry, quantile)) if quantile < 1 else float(per_entry.max())
    bound = max(bound, 1e-12)
    return Kt * np.minimum(1.0, bound / np.maximum(norms, 1e-300)), bound


def wiener_solve(gram, rhs, noise_var, counts, s2, floor=False):
    """Empirical-Bayes (Wiener) solution of every row's noisy normal equations.

    Row ``i`` observed ``b_i = G_i u_i + K_i^T eps + xi`` with ``G_i`` public, residual noise
    ``eps ~ (0, s2)`` per entry and release noise ``xi ~ N(0, noise_var I)``. With the prior
    ``u_i ~ (0, tau^2 I)``, in the eigenbasis ``G_i = V diag(g) V^T`` each coordinate ``c = v^T b_i``
    has second moment ``tau^2 g^2 + s2 g + noise_var`` and the posterior mean of ``v^T u_i`` is
    ``tau^2 g c / (tau^2 g^2 + s2 g + noise_var)``. ``s2`` is given (the released residual scale:
    ``g`` varies too little across rows to tell ``g`` from ``g^2``); ``tau^2`` is fitted across all
    rows and directions by weighted least squares on ``c^2 - noise_var - s2 g`` (released sums and
    public Grams only: post-processing). Rows without entries get 0.

    ``floor``: an intermediate solve only sets the next designs' directions, so ``tau^2`` is kept
    at least at the noise level of a typical direction rather than letting every row collapse to 0.
    Otherwise (the final solve, whose values are predicted with) ``tau^2`` is taken two standard
    errors low, so that a release swamped by noise shrinks to 0.
    """
    seen = counts > 0
    out = np.zeros_like(rhs)
    if not seen.any():
        return out
    g, V = np.linalg.eigh(gram[seen])
    g = np.maximum(g, 0.0)
    c = np.einsum("ipq,ip->iq", V, rhs[seen])
    tau2 = _fit_signal_variance(g.ravel(), c.ravel() ** 2, noise_var, s2, n_se=0.0 if floor else 2.0)
    if floor:
        tau2 = max(tau2, noise_var / max(float(np.median(g)) ** 2, 1e-300))
    gain = tau2 * g / (tau2 * g**2 + s2 * g + noise_var + 1e-300)
    out[seen] = np.einsum("ipq,iq->ip", V, gain * c)
    return out


def _fit_signal_variance(g, c2, noise_var, s2, n_se=0.0):
    """``tau^2 >= 0`` from ``E c^2 = tau^2 g^2 + s2 g + noise_var`` by weighted least squares,
    the weights (inverse squared second moments) refitted twice from the previous fit, then
    lowered by ``n_se`` (sandwich) standard errors: with little data a pure-noise release can fit a
    positive ``tau^2`` by chance, and a final solve should rather fall back to 0 (offsets only)."""
    t = c2 - noise_var - s2 * g
    tau2 = 0.0
    # 1e-150 keeps the squared second moments finite in noise-free directions with g = 0
    w = 1.0 / np.maximum(g**2 + s2 * g + noise_var, 1e-150) ** 2
    for _ in range(3):
        tau2 = max(float(np.sum(w * g**2 * t) / max(np.sum(w * g**4), 1e-300)), 0.0)
        w = 1.0 / np.maximum(tau2 * g**2 + s2 * g + noise_var, 1e-150) ** 2
    if n_se:
        den = max(float(np.sum(w * g**4)), 1e-300)
        se = math.sqrt(float(np.sum((w * g**2 * (t - tau2 * g**2)) ** 2))) / den
        tau2 = max(tau2 - n_se * se, 0.0)
    return tau2


def _balance(model: Model, m: int):
    """Give every column of the factors other than ``m`` unit root-mean-square (public factors).

    The mode-``m`` solve then sees components on one scale, which its isotropic prior assumes;
    the column scales move into mode ``m``, which the solve replaces, so this changes nothing else.
    """
    for k, U in enumerate(model.factors):
        if k != m and k not in model.fixed:
            rms = np.sqrt(np.mean(U * U, axis=0))
            model.factors[k] = U / np.where(rms > 0, rms, 1.0)


def dp_als(obs: Observations, y: np.ndarray, model: Model, *, n_iter, noise_multiplier, rng, s2,
           design_quantile=0.9, clip=0.5, callback=None):
    """DP alternating least squares on CP factors (the offsets stay at their released values).

    Each half-sweep (one mode) releases every row's right-hand side ``b_i = sum_{e in row i}
    K~_e (y_e - offsets_e)`` with ``N(0, (z C)^2)`` on each coordinate, where ``K~_e`` is the
    entry's design clipped to norm ``C`` (:func:`clip_designs`). One value moves one row's ``b_i``
    by at most ``C`` (values span 1 in scaled units), so the half-sweep is one Gaussian release of
    multiplier ``z`` (parallel composition across rows). The Grams ``sum K~_e K~_e^T`` depend
    only on Omega and released factors: public. Each row is then solved by
    :func:`wiener_solve` (post-processing). ``callback(sweep)`` is called after each sweep with
    nothing data-dependent.
    """
    if model.core is not None:
        raise ValueError("dp_als fits CP models")
    d = obs.order
    free = model.free_modes()
    grid = obs.grid(model)
    if grid is None:
        layouts = {m: obs.layout(m) for m in free}
    else:  # the clipped residuals on the grid (the offsets stay fixed): the same per-entry values
        base_grid = grid.scatter(np.clip(y - offsets(model, obs.X), -clip, clip))
    for sweep in range(n_iter):
        for m in free:
            _balance(model, m)
            if grid is None:
                L = layouts[m]
                Kt, bound = clip_designs(mode_design(model, L, m), design_quantile)
                base = np.clip(y[L.perm] - _offsets_sorted(model, L), -clip, clip)
                gram, rhs = L.normal_equations(Kt, base)
            else:
                Kt, bound = clip_designs(grid_design(model, m).T, design_quantile, grid.column_counts(m))
                gram, rhs = grid.normal_equations(m, Kt.T, base_grid, obs.counts[m])
            sens = bound * min(1.0, 2.0 * clip)
            std = noise_multiplier * sens
            if std > 0:  # each entry adds its design (norm <= bound) times its value (<= clip)
                rounding = entry_rounding(len(y), bound * clip, obs.counts[m].max())
                rhs = release_rows(rhs, obs.counts[m] > 0, lambda v: gaussian_release(
                    v, sens, noise_multiplier, rng, rounding=rounding))
            last = sweep == n_iter - 1 and m == free[-1]
            model.factors[m] = wiener_solve(gram, rhs, std**2, obs.counts[m], s2, floor=not last)
        if callback is not None:
            callback(sweep)
    return model


def residual_scale(obs: Observations, y: np.ndarray, model: Model, *, noise: OffsetNoise | None, rng,
                   index=-1, bound=0.5):
    """A released root-mean-square of the residuals after the offsets, to set the clipping level.

    Releases ``sum_e min(t_e^2, bound^2)`` with ``t_e = y_e - offsets_e`` (offsets released, so
    constants) as release ``index`` of ``noise`` (``None``: no noise): each term lies in
    ``[0, bound^2]``, so one value moves the sum by at most ``bound^2``, in l1 and l2. Returns
    ``sqrt(max(noisy sum, 0) / n)``.
    """
    t = np.minimum((y - offsets(model, obs.X)) ** 2, bound**2)
    total = float(t.sum())
    if noise is not None:
        rounding = entry_rounding(len(y), bound**2, len(y))
        total = float(noise.release(index, total, bound**2, rng, rounding=rounding))
    return math.sqrt(max(total, 0.0) / len(y))


def unfolding_columns(obs: Observations, m: int, others=None):
    """Column of every entry in the mode-``m`` unfolding (only the columns that hold an entry are
    numbered) and the number of entries in each column: both public (functions of Omega).
    ``others``: the modes that index the columns (default: every mode but ``m``)."""
    others = [k for k in range(obs.order) if k != m] if others is None else list(others)
    dims = [obs.shape[k] for k in others]
    if math.prod(dims) < 2**62:  # one integer per column: the fast way
        cols = np.ravel_multi_index(tuple(obs.X[:, k] for k in others), dims)
    else:  # more columns than an int64 numbers (many modes): the index tuples themselves
        cols = obs.X[:, others]
    _, col_id, col_counts = np.unique(cols, axis=0, return_inverse=True, return_counts=True)
    return col_id.ravel(), col_counts


def _first_per_group(group, k):
    """Mask keeping the first ``k`` entries (in index order) of every group: public (Omega only)."""
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.searchsorted(sorted_groups, sorted_groups, side="left")
    keep = np.zeros(len(group), dtype=bool)
    keep[order] = (np.arange(len(group)) - starts) < k
    return keep


def unfolding_gram(obs: Observations, t: np.ndarray, m: int, clip, cap=None, others=None):
    """``(M, Delta)``: the off-diagonal Gram ``Y Y^T`` of the mode-``m`` unfolding of the clipped
    values ``clip(t, -clip, clip)`` and the l2 sensitivity of its upper triangle.

    ``cap`` keeps only the first ``cap`` entries (in index order, a function of Omega only) of
    every column: the sensitivity grows with the fullest column, ``Delta = D clip sqrt(n_col - 1)``
    with ``D = min(1, 2 clip)`` (how far one value moves its clipped value) and ``n_col`` the
    largest number of kept entries in a column; the diagonal is zeroed (not released).

    Several entries can share a cell (row, column): a position observed twice, or, with ``others``
    (a subset of the other modes, those with a factor), entries that differ only in the other
    modes. Only the first of each cell (index order, public) is kept, so every cell holds one
    clipped value, at most ``clip`` in size, and the bound holds (summed, a cell could hold
    ``2 clip`` and move the release by twice as much).
    """
    col_id, col_counts = unfolding_columns(obs, m, others)
    keep = _first_per_group(col_id * obs.shape[m] + obs.X[:, m], 1)
    col_counts = np.bincount(col_id[keep], minlength=len(col_counts))
    if cap is not None:
        keep &= _first_per_group(np.where(keep, col_id, -1), cap)
        col_counts = np.minimum(col_counts, cap)
    tc = np.clip(t[keep], -clip, clip)
    Y = sp.csr_array((tc, (obs.X[keep, m], col_id[keep])), shape=(obs.shape[m], len(col_counts)))
    M = (Y @ Y.T).toarray()
    np.fill_diagonal(M, 0.0)
    sens = min(1.0, 2.0 * clip) * clip * math.sqrt(max(int(col_counts.max()) - 1, 1))
    return M, sens


def gram_rounding(obs: Observations, m: int, clip) -> Rounding:
    """The rounding of :func:`unfolding_gram`'s upper triangle: ``M_ij`` is a dot product over the
    columns rows ``i`` and ``j`` share (at most the larger row count), and in the Frobenius norm
    ``sum_c ||y_c y_c^T|| = sum_c ||y_c||^2 <= clip^2`` per kept entry, at most every entry."""
    return entry_rounding(len(obs.X), clip**2, obs.counts[m].max())


def projected_statistics(obs: Observations, t: np.ndarray, bases, design_quantile=0.9, lead=0,
                         model=None, kron=True):
    """Mode-``lead`` normal equations on the designs ``kron(V_k[e_k], k != lead)`` (the released
    bases; with ``kron=False`` their elementwise product, a CP design of ``rank`` columns), clipped
    to their public bound ``C``: ``(grams, rhs, C)``.
    One value of ``t`` moves one row's right-hand side by at most its change times ``C``."""
    grid = obs.grid(model) if lead == 0 else None
    if grid is not None:
        Kt, bound = clip_designs(_grid_rows(bases[1:], kron=kron).T, design_quantile,
                                 grid.column_counts(0))
        gram, rhs = grid.normal_equations(0, Kt.T, grid.scatter(t), obs.counts[0])
        return gram, rhs, bound
    L = obs.layout(lead)
    rows = [np.take(bases[k], L.index[k], axis=0) for k in range(obs.order) if k != lead]
    if kron:
        Kt = _khatri_rao_rows(rows).T
    else:  # a fixed mode's basis has one column: it broadcasts
        Kt = functools.reduce(np.multiply, rows).T
    Kt, bound = clip_designs(np.ascontiguousarray(Kt), design_quantile)
    gram, rhs = L.normal_equations(Kt, t[L.perm])
    return gram, rhs, bound


#: The Kronecker designs of :func:`spectral_start` (and the small CP after them) are used while
#: their largest arrays hold at most this many floats (1 GiB); past it, with many modes, the CP
#: design of ``rank`` columns (see :func:`kronecker_start`).
SPECTRAL_MAX_FLOATS = 1 << 27


def _kron_widths(shape, rank, lead, fixed):
    """The columns of each other mode's basis in :func:`spectral_start` (a fixed mode: one)."""
    return [1 if k in fixed else rank for k in range(len(shape)) if k != lead]


def kronecker_start(n_obs, shape, rank, lead, fixed=()):
    """Whether :func:`spectral_start` projects on Kronecker designs: their per-entry terms
    (``p (p + 1) / 2 + p`` for ``p = prod`` of the bases' widths), the lead's Grams and the small
    CP's cells fit in ``SPECTRAL_MAX_FLOATS``. Public: the number of entries, shape, rank, modes."""
    return spectral_floats(n_obs, shape, rank, lead, fixed, kron=True) <= SPECTRAL_MAX_FLOATS


def spectral_floats(n_obs, shape, rank, lead, fixed=(), kron=True):
    """Floats held at the peak of :func:`spectral_start`'s projected step and small CP (an upper
    bound, from public quantities)."""
    d = len(shape)
    p = math.prod(_kron_widths(shape, rank, lead, fixed)) if kron else rank
    terms = p * (p + 1) // 2 + 3 * p + 2
    n_lead = shape[lead]
    step = (terms + p + 4) * n_obs + n_lead * (terms + 5 * p * p + 4 * p)
    if not kron:
        return step
    cells = n_lead * p  # the small CP: ALS on every cell of W, order d
    return step + cells * ((d + 3) * d + rank * (rank + 1) // 2 + 4 * rank + 8)


def spectral_start(obs: Observations, y: np.ndarray, model: Model, *, noise_multiplier, rng, clip, s2,
                   gram_clip=None, column_cap=None, design_quantile=0.9, n_inner=50,
                   gram_noise_multiplier=None):
    """Private warm start for CP: noisy spectral subspaces, one noisy projected step, a small CP.

    With ``t_e = y_e - offsets_e`` (offsets released, so one value moves ``t_e`` by at most 1);
    "mode 0" below is the first mode with a factor (``lead``), and a fixed mode's basis is the
    public constant vector (its factor stays all ones; the scales move into the lead's factor):

    1. For each mode ``m >= 1``: release the upper triangle of :func:`unfolding_gram` (values
       clipped to ``gram_clip``, columns capped at ``column_cap`` times their mean count) plus
       ``N(0, (z Delta_m)^2)`` per coordinate, mirrored. ``V_m`` = top ``rank`` eigenvectors.
    2. Mode 0: every row's right-hand side on the designs ``kron(V_1[e_1], ..., V_{d-1}[e_{d-1}])``
       clipped to norm ``C`` (:func:`clip_designs`), with ``clip(t_e, -clip, clip)``, plus
       ``N(0, (z D C)^2)``, ``D = min(1, 2 clip)``: one release, solved per row by
       :func:`wiener_solve` into ``W`` (n_0 x rank^(d-1)): the tensor in the bases V.
    3. Post-processing: a CP of the small dense ``W`` (non-private ALS on released values, the best
       fit of ``N_RESTARTS`` random starts) gives ``U_0`` and ``B_m``; ``U_m = V_m B_m``.

    With many modes the designs of step 2 have ``rank^(d-1)`` columns and ``W`` as many per row:
    when :func:`kronecker_start` says they would not fit in ``SPECTRAL_MAX_FLOATS`` (public
    quantities only), step 2 uses the elementwise products of the bases instead (a CP design of
    ``rank`` columns: the same release, the same sensitivity) and step 3 is skipped: ``U_0`` is
    the solve and ``U_m = V_m``, left to the sweeps to align.

    That is one Gaussian release per mode with a factor. Returns the sensitivities (for tests).
    """
    d, r = obs.order, model.rank
    lead = model.free_modes()[0]
    others = [k for k in range(d) if k != lead]
    D = min(1.0, 2.0 * clip)
    resid = y - offsets(model, obs.X)
    t = np.clip(resid, -clip, clip)
    gram_clip = clip if gram_clip is None else gram_clip
    bases, used = [None] * d, []
    for m in others:
        if m in model.fixed:  # one public direction: padding it with zero columns would only add
            bases[m] = np.full((obs.shape[m], 1), 1.0 / math.sqrt(obs.shape[m]))  # null directions
            continue
        cap = None
        free_others = [k for k in model.free_modes() if k != m]  # fixed modes index no column
        if column_cap is not None:
            counts = unfolding_columns(obs, m, free_others)[1]
            cap = max(2, math.ceil(column_cap * len(resid) / len(counts)))
        M, sens = unfolding_gram(obs, resid, m, gram_clip, cap, others=free_others)
        z_g = noise_multiplier if gram_noise_multiplier is None else gram_noise_multiplier
        if z_g > 0:  # one release of the strict upper triangle (the diagonal is 0, not released), mirrored
            iu = np.triu_indices(M.shape[0], 1)
            upper = gaussian_release(M[iu], sens, z_g, rng,
                                     rounding=gram_rounding(obs, m, gram_clip))
            M = np.zeros_like(M)
            M[iu] = upper
            M += M.T
        vals, vecs = np.linalg.eigh(M)
        top = vecs[:, np.argsort(vals)[::-1][:r]]
        # a mode with fewer rows than the rank: the missing directions are 0
        bases[m] = np.hstack([top, np.zeros((top.shape[0], r - top.shape[1]))])
        used.append(sens)
    kron = kronecker_start(len(y), obs.shape, r, lead, model.fixed)
    gram, rhs, bound = projected_statistics(obs, t, bases, design_quantile, lead, model, kron=kron)
    std = noise_multiplier * D * bound
    counts = obs.counts[lead]
    if std > 0:  # each entry adds its design (norm <= bound) times its value (<= clip)
        rounding = entry_rounding(len(y), bound * clip, counts.max())
        rhs = release_rows(rhs, counts > 0, lambda v: gaussian_release(
            v, D * bound, noise_multiplier, rng, rounding=rounding))
    used.append(D * bound)
    W = wiener_solve(gram, rhs, std**2, counts, s2, floor=True)
    if not kron:  # W holds the lead's factor in the bases' columns (post-processing from here)
        model.factors[lead] = W
        for k in others:
            if k in model.fixed:  # its constant basis 1/sqrt(n_k): the scale moves into the lead
                model.factors[lead] = model.factors[lead] * bases[k][0, 0]
            else:
                model.factors[k] = bases[k]
        return used
    small_shape = (obs.shape[lead],) + tuple(bases[k].shape[1] for k in others)
    cells = Observations(np.stack(np.unravel_index(np.arange(W.size), small_shape), axis=1), small_shape)
    small, best = None, np.inf
    for _ in range(N_RESTARTS):  # CP-ALS has local optima; on released values restarts are free
        trial = init_model(small_shape, r, "cp", rng, scale=0.1)
        history = []
        try:
            with np.errstate(all="ignore"):
                als(cells, W.ravel(), trial, reg=1e-6, reg_core=0.0, n_iter=n_inner, fit_biases=False,
                    tol=1e-10, history=history)
        except np.linalg.LinAlgError:  # a degenerate restart (tiny data): the next one may not be
            continue
        if history and np.isfinite(history[-1]) and history[-1] < best:
            small, best = trial, history[-1]
    if small is None:  # every restart degenerate: keep the data-independent start (post-processing)
        return used
    model.factors[lead] = small.factors[0]
    for j, k in enumerate(others, start=1):
        B = bases[k] @ small.factors[j]
        if k in model.fixed:  # B's rows are all B[0] (a constant basis): keep ones, move the scales
            model.factors[lead] = model.factors[lead] * B[0]
        else:
            model.factors[k] = B
    return used


def _grid_cells(n_obs, shape, tucker, als):
    """The cells of the dense layout when :meth:`Observations.grid` may choose it, else 0."""
    ratio = (DENSE_RATIO_TUCKER_ALS if als else DENSE_RATIO_TUCKER) if tucker else DENSE_RATIO
    cells = math.prod(shape)
    return cells if cells <= min(ratio * n_obs, DENSE_MAX_CELLS) else 0


def fit_floats(n_obs, shape, rank, *, tucker, mode, fixed=()):
    """Floats (8 bytes each) a completion fit holds at its peak: an upper bound from public
    quantities only (the number of entries, the shape, the rank, the model and the solver).

    ``mode``: ``"als"``, ``"gd"``, ``"statistics"`` (DP-ALS with its spectral start) or
    ``"implicit"``. Every term is the size of an array the path forms, with the largest of its
    temporaries: the entries sorted by each mode, the per-entry terms of one mode's normal
    equations (``rank (rank + 1) / 2`` products and the design), the rows' Grams and solves, a
    few grid arrays when the dense layout may be chosen, the Tucker core's Gram, the spectral
    start's unfolding Grams (``n_m^2`` per mode) and its projected step.
    """
    d, n, r = len(shape), n_obs, rank
    free = [m for m in range(d) if m not in fixed]
    rows = max(shape)
    total = 8 * n + 2 * sum(shape) + d * (d + 3) * n  # values, counts, the sorted layouts
    terms = r * (r + 1) // 2 + 4 * r + 4  # one mode's per-entry terms, its design and residuals
    solve = rows * (r + 1) * (r + 1) * 6  # the rows' Grams, their copies and solves
    if mode == "implicit":
        dim = sum(shape[m] for m in free) * r
        return total + n * (2 * r + 8) + dim * (min(LANCZOS_MAXITER, dim) + 3 * TOP_DIRECTIONS + 32)
    if tucker:  # the designs of every mode, the core's Kronecker rows (in blocks) and Gram
        width = r ** d
        total += 3 * d * n * r + 2 * min(_CHUNK, n * width) + 3 * width * width + n * terms
    elif mode == "gd":  # every mode's gathered rows and designs, and the clipped gradients
        total += 5 * d * n * r + 8 * n
    else:
        total += n * terms
    total += solve
    cells = _grid_cells(n, shape, tucker, mode != "gd")
    if cells:  # the mask, the values, a residual grid, and one product's columns of a mode
        columns = max(cells // shape[m] for m in range(d))
        total += 6 * cells + columns * (terms + (r**d if tucker else 0))
    if mode == "statistics":
        lead = free[0]
        grams = max((shape[m] ** 2 * 7 for m in free if m != lead), default=0)  # with eigh's copy
        kron = kronecker_start(n, shape, r, lead, fixed)
        total += grams + spectral_floats(n, shape, r, lead, fixed, kron=kron)
    return total
