"""Per-row designs and normal equations in both layouts, shared by ALS, DP-ALS and gradient
descent."""
from __future__ import annotations

import numpy as np

from .model import Model, _CHUNK, _khatri_rao_cols, _unfold
from .observations import DenseGrid, ModeLayout, _pair_index


# Grid cells per block of the residual sum of squares (256 KiB: stays in cache).
_SSR_BLOCK = 1 << 15


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
    Rt = [np.take(np.ascontiguousarray(U.T), L.index[k], axis=1)
          for k, U in enumerate(model.factors)]
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
    grow the factors to ~1e15 while the ridge stays ~1e-3), where ``solve`` raised after the
    spend."""
    try:
        return np.linalg.solve(gram, rhs)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(gram, hermitian=True) @ rhs


def _set_core(model: Model, gram, rhs, reg_core):
    """The core's ridge solution from its normal equations (``gram`` is modified)."""
    gram.flat[::len(gram) + 1] += reg_core + 1e-12  # the diagonal
    model.core = _ridge_solve(gram, rhs).reshape(model.core.shape)


def _tucker_core_step(model: Model, L: ModeLayout, y_sorted, reg_core):
    """Solve the core's ridge regression; return the sum of squared residuals after it."""
    base = y_sorted - _offsets_sorted(model, L)
    _set_core(model, *_core_normal_equations(model, L, base), reg_core)
    rows = np.take(np.ascontiguousarray(model.factors[0].T), L.index[0], axis=1)
    resid = base - np.einsum("re,re->e", rows, mode_design(model, L, 0))
    return float(resid @ resid)


def _grid_rows(mats, kron=False):
    """Every combination of one row of each of ``mats`` (C order), combined by elementwise product
    (``(prod n_k, r)``, the CP designs) or by Kronecker product (``(prod n_k, prod r_k)``)."""
    out = mats[0]
    for M in mats[1:]:
        if kron:
            n_rows = out.shape[0] * M.shape[0]
            out = (out[:, None, :, None] * M[None, :, None, :]).reshape(n_rows, -1)
        else:
            out = (out[:, None, :] * M[None, :, :]).reshape(-1, out.shape[1])
    return out


def grid_design(model: Model, m: int) -> np.ndarray:
    """``K_m`` at every column of the mode-``m`` unfolding (C order of the other modes):
    ``(n_cols, rank)``.

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
    ``(lead, c_1, ..., c_L)``. Each product drops axis 1 and appends its ``c_k``, so the next is on
    axis 1."""
    for A in mats:
        T = np.tensordot(T, A, axes=([1], [0]))
    return T


def _grid_core_normal_equations(model: Model, grid: DenseGrid, base, col_offset=None,
                                row_offset=None, masked_row_offset=None):
    """The core's normal equations on the dense layout: ``sum_e kr_e kr_e^T`` and ``sum_e kr_e t_e``
    over the observed cells, ``kr_e`` the Kronecker product of the entry's rows and ``t_e =
    base[e] - col_offset[c] - row_offset[i]`` (mode-0 unfolding, as
    :meth:`DenseGrid.normal_equations`).

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
    gram, rhs = _grid_core_normal_equations(model, grid, Yg, col_offset, row_bias,
                                            masked_row_offset=masked)
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
    """``(sum y^2, column sums, row sums, row counts)`` of the values in the grid's mode-0
    unfolding."""
    Y0 = Yg.reshape(grid.shape[0], -1)
    return float(np.vdot(Y0, Y0)), Y0.sum(axis=0), Y0.sum(axis=1), row_counts
