"""The order-3 Tucker sweep on the dense grid (:class:`TuckerSweep3`)."""
from __future__ import annotations

import functools
import math

import numpy as np
import scipy.sparse as sp

from .design import _grid_ssr, _row_bias, _set_core, grid_design
from .mask_pass import MaskPass
from .model import Model
from .observations import DenseGrid, _pair_index
from .pass_contraction import contract
from .tucker_rows import pair_table, row_kernels
from .value_pass import value_pass

#: :class:`TuckerSweep3`'s passes run over the observed entries (a sparse product) instead of the
#: grid's cells from this many cells per observed entry on. Measured at rank 3 (one thread): one
#: pass (the mask and the values contracted with a mode's features) costs about the same either
#: way at a fifth of the cells observed (100^3) and a fourth (60^3, in cache), and 2.9x less on
#: the entries at a tenth (100^3).
SPARSE_PASS_RATIO = 6

#: The largest rank whose rows and core :meth:`TuckerSweep3.solve` hands to the compiled loops
#: (:mod:`.tucker_rows`). Their sums grow as ``rank^6`` per row and their LU is unblocked:
#: measured at 40^3 half observed, 10 sweeps, the whole fit 1.8x (rank 2) to 1.5x (rank 4)
#: faster than NumPy's path, about even at 5, 1.4x slower at 6, 3x at 8.
COMPILED_MAX_RANK = 4

#: Bytes of mask and values per block of a pass over the grid (:meth:`TuckerSweep3._pass`).
PASS_BLOCK_BYTES = 1 << 20


class TuckerSweep3:
    """The normal equations of one ALS sweep of an order-3 Tucker model on the dense layout, two
    updates (or one and the core) per pass over the grid.

    Mode ``m``'s sums over its row ``i`` (:meth:`DenseGrid.normal_equations`) are, with the
    entry's design ``z = G_(m) (u_j (x) u_l)``, ``G_(m) [sum_jl mask_ijl (u_j u_j^T (x) u_l u_l^T)]
    G_(m)^T`` and alike: contractions of the mask with per-row features of the OTHER two modes,
    ``F_k = [u_k, b_k u_k, u_k u_k^T]`` (the factor row, times the row's bias, its pair products).
    The mask is contracted with one mode's features once (a pass over the grid: ``prod(shape) x
    (2 r + r (r + 1) / 2)`` flops), the other mode's on the small result. A pass over mode ``f``
    serves every update until ``f`` updates; each new one sums over the mode that does not update
    next (:func:`_pass_mode`), so that it serves two updates (or one and the core): over mode 2
    for modes 0 and 1, over mode 1 for mode 2, the core and the next sweep's mode 0, over mode 0
    for modes 1 and 2 and the core, three passes every two sweeps where
    :meth:`DenseGrid.normal_equations` and the core's (:func:`_grid_core_normal_equations`) make
    eight, each with more columns (on the observed entries, modes 2 and 0 only: two a sweep).
    The values likewise (``Y x_k U_k``). The offsets enter through the ``b u`` features and the
    mask's pair marginals (counts per pair of indices), and the sum of squared residuals comes
    from the core's normal equations (as :func:`_grid_core_step`), with ``sum mask o^2`` from
    the same marginals.

    Call :meth:`normal_equations` for modes 0, 1, 2 in turn, then :meth:`core_step`: each uses
    the factors the previous ones left (the order of :func:`als`).

    Where at most one cell in ``SPARSE_PASS_RATIO`` is observed (public: the shape and the number
    of entries), the passes are sparse products over the observed entries (:func:`_entry_passes`)
    instead of products with the grid: the same sums, in the same order of the summed mode's
    index, at a cost in entries, not cells.
    """

    def __init__(self, grid: DenseGrid, Yg, counts):
        M, n = grid.mask, grid.shape
        self.mask, self.counts = M, counts
        self._grid, self._values = grid, Yg  # for :meth:`_residuals`' exact fallback
        if math.prod(n) >= SPARSE_PASS_RATIO * len(grid.flat):
            (by_k, by_i), self.pair_counts, self.row_sums, self.yy = _entry_passes(grid, Yg)
            self._sparse = {2: by_k, 0: by_i}  # the passes over modes 2 and 0
        else:
            self._sparse = None
            # counts: exact in any order (integers far below 2**53), so by products with ones,
            # several times faster than the reductions over the inner axes; the values' row
            # sums likewise (to rounding), two of them from the sum over mode 0
            ones = [np.ones(k) for k in n]
            self.pair_counts = {(0, 1): M @ ones[2], (0, 2): ones[1] @ M,
                                (1, 2): (ones[0] @ M.reshape(n[0], -1)).reshape(n[1], n[2])}
            over_0 = (ones[0] @ Yg.reshape(n[0], -1)).reshape(n[1], n[2])
            self.row_sums = [Yg.reshape(n[0], -1) @ np.ones(n[1] * n[2]), over_0 @ ones[2],
                             ones[1] @ over_0]
            self.yy = float(np.vdot(Yg, Yg))
            self._Yg = Yg
            # the summed mode first, the other two's cells in C order: (n_f, n_a, n_b) views
            self._mask_passes = {f: MaskPass(M.transpose(f, *_OTHERS[f])) for f in range(3)}
        self._served = self._last = self._raw = self._raw_core = None
        self._cache = [None] * 3  # (factor, bias, features) of each mode
        self._kernels, self._buffers = row_kernels(), {}
        self._sums = (tuple(self.counts), tuple(self.row_sums), np.empty(0))  # the core's loops'
        # the pair counts of each mode with the two others, rows of that mode (contiguous)
        self._oriented = [[(k, np.ascontiguousarray(
            self.pair_counts[(m, k)] if m < k else self.pair_counts[(k, m)].T))
            for k in range(3) if k != m] for m in range(3)]

    def _pass(self, f, F, U):
        """The mask times mode ``f``'s features ``F`` and the values times its factor ``U``,
        summed over mode ``f``: ``(F cols, n_a, n_b)`` and ``(rank, n_a, n_b)`` with ``a < b``
        the other two modes, contiguous.

        On the grid, the mask's half by subset sums of the features where compiled
        (:mod:`.mask_pass`: 1.9x faster at 60^3), else by a product; the values' by compiled
        loops (:mod:`.value_pass`: about 2x faster at 60^3), else by a product. The products:
        over modes 2 and 0 one product of the grid's unfolding (in blocks of columns of about
        ``PASS_BLOCK_BYTES`` of mask and values where the mask is multiplied too: 1.1x faster
        at 60^3, cold caches), over mode 1 one small product per row of mode 0. The same sums
        (each over the summed mode) either way, to rounding."""
        a, b = _OTHERS[f]
        shape = (self.mask.shape[a], self.mask.shape[b])
        if self._sparse is not None:
            # (cells, f) from the sparse product; transposed: a copy of a tenth of the pass
            return tuple(np.ascontiguousarray((self._sparse[f][v] @ W).T).reshape(-1, *shape)
                         for v, W in ((False, F), (True, U)))
        P = self._mask_passes[f](F)  # the mask's half by subset sums, where compiled
        V = value_pass(self._Yg, U, f)  # the values' by compiled loops, where there are some
        if f == 1:  # (i, f, k) -> (f, i, k)
            if P is None:
                P = np.ascontiguousarray(np.matmul(F.T, self.mask).transpose(1, 0, 2))
            if V is None:
                V = np.ascontiguousarray(np.matmul(U.T, self._Yg).transpose(1, 0, 2))
            return P.reshape(-1, *shape), V
        M, Y = _unfolding(self.mask, f), _unfolding(self._Yg, f)
        if P is not None:
            return P.reshape(-1, *shape), (U.T @ Y).reshape(-1, *shape) if V is None else V
        rows, cols = M.shape
        products = [(F, M, np.empty((F.shape[1], cols)))]
        if V is None:
            products.append((U, Y, np.empty((U.shape[1], cols))))
        step = max(1, PASS_BLOCK_BYTES // (8 * len(products) * rows))
        for start in range(0, cols, step):
            block = slice(start, start + step)
            for W, A, out in products:
                np.matmul(W.T, A[:, block], out=out[:, block])
        P, V = products[0][2], products[-1][2] if V is None else V
        return P.reshape(-1, *shape), V.reshape(-1, *shape)

    @staticmethod
    def _bias(model, k):
        b = _row_bias(model, k)
        return np.zeros(len(model.factors[k])) if b is None else b

    def _features(self, model: Model, k: int):
        """``F_k = [u, b u, u u^T]`` (upper-triangle pairs) for every row of mode ``k``: formed
        once for each factor and bias (the same arrays: a mode's are new arrays each update)."""
        U, b = model.factors[k], model.biases[k] if k < len(model.biases) else None
        cached = self._cache[k]
        if cached is not None and cached[0] is U and cached[1] is b:
            return cached[2]
        out = self._form_features(model, k)
        self._cache[k] = (U, b, out)
        return out

    def _form_features(self, model: Model, k: int):
        U = model.factors[k]
        r = U.shape[1]
        ia, ib, _ = _pair_index(r)
        out = np.empty((len(U), 2 * r + len(ia)))  # filled in place: no stacked copies
        out[:, :r] = U
        np.multiply(self._bias(model, k)[:, None], U, out=out[:, r:2 * r])
        np.multiply(U[:, ia], U[:, ib], out=out[:, 2 * r:])
        return out

    def _others_offsets(self, model, m):
        """``sum_c mask[i, c] o_c`` per row ``i`` of mode ``m``: the intercept and the other modes'
        biases."""
        out = model.intercept * self.counts[m]
        for k in range(3):
            if k != m:
                C = self.pair_counts[(min(m, k), max(m, k))]
                out = out + (C @ self._bias(model, k) if m < k else C.T @ self._bias(model, k))
        return out

    def normal_equations(self, model: Model, m: int, bias: bool):
        """Mode ``m``'s per-row Grams and right-hand sides, as :meth:`DenseGrid.normal_equations`
        with the offsets of ``model`` (its own row bias a trailing unknown when ``bias``)."""
        return self._equations(model, m, bias, *self._contractions(model, m))

    def solve(self, model: Model, m: int, reg, bias: bool, dof: bool):
        """Mode ``m``'s rows solved in place (ridge ``reg + 1e-12``), as ``als`` solves
        :meth:`normal_equations`, by compiled loops (:mod:`.tucker_rows`); returns their
        effective degrees of freedom with ``dof`` (else 0), or ``None`` where the caller's NumPy
        path must solve them (no numba, no bias, a rank above ``COMPILED_MAX_RANK``, or an exact
        zero pivot), the model untouched."""
        kernels = self._kernels if bias and model.rank <= COMPILED_MAX_RANK else None
        if kernels is None:
            return None
        self._contractions(model, m)
        (Qr, Qv, Vr, Vv, f), r = self._raw, model.rank
        (ka, Ca), (kb, Cb) = self._oriented[m]
        if (m, f) not in self._buffers:  # the strides, the Grams' buffers: alike every sweep
            self._buffers[m, f] = (_steps(Qv), _steps(Vv), np.empty((len(Qv), r + 1, r + 1)),
                                   np.empty(len(Qv)), np.empty(0))
        qs, vs, G, traces, none = self._buffers[m, f]
        S = np.empty((len(Qv), r + 1))
        Gm = model.core.reshape(r, r * r) if m == 0 else np.ascontiguousarray(
            model.core.transpose(_FRONT[m]).reshape(r, r * r))
        kernels.systems(Qr.reshape(-1), qs, Vr.reshape(-1), vs, Gm, pair_table(r),
                        float(model.intercept), self.counts[m], self.row_sums[m], Ca,
                        _biases(model, ka), Cb, _biases(model, kb), G, S)
        lam = reg + 1e-12
        traces = traces if dof else none
        lost, df = kernels.solve(G, S, lam, traces)
        if lost < 0:
            return None
        # (the bias contiguous, as the loops were compiled for: no second compilation)
        model.factors[m], model.biases[m] = S[:, :r], S[:, r].copy()
        F = np.empty((len(S), 2 * r + r * (r + 1) // 2))
        kernels.features(S, r, F)
        self._cache[m] = (model.factors[m], model.biases[m], F)
        if m == 2:
            self._raw_core = self._last
        if not dof:
            return 0.0
        if lost:  # as ridge_dof: the pseudo-inverse where the ridge may be lost
            where = lam <= 1e-14 * np.abs(np.trace(G, axis1=1, axis2=2))
            traces[where] = np.trace(np.linalg.pinv(G[where], hermitian=True), axis1=1, axis2=2)
            return float(np.sum(r + 1 - lam * traces))
        return df

    def _serving_pass(self, model: Model, m: int):
        """The pass mode ``m``'s update reads: the last one where it summed over another mode
        whose factor and bias have not changed since, else a new one over the mode that does
        not update next (:func:`_pass_mode`), which then serves two updates (or one and the
        core): three passes every two sweeps on the grid."""
        last = self._served
        if last is not None and last[0] != m and _unchanged(last[1], model, last[0]):
            return last
        f = _pass_mode(m, sparse=self._sparse is not None)
        P, V = self._pass(f, self._features(model, f), model.factors[f])
        self._served = (f, _state(model, f), P, V)
        return self._served

    def _contractions(self, model: Model, m: int):
        """``Q[i, f, g]``: the mask summed against the other two modes' features (the lower mode's
        ``f``), per row ``i`` of mode ``m``; ``V[i, p, q]``: the values against their factors.
        From a pass over mode ``f`` (``(F cols, n_a, n_b)``, ``a < b``), one product over the
        remaining mode ``o`` per half, viewed with the axes in that order (no copies)."""
        f, _, P, V = self._serving_pass(model, m)
        o = 3 - m - f
        Fo, Uo = self._features(model, o), model.factors[o]
        # over the pass's last axis, (f, m, o), or its middle one, (f, o, m)
        Qr, Vr = contract(P, Fo, 2 if m < o else 1), contract(V, Uo, 2 if m < o else 1)
        if m < o:
            axes = (1, 0, 2) if f < o else (1, 2, 0)
        else:
            axes = (2, 0, 1) if f < o else (2, 1, 0)
        Q, V = Qr.transpose(axes), Vr.transpose(axes)
        if m == 2:
            self._last = (Q, V)
        self._raw = (Qr, Q, Vr, V, f)  # contiguous, the views, the pass's mode
        return Q, V

    def _equations(self, model: Model, m: int, bias: bool, Q, V):
        """:meth:`normal_equations` from mode ``m``'s contractions (:meth:`_contractions`)."""
        r = model.rank
        K, a, off = _kron_terms(Q, r)
        rows = len(K)
        Gm = model.core.transpose(_FRONT[m]).reshape(r, r * r)  # np.moveaxis(core, m, 0)
        gram = _sandwich(Gm, K)
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
        """Solve the core's ridge regression (after mode 2); return the sum of squared residuals.
        By compiled loops where :meth:`solve` solved mode 2 (the same sums to rounding)."""
        ssr = self._compiled_core(model, reg_core)
        return ssr if ssr is not None else self._core_step(model, reg_core)

    def _compiled_core(self, model: Model, reg_core):
        """:meth:`core_step` by compiled loops (:mod:`.tucker_rows`) on the products that
        :meth:`solve` left for mode 2; ``None`` where there are none or at an exact zero pivot
        (the model untouched)."""
        if self._raw_core is None:
            return None
        (Q, V), self._raw_core = self._raw_core, None
        kernels, r = self._kernels, model.rank
        # Q (k, f0, f1) and V (k, p0, p1), views of either pass's products: summed over k
        C = np.tensordot(Q, self._features(model, 2), axes=([0], [0]))  # (f0, f1, f2)
        value = np.tensordot(V, model.factors[2], axes=([0], [0]))  # (p0, p1, p2)
        G, B = np.empty((1, r**3, r**3)), np.empty((1, r**3))
        pc = self.pair_counts
        squares = kernels.core(C, value, float(model.intercept), self.yy, _biases(model),
                               self._sums[0], self._sums[1], pc[(0, 1)], pc[(0, 2)], pc[(1, 2)],
                               pair_table(r), G, B)
        rhs, lam = B[0].copy(), reg_core + 1e-12
        if kernels.solve(G, B, lam, self._sums[2])[0] < 0:
            return None
        c = B[0]
        model.core = c.reshape(model.core.shape)
        # the Gram holds the ridge: c^T G c without it
        fit = float(c @ G[0] @ c) - lam * float(c @ c)
        return self._residuals(model, squares, 2.0 * float(c @ rhs), fit)

    def _core_step(self, model: Model, reg_core):
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
        # _set_core added reg_core + 1e-12 to the Gram's diagonal: c^T G c without it
        fit = float(c @ gram @ c) - (reg_core + 1e-12) * float(c @ c)
        return self._residuals(model, self._offset_squares(model), 2.0 * float(c @ rhs), fit)

    def _residuals(self, model: Model, squares, cross, fit) -> float:
        """The sum of squared residuals ``squares - cross + fit`` by the expansion of the last
        solve's normal equations (``sum base^2 - 2 x . rhs + x^T G x``, exact for any solution
        ``x``), or, where it is below :data:`LOST` of the sums it is the difference of (offsets
        of 1e6 with residuals of 1e-5: rounding), the residuals summed over the grid
        (:func:`~.design._grid_ssr`, one more read): they set the empirical-Bayes ridge, the
        training RMSE and the stop."""
        ssr = squares - cross + fit
        if ssr <= LOST * (self.yy + abs(squares) + abs(cross) + abs(fit)):
            return _grid_ssr(self._grid, self._values, model, grid_design(model, 0))
        return ssr

    def _offset_squares(self, model: Model, exclude=None) -> float:
        """``sum over observed cells of (y - o)^2``, ``o`` the intercept and the modes' biases
        but mode ``exclude``'s: from ``sum y^2``, the values' and counts' row sums and the pair
        counts (``sum o^2`` over cells expands into pairs of modes)."""
        mu = float(model.intercept)
        modes = [(k, _row_bias(model, k)) for k in range(3) if k != exclude]
        modes = [(k, b) for k, b in modes if b is not None]
        cross = mu * float(np.sum(self.row_sums[0]))
        squares = mu * mu * float(np.sum(self.counts[0]))
        for k, b in modes:
            cross += float(b @ self.row_sums[k])
            squares += float((b * b) @ self.counts[k]) + 2.0 * mu * float(b @ self.counts[k])
        for i, (k, b) in enumerate(modes):
            for k2, b2 in modes[i + 1:]:
                squares += 2.0 * float(b @ self.pair_counts[(k, k2)] @ b2)
        return self.yy - 2.0 * cross + squares


#: :meth:`TuckerSweep3._residuals` sums the residuals over the grid where the normal equations'
#: expansion gives less than this share of the sums it is the difference of (an RMSE 1e-4 of the
#: values' RMS): their rounding, about 1e-15 of their size, is then 1e-7 of the residuals at most.
LOST = 1e-8


#: The other two modes of each mode, in order.
_OTHERS = ((1, 2), (0, 2), (0, 1))


def _pass_mode(m: int, sparse: bool) -> int:
    """The mode a new pass for mode ``m``'s update sums over: the other mode that does not
    update next (the order 0, 1, 2, core), so that the pass serves the next update too; on the
    observed entries only modes 2 and 0 (their sparse layouts), as two passes a sweep."""
    if sparse:
        return 2 if m < 2 else 0
    return (m + 2) % 3


def _state(model: Model, k: int):
    """Mode ``k``'s factor and bias: new arrays at each update, held (so that no other array
    takes their place) and compared by identity (:func:`_unchanged`)."""
    return (model.factors[k], model.biases[k] if k < len(model.biases) else None)


def _unchanged(state, model: Model, k: int) -> bool:
    return all(a is b for a, b in zip(state, _state(model, k)))


def _biases(model: Model, k=None):
    """Mode ``k``'s biases (else all three, a tuple) as the compiled loops were compiled for:
    contiguous float64. A mode that :func:`~.als._solve_rows` solved (NumPy's path, after an
    exact zero pivot) holds a column of its solutions, a strided view: the core's loop, given
    the three in a tuple of two layouts, raised numba's ``TypingError`` (a fit's failure after
    its spend where one mode met a zero pivot and mode 2 did not), and the rows' loops compiled
    again, mid-fit."""
    if k is None:
        return tuple(_biases(model, j) for j in range(3))
    return np.ascontiguousarray(model.biases[k], dtype=np.float64)


def _unfolding(A, f):
    """``A`` (a C-ordered grid) as ``(n_f, n_a n_b)`` for ``f`` 2 (a transposed view) or 0."""
    n = A.shape
    return A.reshape(n[0] * n[1], n[2]).T if f == 2 else A.reshape(n[0], n[1] * n[2])


def _steps(view):
    """A view's strides in elements (its base contiguous, at the same address)."""
    return tuple(st // view.itemsize for st in view.strides)


#: The axes that bring mode ``m`` of an order-3 array to the front, the others in order.
_FRONT = ((0, 1, 2), (1, 0, 2), (2, 0, 1))


@functools.lru_cache(maxsize=16)
def _kron_index(r, order):
    """Index into the features' product (:class:`TuckerSweep3`) giving the Kronecker Gram
    ``sum (u u^T) (x) (v v^T) (x) ...`` of ``order`` modes: rows and columns ``(p, q, ...)`` in C
    order, indexed as ``C[..., *idx]`` and reshaped to ``(r^order, r^order)``. Mode ``k``'s index
    is ``(r, r)`` on axes ``k`` and ``order + k`` and 1 on the others: broadcast by the indexing,
    where full index arrays (``r^(2 order)`` entries each, 400 MB cached at rank 16) cost more than
    the Gram itself."""
    _, _, where = _pair_index(r)
    shapes = [[r if a in (k, order + k) else 1 for a in range(2 * order)] for k in range(order)]
    return tuple((2 * r + where).reshape(shape) for shape in shapes)


#: Largest ``r^4`` (entries of one row's Kronecker Gram) for which :func:`_sandwich` forms
#: ``Gm (x) Gm`` (``r^6`` numbers: 262144 at rank 8).
SANDWICH_MAX = 4096


def _sandwich(Gm, K):
    """``Gm K_i Gm^T`` for every row ``i``: at small ranks one product of the rows' flattened
    Grams with ``Gm (x) Gm`` (a stack of tiny matrix products costs several times more), else
    the stacked products."""
    r, rr = Gm.shape
    if rr * rr > SANDWICH_MAX:
        return np.matmul(np.matmul(Gm, K), Gm.T)
    GG = (Gm[:, None, :, None] * Gm[None, :, None, :]).reshape(r * r, rr * rr)
    return (K.reshape(len(K), rr * rr) @ GG.T).reshape(len(K), r, r)


def _kron_terms(Q, r):
    """From ``Q[i, f, g]`` (features of two modes summed against the mask) the Kronecker Gram, the
    design sums ``sum (u (x) v)`` and the offsets' ``sum (b_u + b_v) (u (x) v)`` per row."""
    rows = len(Q)
    i0, i1 = _kron_index(r, 2)
    K = Q[:, i0, i1].reshape(rows, r * r, r * r)
    a = Q[:, :r, :r].reshape(rows, r * r)
    off = (Q[:, r:2 * r, :r] + Q[:, :r, r:2 * r]).reshape(rows, r * r)
    return K, a, off


def _entry_passes(grid: DenseGrid, Yg):
    """What :class:`TuckerSweep3` reads of the grid, from the observed entries alone (no pass over
    the cells): the mask and the values as sparse matrices for the two passes, ``((mask, values)
    with rows (i, j) and columns k, (mask, values) with rows (j, k) and columns i)``, each row's
    columns ascending (the order in which the grid's products sum them); the counts per pair of
    modes' indices, the values' sums per row of every mode and their sum of squares."""
    n0, n1, n2 = grid.shape
    flat = np.sort(grid.flat)  # the observed cells in C order
    values = Yg.ravel()[flat]
    ones = np.ones(len(flat))
    i, jk = np.divmod(flat, n1 * n2)
    j, k = np.divmod(jk, n2)
    ij_counts = np.bincount(flat // n2, minlength=n0 * n1)
    indptr = np.zeros(n0 * n1 + 1, dtype=np.int64)
    np.cumsum(ij_counts, out=indptr[1:])
    by_k = tuple(sp.csr_matrix((d, k, indptr), shape=(n0 * n1, n2)) for d in (ones, values))
    # by (j, k), then i: the columns of the (i, (j, k)) matrix, by scipy's counting sort (10x
    # NumPy's stable argsort); its data the entries' positions
    by_jk = sp.csr_matrix((np.arange(len(flat), dtype=float), jk, np.searchsorted(
        i, np.arange(n0 + 1))), shape=(n0, n1 * n2)).tocsc()
    by_i = tuple(sp.csr_matrix((d, by_jk.indices, by_jk.indptr), shape=(n1 * n2, n0))
                 for d in (ones, values[by_jk.data.astype(np.int64)]))
    pair_counts = {(0, 1): ij_counts.astype(float).reshape(n0, n1),
                   (0, 2): np.bincount(i * n2 + k, minlength=n0 * n2).astype(float).reshape(n0, n2),
                   (1, 2): np.diff(by_jk.indptr).astype(float).reshape(n1, n2)}
    row_sums = [np.bincount(idx, weights=values, minlength=n) for idx, n in ((i, n0), (j, n1),
                                                                             (k, n2))]
    return (by_k, by_i), pair_counts, row_sums, float(values @ values)
