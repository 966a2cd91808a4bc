"""The CP or Tucker model on observed entries: its parameters, a start, its evaluation."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np



_CHUNK = 1 << 21  # floats per block when a Khatri-Rao product over entries would be large


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
    #: ``(values, noise)`` of a private spectral start (``perturbation="statistics"``): each
    #: released Gram's top eigenvalues (n_grams, rank) and their noise levels (n_grams,), in
    #: units of the Gram's clipping level; ``None`` without one.
    start: tuple | None = None
    #: The noise levels of a private fit's released components and offsets
    #: (:class:`~dptensor.algorithms.completion.fit_noise.ReleaseNoise`); ``None`` without one.
    noise: object | None = None

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
        core_m = _unfold(model.core, m).T
        K.append(_blocked(lambda s: _khatri_rao_rows([o[s] for o in others]) @ core_m,
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
