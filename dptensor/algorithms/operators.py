r"""Operators: what a power step multiplies by, hiding how the data is held.

Tensor operators answer two batched queries for a block of candidate vectors ``U`` (d x L):

* ``apply(U)``    -> ``T(I, U, U)``, shape (d, L): column l is ``T(I, u_l, u_l)``;
* ``evaluate(U)`` -> ``T(U, U, U)``, shape (L,): entry l is ``T(u_l, u_l, u_l)``;

and ``apply_evaluate(U)`` returns both, sharing work where it can. Matrix operators answer
``matmat(Q)`` -> ``A @ Q``. Every query is a few BLAS calls over all L columns at once; none loops
over columns in Python.
"""
from __future__ import annotations

import numpy as np

from .compiled import available as compiled_available
from .compiled import compiled
from .pair_products import pair_products
from .power_steps import deflated_power_steps
from .symmetric_contraction import contract_distinct, kernel_min_d, pack_distinct

__all__ = ["SymmetricTensor", "ThirdMoment", "DeflatedTensor", "GramMatrix", "DenseMatrix",
           "symmetrize_tensor", "moment_tensor", "moment_chunk_rows", "MomentSum"]


def symmetrize_tensor(T: np.ndarray) -> np.ndarray:
    """The symmetric part of a 3-way array: the mean over the 6 index permutations."""
    return (T + T.transpose(0, 2, 1) + T.transpose(1, 0, 2) + T.transpose(1, 2, 0)
            + T.transpose(2, 0, 1) + T.transpose(2, 1, 0)) / 6.0


def moment_chunk_rows(d: int) -> int:
    """Rows of one chunk of :func:`moment_tensor`'s Khatri-Rao product (``d^2`` entries each)."""
    dd = max(1, int(d) * int(d))
    return max(1, min(2**26 // dd, max(512, 2**17 // dd)))


def _khatri_rao_kernel(X, out):  # pragma: no cover (compiled)
    """``out[i, a d + b] = X[i, a] * X[i, b]``: the rows' Khatri-Rao products, one rounding each."""
    m, d = X.shape
    for i in range(m):
        for a in range(d):
            x = X[i, a]
            for b in range(d):
                out[i, a * d + b] = x * X[i, b]


def _warm_up(kernel):
    for dtype in (np.float64, np.float32):
        kernel(np.ones((1, 1), dtype=dtype), np.ones((1, 1), dtype=dtype))


def _khatri_rao(Xc, out):
    """``Xc[:, :, None] * Xc[:, None, :]`` as ``(m, d^2)`` into ``out``: NumPy's broadcast runs an
    inner loop of ``d`` numbers (slow at the whitened rows' ``d = k = 10``), the compiled loop
    (numba, where installed) makes the very same products, 4-5x faster there."""
    m, d = Xc.shape
    kernel = compiled("khatri_rao", _khatri_rao_kernel, _warm_up)
    if kernel is not None and Xc.dtype == out.dtype and Xc.dtype in (np.float32, np.float64):
        kernel(Xc, out)
        return out
    np.multiply(Xc[:, :, None], Xc[:, None, :], out=out.reshape(m, d, d))
    return out


def moment_tensor(X: np.ndarray, dtype=None) -> np.ndarray:
    """The dense third moment ``(1/n) sum_l x_l (x) x_l (x) x_l`` (O(n d^3) time, O(d^3) memory),
    summed in ``dtype`` (default ``X``'s; float32 rows are widened one row chunk at a time)."""
    acc = MomentSum(X.shape[1], X.dtype if dtype is None else dtype)
    acc.add(X)
    return acc.mean()


class MomentSum:
    """:func:`moment_tensor`'s sum over rows given a block at a time, of any lengths: the same
    chunks of rows (a reused buffer gathers those that straddle two blocks), the same products in
    the same order, so the same numbers as :func:`moment_tensor` of the rows stacked, never
    holding them."""

    def __init__(self, d: int, dtype=np.float64):
        # One GEMM per chunk: (X (x) X)^T X, in row chunks so the n x d^2 Khatri-Rao product
        # stays small: about 1 MB where d is small (it stays in cache between its making and its
        # product: 4x faster at d = 10 than a chunk of 2**26 entries), 512 rows up to 2**26.
        self.d, self.n, self.filled = int(d), 0, 0
        self.out = np.zeros((self.d * self.d, self.d), dtype=dtype)
        self.step = moment_chunk_rows(self.d)
        self._kr = self._carry = None

    def add(self, X) -> None:
        X, start = np.asarray(X), 0
        self.n += X.shape[0]
        while start < X.shape[0]:
            if self.filled == 0 and X.shape[0] - start >= self.step:  # a whole chunk in place
                self._product(X[start:start + self.step])
                start += self.step
                continue
            if self._carry is None:
                self._carry = np.empty((self.step, self.d), dtype=self.out.dtype)
            take = min(self.step - self.filled, X.shape[0] - start)
            self._carry[self.filled:self.filled + take] = X[start:start + take]
            self.filled, start = self.filled + take, start + take
            if self.filled == self.step:
                self._product(self._carry)
                self.filled = 0

    def _product(self, rows):
        Xc = np.ascontiguousarray(rows, dtype=self.out.dtype)
        if self._kr is None:  # one chunk's Khatri-Rao product, reused
            self._kr = np.empty((self.step, self.d * self.d), dtype=self.out.dtype)
        self.out += _khatri_rao(Xc, self._kr[:len(Xc)]).T @ Xc

    def mean(self) -> np.ndarray:
        """``(1/n) sum_l x_l^(x)3`` over the rows added (d x d x d)."""
        if self.filled:
            self._product(self._carry[:self.filled])
            self.filled = 0
        return (self.out / self.n).reshape(self.d, self.d, self.d)


class TensorOperator:
    """Base class: ``apply_evaluate`` from ``apply`` when no shared work is possible."""

    shape: tuple

    @property
    def d(self) -> int:
        return self.shape[0]

    def apply(self, U):
        raise NotImplementedError

    def evaluate(self, U):
        return np.einsum("al,al->l", U, self.apply(U))

    def apply_evaluate(self, U):
        TU = self.apply(U)
        return TU, np.einsum("al,al->l", U, TU)


class SymmetricTensor(TensorOperator):
    """A dense symmetric d x d x d tensor.

    Symmetry in the last two indices halves the work: with ``P[a, (b,c)] = w_bc T[a, b, c]`` over
    the pairs ``b <= c`` (``w = 2`` off the diagonal, 1 on it), ``T(I,U,U) = P @ K`` where
    ``K[(b,c), l] = U[b, l] U[c, l]``. That is one GEMM of ``d^3 L`` flops reading ``d^3 / 2``
    numbers, against ``2 d^3 L`` flops and ``d^3`` numbers for ``T.reshape(d*d, d) @ U``; the
    product is memory-bound at the few restarts a power method batches, so the halved traffic is
    what counts. From ``d =`` :func:`~dptensor.algorithms.symmetric_contraction.kernel_min_d` on
    (64; more for fewer than 3 float64 or 8 float32 restarts), where numba is installed, a
    compiled loop reads the ``d^3 / 6`` distinct entries once for all L instead
    (:mod:`~dptensor.algorithms.symmetric_contraction`: 3x faster at d = 200). Either packing is
    built on first use (half the size of T, or a sixth).
    """

    #: Use the compiled loops where there are ones (the pair products of
    #: :mod:`~dptensor.algorithms.pair_products`, the contraction of
    #: :mod:`~dptensor.algorithms.symmetric_contraction`); ``False`` forces the NumPy path (the
    #: tests, the benchmark's fallback timings).
    use_kernel = True

    def __init__(self, T: np.ndarray):
        self.T = T
        self.shape = T.shape
        self._rows, self._cols = np.triu_indices(T.shape[0])
        self._half = self._distinct = None

    @property
    def _packed(self):
        """``P[a, (b, c)]``, ``b <= c``: the NumPy path's packed half (built on first use)."""
        if self._half is None:
            weights = np.where(self._rows == self._cols, 1.0, 2.0).astype(self.T.dtype)
            self._half = np.ascontiguousarray(self.T[:, self._rows, self._cols] * weights)
        return self._half

    def _kernel(self, n_restarts: int = 16):
        """Whether this tensor takes the compiled contraction of ``n_restarts`` (where its passes
        compile; from ``d =`` :func:`~dptensor.algorithms.symmetric_contraction.kernel_min_d`)."""
        return (self.use_kernel and self.T.dtype in (np.float32, np.float64)
                and self.shape[0] >= kernel_min_d(n_restarts, self.T.dtype)
                and compiled_available())

    def apply(self, U):
        if self._kernel(U.shape[1]):
            if self._distinct is None:
                self._distinct = pack_distinct(self.T)
            out = contract_distinct(self._distinct, U)
            if out is not None:
                return out
        # K is built transposed, (L, pairs), from contiguous rows of U^T (compiled where numba
        # is installed: the same products, 5-10x faster than NumPy's two gathers).
        K = pair_products(np.ascontiguousarray(U.T), self._rows, self._cols,
                          use_kernel=self.use_kernel)
        return self._packed @ K.T

    def deflated_power_steps(self, U, eigenvalues, components, n_steps: int):
        """``n_steps`` non-private power steps of ``T - sum_j lambda_j v_j^(x)3`` on U's columns
        in compiled calls only (:mod:`~dptensor.algorithms.power_steps`), or ``None`` where they
        do not apply."""
        if not self._kernel(U.shape[1]):
            return None
        if self._distinct is None:
            self._distinct = pack_distinct(self.T)
        return deflated_power_steps(self._distinct, U, eigenvalues, components, n_steps)


class ThirdMoment(TensorOperator):
    """The empirical third moment ``T = (1/n) sum_l x_l^(x)3`` of data X (n x d), never formed.

    ``T(I,U,U) = X^T (X U)^2 / n`` and ``T(U,U,U) = sum((X U)^3) / n``: O(n d L) time and
    O(n L) extra memory per query, against O(d^3) for the dense tensor.
    """

    def __init__(self, X: np.ndarray):
        self.X = X
        self.n = X.shape[0]
        self.shape = (X.shape[1],) * 3

    def apply_evaluate(self, U):
        XU = self.X @ U
        sq = XU * XU
        return (self.X.T @ sq) / self.n, np.einsum("il,il->l", sq, XU) / self.n

    def apply(self, U):
        return self.apply_evaluate(U)[0]

    def evaluate(self, U):
        XU = self.X @ U
        return np.einsum("il,il,il->l", XU, XU, XU) / self.n


class DeflatedTensor(TensorOperator):
    """``T - sum_j lambda_j v_j^(x)3``, applied without touching T:

    ``(T - D)(I,u,u) = T(I,u,u) - sum_j lambda_j (v_j . u)^2 v_j`` and
    ``(T - D)(u,u,u) = T(u,u,u) - sum_j lambda_j (v_j . u)^3``.
    """

    def __init__(self, base: TensorOperator, eigenvalues, components):
        self.base = base
        self.shape = base.shape
        self.eigenvalues = np.asarray(eigenvalues, dtype=float).reshape(-1)
        self.components = np.asarray(components, dtype=float).reshape(-1, base.shape[0])  # (k, d)

    def correction(self, U):
        """``(sum_j lambda_j (v_j.u)^2 v_j, sum_j lambda_j (v_j.u)^3)`` for every column u of U."""
        W = self.components @ U  # (k, L)
        lw2 = self.eigenvalues[:, None] * W * W
        return self.components.T @ lw2, np.einsum("kl,kl->l", lw2, W)

    def apply_evaluate(self, U):
        TU, tu = self.base.apply_evaluate(U)
        if len(self.eigenvalues) == 0:
            return TU, tu
        cU, cu = self.correction(U)
        # an exact statistic (dptensor.algorithms.exact): the public part is taken off exactly
        if hasattr(TU, "minus"):
            return TU.minus(cU), tu.minus(cu)
        return TU - cU.astype(TU.dtype, copy=False), tu - cu.astype(tu.dtype, copy=False)

    def apply(self, U):
        """``(T - D)(I,U,U)`` alone: a power step needs no ``T(U,U,U)`` (the same values as
        ``apply_evaluate(U)[0]``, without the scalar queries' work)."""
        TU = self.base.apply(U)
        if len(self.eigenvalues) == 0:
            return TU
        W = self.components @ U
        cU = self.components.T @ (self.eigenvalues[:, None] * W * W)
        return TU.minus(cU) if hasattr(TU, "minus") else TU - cU.astype(TU.dtype, copy=False)

    def evaluate(self, U):
        return self.apply_evaluate(U)[1]

    def compiled_power_steps(self, U, n_steps: int):
        """``n_steps`` non-private power steps ``u <- (T-D)(I,u,u) / ||(T-D)(I,u,u)||`` of U's
        columns in compiled code, where the base tensor has them; else ``None``."""
        steps = getattr(self.base, "deflated_power_steps", None)
        return None if steps is None else steps(U, self.eigenvalues, self.components, n_steps)


class GramMatrix:
    """``A = X^T X`` (d x d) applied as ``X^T (X Q)``: O(n d p) per product, never forming A."""

    def __init__(self, X: np.ndarray):
        self.X = X
        self.shape = (X.shape[1], X.shape[1])

    def matmat(self, Q):
        return self.X.T @ (self.X @ Q)


class DenseMatrix:
    """An explicit d x d matrix A."""

    def __init__(self, A: np.ndarray):
        self.A = A
        self.shape = A.shape

    def matmat(self, Q):
        return self.A @ Q
