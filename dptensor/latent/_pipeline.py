r"""The moment -> whitening -> decomposition pipeline shared by the latent variable models.

A latent variable model whose second and third moments are

    M2 = sum_i w_i mu_i mu_i^T,        M3 = sum_i c_i w_i mu_i^(x)3

(``mu_i`` linearly independent, ``w_i > 0``) is learned in four steps (Anandkumar, Ge, Hsu, Kakade
& Telgarsky 2014, section 4):

1. estimate the first two moments of the data (one pass; released privately as a noisy mean and
   a noisy upper triangle of a d x d matrix);
2. whiten: ``W = U_k Lambda_k^(-1/2)`` from the top-k eigenpairs of ``M2``, so ``W^T M2 W = I``;
3. form the whitened third moment ``M3(W, W, W) = sum_i c_i w_i^(-1/2) v_i^(x)3`` with orthonormal
   ``v_i = sqrt(w_i) W^T mu_i`` -- a k x k x k tensor computed from the whitened rows (k numbers
   each), never a d x d x d one -- and decompose it with the tensor power method;
4. map back: ``w_i = (c_i / lambda_i)^2`` and ``mu_i = (lambda_i / c_i) U_k Lambda_k^(1/2) v_i``.

Each model supplies its moments and its constants; this module holds the parts they share: the
noise plan, the whitening, the released third moment and its decomposition. Step 2 is
post-processing of step 1's release, so the whitening is public when step 3 is released: the
whitened rows' norm bound follows from it, and the low-rank correction terms of M3 (built from
the released mean and second moment) are public constants that cancel between neighbours.
Sensitivities: ``docs/derivations/latent.rst``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse.linalg

from .._operators import SymmetricTensor, TensorOperator, ThirdMoment, moment_tensor
from ..accounting import ComposedEvent, GaussianEvent, gdp_mu
from ..pca import power_schedule
from ..mechanisms import gaussian_release, symmetric_gaussian_release
from ..tensor_decomposition import (PowerNoise, choose_moment, n_power_queries, perturb_tensor,
                                    tensor_power_method)

__all__ = ["SHARES", "NoisePlan", "plan_noise", "release_mean", "release_second", "top_eigenpairs",
           "Whitening", "whiten", "CorrectedTensor", "sym3", "whitened_rows_operator", "decompose_whitened",
           "n_third_queries", "match_rows"]

#: Shares of the squared Gaussian-DP budget ``mu^2`` given to the three releases. The mean enters
#: the second and third moments only through low-rank corrections, so it gets a small share; the
#: second moment (its noise moves the whitening, which every later step inherits) and the
#: whitened third moment split the rest evenly.
SHARES = {"mean": 0.1, "second": 0.45, "third": 0.45}


@dataclass(frozen=True)
class NoisePlan:
    """Noise multipliers of the three releases and the event that prices them together.

    ``z_second`` holds one multiplier per release of the second moment: one for Analyze Gauss, one
    per step when the whitening comes from the private power method.
    """

    z_mean: float
    z_second: tuple
    z_third: float
    n_third: int
    event: object

    @property
    def private(self) -> bool:
        return self.event is not None


def plan_noise(epsilon: float, delta: float, n_third_queries: int, n_second_steps: int = 1) -> NoisePlan:
    """Multipliers with ``sum_j count_j / z_j^2 = mu^2``: exactly ``(epsilon, delta)`` for the fit.

    The mean is one Gaussian release; the second moment one (Analyze Gauss) or ``n_second_steps``
    power steps scheduled by :func:`~dptensor.pca.power_schedule`; the third moment one release
    (perturbation) or ``n_third_queries`` adaptive ones (the private power method). Under
    Gaussian-DP they compose to ``mu = sqrt(sum_j count_j / z_j^2)``, so giving each part the
    share ``SHARES[part]`` of ``mu^2`` makes the whole fit exactly ``mu``-GDP.
    """
    if math.isinf(epsilon):
        return NoisePlan(0.0, (0.0,) * n_second_steps, 0.0, 0, None)
    mu = gdp_mu(epsilon, delta)
    z_mean = 1.0 / (mu * math.sqrt(SHARES["mean"]))
    z_second = tuple(float(z) for z in power_schedule(mu * math.sqrt(SHARES["second"]), n_second_steps))
    z_third = math.sqrt(n_third_queries) / (mu * math.sqrt(SHARES["third"]))
    second = [GaussianEvent(z_second[0], n_second_steps)] if len(set(z_second)) == 1 else \
        [GaussianEvent(z_second[0], n_second_steps - 1), GaussianEvent(z_second[-1], 1)]
    event = ComposedEvent((GaussianEvent(z_mean, 1), *second, GaussianEvent(z_third, int(n_third_queries))))
    return NoisePlan(z_mean, z_second, z_third, int(n_third_queries), event)


def release_mean(mean, sensitivity, plan: NoisePlan, rng):
    """The mean plus ``N(0, (z sensitivity)^2)`` noise (one Gaussian release)."""
    if not plan.private:
        return mean
    return gaussian_release(mean, sensitivity, plan.z_mean, rng)


def release_second(second, sensitivity, plan: NoisePlan, rng):
    """The symmetric second moment with Gaussian noise on its upper triangle, diagonal included
    (Analyze Gauss: one release at ``z sensitivity``)."""
    if not plan.private:
        return second
    return symmetric_gaussian_release(second, sensitivity, plan.z_second[0], rng)


def top_eigenpairs(A, k: int, rng, *, dense_below: int = 600):
    """The k algebraically largest eigenpairs of a symmetric d x d ``A`` (values descending).

    ``A`` is an array, or an operator with ``shape`` and ``matmat`` (never formed). Small dense d:
    LAPACK on the requested subset. Otherwise Lanczos (ARPACK), started from a vector drawn from
    ``rng`` so that the result is a deterministic function of ``A`` and the seed.
    """
    d = A.shape[0]
    if isinstance(A, np.ndarray) and (d <= dense_below or k >= d - 1):
        w, V = scipy.linalg.eigh(A, subset_by_index=[d - k, d - 1])
    else:
        if not isinstance(A, np.ndarray):  # an implicit operator with ``matmat``: Lanczos on its products
            operator = A
            A = scipy.sparse.linalg.LinearOperator(
                (d, d), matvec=lambda v: operator.matmat(v.reshape(-1, 1)).ravel(), matmat=operator.matmat,
                dtype=np.float64)
        w, V = scipy.sparse.linalg.eigsh(A, k=k, which="LA", v0=rng.standard_normal(d), tol=1e-8,
                                         ncv=min(d, max(4 * k, 40)))
    order = np.argsort(-w, kind="stable")
    return w[order], V[:, order]


@dataclass(frozen=True)
class Whitening:
    """``W = U diag(values)^(-1/2)`` (d x k) and its left inverse ``(W^T)^+ = U diag(values)^(1/2)``."""

    vectors: np.ndarray
    values: np.ndarray

    @property
    def W(self) -> np.ndarray:
        return self.vectors / np.sqrt(self.values)

    @property
    def unwhiten(self) -> np.ndarray:
        return self.vectors * np.sqrt(self.values)


def whiten(M2, k: int, rng) -> Whitening:
    """Whitening from the top-k eigenpairs of ``M2``.

    A noisy (or finite-sample) ``M2`` can have non-positive eigenvalues among its top k; they are
    floored at ``1e-6`` times the largest so the whitening stays finite (post-processing).
    """
    values, vectors = top_eigenpairs(M2, k, rng)
    floor = 1e-6 * max(float(values[0]), np.finfo(float).tiny)
    return Whitening(vectors, np.maximum(values, floor))


def sym3(A) -> np.ndarray:
    """``A_abc + A_acb + A_bca``: the three placements of the odd index of a k x k x k array
    symmetric in its first two indices (as in ``m (x) G + perms`` of the moment corrections)."""
    return A + A.transpose(0, 2, 1) + A.transpose(2, 0, 1)


class CorrectedTensor(TensorOperator):
    """``base + C``: a data tensor operator plus a dense, public, symmetric k x k x k correction."""

    def __init__(self, base: TensorOperator, correction):
        self.base = base
        self.correction = SymmetricTensor(np.asarray(correction))
        self.shape = base.shape

    def apply_evaluate(self, U):
        TU, tu = self.base.apply_evaluate(U)
        CU = self.correction.apply(U)
        return TU + CU, tu + np.einsum("al,al->l", U, CU)

    def apply(self, U):
        return self.apply_evaluate(U)[0]


def whitened_rows_operator(Y, n_queries: int):
    """``(1/n) sum_l y_l^(x)3`` of whitened rows Y (n x k), as a dense tensor or implicitly.

    :func:`~dptensor.tensor_decomposition.choose_moment` picks the cheaper: with k small the dense
    k^3 tensor (one GEMM) nearly always wins over ``n_queries`` implicit passes over the rows.
    """
    n, k = Y.shape
    if choose_moment(n, k, n_queries, Y.dtype.itemsize) == "dense":
        return SymmetricTensor(moment_tensor(Y))
    return ThirdMoment(Y)


def decompose_whitened(data, correction, k: int, *, sensitivity: float, plan: NoisePlan, method: str,
                       n_restarts: int, n_iter: int, rng, verbose: int = 0):
    """Release and decompose the whitened third moment ``data + correction``.

    ``data`` is the data-dependent part (a dense k x k x k array, or a tensor operator), of
    row-level l2 sensitivity ``sensitivity``; ``correction`` is public. Without privacy: the robust
    tensor power method on the sum. ``method="perturb"``: one Gaussian release of the distinct
    entries of ``data`` (then the power method is post-processing). ``method="power"``: the
    private tensor power method (``k L (R + 1)`` Gaussian queries of the sum).

    Returns ``(components (k, k), eigenvalues (k,))``.
    """
    if plan.private and method == "perturb":
        dense = data if isinstance(data, np.ndarray) else _dense(data)
        operator = SymmetricTensor(perturb_tensor(dense, sensitivity, plan.z_third, rng) + correction)
        noise = None
    else:
        base = SymmetricTensor(data) if isinstance(data, np.ndarray) else data
        operator = CorrectedTensor(base, correction)
        noise = PowerNoise(plan.z_third, sensitivity) if plan.private else None
    return tensor_power_method(operator, k, n_restarts, n_iter, rng, noise, verbose=verbose)


def n_third_queries(method: str, k: int, n_restarts: int, n_iter: int) -> int:
    """Gaussian releases of the third moment: 1 (perturbation) or ``k L (R + 1)`` (power method)."""
    return 1 if method == "perturb" else n_power_queries(k, n_restarts, n_iter)


def _dense(operator) -> np.ndarray:
    if isinstance(operator, SymmetricTensor):
        return operator.T
    return moment_tensor(operator.X)


def match_rows(estimated, true):
    """Pair rows of ``estimated`` with rows of ``true`` minimising the total l2 distance.

    For parameters that carry no sign ambiguity (mixture means, topic distributions): the
    Hungarian algorithm on the distance matrix. Returns ``(permutation, distances)`` with
    ``estimated[permutation[i]]`` paired to ``true[i]`` and ``distances[i]`` their l2 distance.

    >>> perm, dist = match_rows(np.array([[0.0, 1.0], [1.0, 0.0]]), np.eye(2))
    >>> perm.tolist(), dist.tolist()
    ([1, 0], [0.0, 0.0])
    """
    estimated, true = np.asarray(estimated, dtype=float), np.asarray(true, dtype=float)
    cost = np.linalg.norm(true[:, None, :] - estimated[None, :, :], axis=2)
    rows, cols = scipy.optimize.linear_sum_assignment(cost)
    perm = np.empty(true.shape[0], dtype=np.intp)
    perm[rows] = cols
    return perm, cost[np.arange(true.shape[0]), perm]
