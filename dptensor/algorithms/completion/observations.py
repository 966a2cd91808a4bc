"""The observed positions (Omega) and their two layouts: per-mode sorted entries
(:class:`ModeLayout`) or the dense grid (:class:`DenseGrid`), chosen from public quantities.

Every per-row sum runs over the observed entries in one of the two layouts, which give the same
sums to rounding (see the package doc). Also the index checks of completion data.
"""
from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ..._guards import warn
from ..._memory import FLOAT, check_fits
from ...exceptions import integer_scalar
from .grid_counts import entry_counts, grid_positions
from .implicit import ImplicitDesign
from .model import Model


#: The dense layout (:class:`DenseGrid`) is used up to this many grid cells per observed entry
#: (CP; its ALS of order 3 ``DENSE_RATIO_CP_ALS3``; Tucker: ``DENSE_RATIO_TUCKER``, its ALS
#: ``DENSE_RATIO_TUCKER_ALS``; :func:`dense_ratio`). Measured at 100^3
#: rank 3 (one thread), one ALS sweep on the grid costs about 0.010 s (CP) and 0.0054 s (Tucker,
#: :class:`TuckerSweep3`) whatever the number of entries, the sparse layout's sweep as much at
#: about 1.2e5 (CP) and 2.5e4 (Tucker) entries (at 32^4, 0.021 s and 3e4); a Tucker gradient
#: step (0.032 s on the grid) as much at about 6e4. (Measured before the order-3 Tucker sweep
#: ran its passes over the entries where few cells are observed, ``tucker.SPARSE_PASS_RATIO``:
#: cheaper still on the grid there, so the Tucker ALS ratio errs towards the sparse layout.)
DENSE_RATIO = 8


DENSE_RATIO_TUCKER = 16


DENSE_RATIO_TUCKER_ALS = 32


#: CP ALS of order 3 takes its sums from the Tucker sweep's passes (:class:`~.cp_sweep.CPSweep3`)
#: and is cheaper on the grid to about as few entries: at 100^3 rank 3, 20 sweeps (one thread)
#: the grid took 77, 33 and 40 ms with 10%, 3% and 1.5% of the cells observed, the sorted
#: layouts 194, 51 and 28 ms.
DENSE_RATIO_CP_ALS3 = 32


def dense_ratio(tucker: bool, als: bool, order: int, sweep: bool = True) -> int:
    """Cells per observed entry up to which the grid is the layout for a model of this kind,
    solver and order (the ratios above); ``sweep``: whether an order-3 sweep serves it
    (:func:`sweep_fits`; the memory bound assumes it may)."""
    if tucker:
        return DENSE_RATIO_TUCKER_ALS if als else DENSE_RATIO_TUCKER
    return DENSE_RATIO_CP_ALS3 if als and order == 3 and sweep else DENSE_RATIO


def sweep_fits(shape, rank: int) -> bool:
    """Whether an order-3 sweep (:class:`~.tucker.TuckerSweep3`, :class:`~.cp_sweep.CPSweep3`)
    serves a grid of ``shape`` at ``rank`` within the memory the fit's estimate prices
    (:func:`~.memory.fit_floats`, a few copies of the grid): each mode's per-row sums are
    ``n_m x F x F`` (``F = 2 r + r (r + 1) / 2``, 25 at rank 5), so one long mode beside two
    short ones took up to 3x the estimate (CP, 2 x 2 x 20000 at rank 5; Tucker 1.5x), after
    the spend. Public: the shape and the rank. Elsewhere the grid's own products serve (the
    same sums), and CP ALS takes the grid only as other CP fits do (:func:`dense_ratio`)."""
    F = 2 * rank + rank * (rank + 1) // 2
    return max(shape) * F * F <= math.prod(shape)


#: ... and up to this many cells (a few float64 arrays of this size are held).
DENSE_MAX_CELLS = 1 << 23


def counts_fit(shape):
    """``shape``, refused (before any spend) where the per-row counts of :class:`Observations`
    (two floats for every row of every mode) do not fit in memory: a raw ``MemoryError`` named
    no parameter."""
    check_fits(2 * FLOAT * sum(int(n) for n in shape), "PrivateTensorCompletion.fit",
               "the shape is larger than memory holds a count for each of its rows: pass "
               "shape=None to infer it from the indices, or the shape the data spans")
    return shape


class Observations:
    """The public index set Omega: entries ``X`` (n_obs, order) in a tensor of ``shape``.

    Holds the row counts of every mode and, built on first use, the entries sorted by each mode
    (:class:`ModeLayout`), through which every per-row sum of the solvers goes.
    """

    def __init__(self, X: np.ndarray, shape, layout="auto"):
        # column-major: every pass reads one mode's indices, now contiguous (about 1.5x faster)
        self.X = np.asfortranarray(X)
        self.shape = tuple(int(n) for n in shape)
        self.counts = entry_counts(self.X, self.shape) or [  # compiled, else NumPy's
            np.bincount(self.X[:, m], minlength=n).astype(float) for m, n in enumerate(self.shape)]
        self._layouts, self._designs = {}, {}
        if layout not in ("auto", "dense", "sparse"):
            raise ValueError(f"layout must be 'auto', 'dense' or 'sparse', got {layout!r}")
        self._layout = layout
        self._grid = None

    def grid(self, model: "Model | None" = None, als=False) -> "DenseGrid | None":
        """The dense layout (:class:`DenseGrid`) when it is the faster one for ``model``, else
        ``None``.

        Chosen from public quantities only (the shape, the number of observed entries and the kind
        of model): the grid is used when it has at most ``DENSE_RATIO`` cells per observed entry
        (``DENSE_RATIO_TUCKER`` for Tucker, whose sparse sweeps cost more per entry), at most
        ``DENSE_MAX_CELLS`` cells, and no position is observed twice (the grid holds one value per
        cell). ``layout="dense"`` or ``"sparse"`` forces the choice. A model with modes without a
        factor (``Model.fixed``) runs on the sparse layout. ``als``: the choice for Tucker ALS
        sweeps (:func:`dense_ratio`), cheaper on the grid than gradient steps.
        """
        if self._layout == "sparse":
            return None
        if model is not None and model.fixed:
            if self._layout == "dense":
                raise ValueError("layout='dense' fits models with a factor on every mode")
            return None
        if self._layout == "auto":
            sweep = model is None or sweep_fits(self.shape, model.rank)
            ratio = dense_ratio(model is not None and model.core is not None, als,
                                len(self.shape), sweep)
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
        """The implicit-feedback design of two modes
        (:class:`~dptensor.algorithms.completion.implicit.ImplicitDesign`), built once: a function
        of Omega, so a fit can build it before its spend."""
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
        return np.stack([np.bincount(idx, weights=W[:, j], minlength=n)
                         for j in range(W.shape[1])], axis=1)


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
        """Every row's ``sum_e z_e z_e^T`` ``(n_rows, p, p)`` and ``sum_e z_e base_e``
        ``(n_rows, p)``.

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
    """Upper-triangle pairs ``(ia, ib)`` of ``k`` columns and the ``(k, k)`` map from a pair to its
    position."""
    ia, ib = np.triu_indices(k)
    where = np.empty((k, k), dtype=np.intp)
    where[ia, ib] = where[ib, ia] = np.arange(len(ia))
    return ia, ib, where


def _assemble(pair_sums, rhs_sums, counts, bias_sums=None):
    """Per-row Grams and right-hand sides from the sums of the upper-triangle products
    ``pair_sums`` (rows, r (r + 1) / 2) and of ``z_e base_e`` (rows, r); with ``bias_sums =
    (sum z_e, sum base_e)`` a trailing unknown with a constant 1 in every design (the row's
    bias)."""
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
        fast = grid_positions(X, self.shape)  # compiled: the same integers, one pass
        if fast is not None:
            self.flat, hits, most = fast
        else:
            self.flat = np.ravel_multi_index(tuple(X.T), self.shape)
            hits = np.bincount(self.flat, minlength=math.prod(self.shape))
            most = hits.max()
        self.repeated = bool(most > 1)
        self.mask = hits.astype(float, copy=False).reshape(self.shape)
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


# ----------------------------------------------------------------------------- index tuples
def _positive_int(value, name) -> int:
    # the check of dptensor._validation.check_positive_int, which this layer does not import
    number = integer_scalar(value)
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r}")
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return int(number)


def _check_index_array(X, name):
    """A 2-D array of integer-valued index tuples, at least two columns and one row."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of index tuples (n_obs, order), got shape "
                         f"{X.shape}")
    if X.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 columns (one index per mode), got "
                         f"n_features={X.shape[1]}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has 0 rows: at least one observed entry is required")
    if X.dtype.kind == "O":  # numbers held as objects are indices as any others (as in sklearn)
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold integer indices, and some entry is no number"
                            ) from None
    if X.dtype == bool or not (np.issubdtype(X.dtype, np.integer)
                               or np.issubdtype(X.dtype, np.floating)):
        raise TypeError(f"{name} must hold integer indices, got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.floating):
        if not np.all(np.isfinite(X)) or np.any(X != np.round(X)):
            raise ValueError(f"{name} must hold integer indices; got non-integer or non-finite "
                             "values")
    X = X.astype(np.int64, copy=False)
    if np.any(X < 0):
        raise ValueError(f"Negative values in data: {name} has negative indices; indices must be "
                         ">= 0")
    return X


def check_indices(X, shape=None, name="X", warn_stray=False):
    """Validate index tuples: a 2-D integer array (n, order >= 2), non-negative, inside ``shape``.

    Returns ``(X as int64, shape)``; ``shape=None`` infers one past the largest index per mode,
    with a warning where ``warn_stray`` and the shape is mostly rows without an entry.
    """
    X = _check_index_array(X, name)
    if shape is None:
        # column by column: a reduction over axis 0 of an (n, order) array is several times slower
        shape = tuple(int(X[:, m].max()) + 1 for m in range(X.shape[1]))
        if warn_stray:
            _warn_sparse_modes(X, shape, name)
        return X, shape
    if isinstance(shape, str) or not hasattr(shape, "__len__"):  # "50x40" is not 5, 0, x, ...
        raise TypeError(f"shape must be a tuple of sizes (users, items, ...), got {shape!r}")
    shape = tuple(_positive_int(n, "shape") for n in shape)
    if len(shape) != X.shape[1]:
        raise ValueError(f"shape has {len(shape)} modes but {name} has {X.shape[1]} columns")
    over = np.flatnonzero(np.any(X >= np.asarray(shape), axis=0))
    if over.size:
        m = int(over[0])
        raise ValueError(f"{name} has indices out of shape {shape}: mode {m} reaches "
                         f"{int(X[:, m].max())} >= {shape[m]}")
    return X, shape


#: An inferred mode with more than this many indices that no entry holds, and over nine in ten
#: of its indices empty, is worth a warning: one stray index makes every index below it a row.
STRAY_INDEX_ROWS = 1000


def _warn_sparse_modes(X, shape, name):
    """Warn where the inferred shape is mostly rows without entries (the positions are public
    where the shape is inferred: a user-level fit needs it given)."""
    for m, n in enumerate(shape):
        if n <= STRAY_INDEX_ROWS:
            continue
        # counted on the grid of indices where it is no larger than the entries (most fits)
        held = (np.count_nonzero(np.bincount(X[:, m], minlength=n)) if n <= 10 * len(X)
                else len(np.unique(X[:, m])))
        if n - held > STRAY_INDEX_ROWS and n > 10 * held:
            warn(f"the shape inferred from {name}, {shape}, has {n} indices in mode {m} "
                 f"of which {held} hold an entry: every index up to the largest is a "
                 "row of the model. Check for a stray index, or pass shape= to state "
                 "the tensor's size", UserWarning)
            return


def to_observations(array):
    """``(X, y)`` from a dense array whose missing entries are NaN.

    Returns the positions of the finite entries as an int64 ``(n_obs, order)`` array (C order)
    and their values.

    >>> X, y = to_observations(np.array([[1.0, np.nan], [np.nan, 4.0]]))
    >>> X.tolist(), y.tolist()
    ([[0, 0], [1, 1]], [1.0, 4.0])
    """
    array = np.asarray(array, dtype=float)
    if array.ndim < 2:
        raise ValueError(f"array must have at least 2 dimensions, got shape {array.shape}")
    if np.any(np.isinf(array)):
        raise ValueError("array contains infinity; mark missing entries with NaN")
    observed = ~np.isnan(array)
    return np.argwhere(observed).astype(np.int64), array[observed]
