r"""The moment -> whitening -> decomposition pipeline shared by the latent variable models.

A latent variable model whose second and third moments are

    M2 = sum_i w_i mu_i mu_i^T,        M3 = sum_i c_i w_i mu_i^(x)3

(``mu_i`` linearly independent, ``w_i > 0``) is learned in four steps (Anandkumar, Ge, Hsu, Kakade
& Telgarsky 2014, section 4):

1. estimate the first moments (released as a noisy mean, with any scalar the model needs);
2. whiten: ``W = U_k Lambda_k^(-1/2)`` from the top-k eigenpairs of ``M2``, so ``W^T M2 W = I``;
   ``M2`` is released either whole (a noisy upper triangle of the d x d matrix) or through the
   private power method and a released projection on its subspace (:func:`power_subspace`),
   which never forms a d x d matrix;
3. form the whitened third moment ``M3(W, W, W) = sum_i c_i w_i^(-1/2) v_i^(x)3`` with orthonormal
   ``v_i = sqrt(w_i) W^T mu_i`` -- a k x k x k tensor computed from the whitened rows (k numbers
   each), never a d x d x d one -- and decompose it with the tensor power method;
4. map back: ``w_i = (c_i / lambda_i)^2`` and ``mu_i = (lambda_i / c_i) U_k Lambda_k^(1/2) v_i``.

Each model supplies its moments and its constants; this module holds the parts they share: the
noise plan, the whitening, the released third moment and its decomposition. Step 2 is
post-processing of step 1's release and its own, so the whitening is public when step 3 is
released: the whitened rows' norm bound follows from it, and the low-rank correction terms of M3
(built from the released mean and second moment) are public constants that cancel between
neighbours. Sensitivities: ``docs/derivations/latent.rst``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from .eigen import top_eigenpairs
from .operators import SymmetricTensor, TensorOperator, ThirdMoment, moment_tensor
from ..accounting.composition import gdp_mu
from ..accounting.events import ComposedEvent, GaussianEvent
from .power import auto_n_iter, eigenvalue_noise_level, noisy_power_method, power_schedule
from ..mechanisms import Rounding, gaussian_release, symmetric_gaussian_release
from .tensor_power import (PowerNoise, choose_moment, n_power_queries,
                                       tensor_power_method)

__all__ = ["SHARES", "PROJECTION_SHARE", "SPARE_TERMS", "NoisePlan", "plan_noise", "rounding",
           "whitening_roundings", "release", "release_second",
           "power_subspace", "ImplicitMatrix",
           "Whitening", "whiten", "topic_noise_std", "m2_noise_level", "CorrectedTensor", "sym3",
           "whitened_rows_operator",
           "decompose_whitened", "n_third_queries", "match_rows"]

#: Shares of the squared Gaussian-DP budget ``mu^2`` given to the three groups of releases, unless
#: the model gives its own (the topic model does, see ``SpectralLatentModel._shares``). The
#: first moments enter the second and third moments only through low-rank corrections (or set a
#: clipping scale), so they get a small share; the second moment (its noise moves the whitening,
#: which every later step inherits) and the whitened third moment split the rest evenly.
SHARES = {"first": 0.1, "second": 0.45, "third": 0.45}

#: With the whitening from the private power method, the share of the second moment's budget given
#: to the last release, the p x p projection ``V^T M2 V`` (the power steps share the rest as
#: :func:`~dptensor.algorithms.power.power_schedule` splits it). The subspace's error grows like
#: ``sqrt(d)`` times its steps' noise and the projection's like ``sqrt(p)``, so the subspace gets
#: most of it: measured on the benchmark's topic model (2000 words, 10^5 documents, epsilon 1 to
#: 16), 0.1 gave a 5% smaller error than 0.2 and 15% smaller than 0.35; 0.05 was no better.
PROJECTION_SHARE = 0.1


@dataclass(frozen=True)
class NoisePlan:
    """Noise multipliers of the fit's releases and the event that prices them together.

    ``z_first`` holds one multiplier per first-moment release (the mean, and a scalar such as a
    trace or a clipping scale where the model needs one). ``z_second`` holds one for Analyze Gauss
    (``n_power == 0``), or one per power step followed by one for the projection (``n_power``
    steps, the whitening from the private power method).
    """

    z_first: tuple
    z_second: tuple
    z_third: float
    n_third: int
    n_power: int
    event: object

    @property
    def private(self) -> bool:
        return self.event is not None

    @property
    def n_queries(self) -> int:
        """Gaussian releases the fit makes."""
        return len(self.z_first) + len(self.z_second) + self.n_third


def plan_noise(epsilon: float, delta: float, n_third_queries: int, n_power: int = 0,
               n_first: int = 1, shares=None) -> NoisePlan:
    """Multipliers with ``sum_j 1 / z_j^2 = mu^2`` over every release: exactly ``(epsilon, delta)``.

    The first moments are ``n_first`` releases sharing ``SHARES["first"]`` evenly; the second
    moment one release (Analyze Gauss, ``n_power=0``) or ``n_power`` power steps scheduled by
    :func:`~dptensor.algorithms.power.power_schedule` and one projection with
    :data:`PROJECTION_SHARE` of ``SHARES["second"]``; the third moment one release (perturbation) or
    ``n_third_queries`` adaptive ones (the private power method). ``shares`` (default
    :data:`SHARES`) splits ``mu^2`` between the three groups; they must sum to 1. Under Gaussian-DP
    the releases compose to ``mu = sqrt(sum_j 1 / z_j^2)``, so the whole fit is exactly ``mu``-GDP.
    """
    shares = SHARES if shares is None else shares
    if not math.isclose(sum(shares.values()), 1.0) or min(shares.values()) <= 0:
        raise ValueError(f"the budget shares must be positive and sum to 1, got {shares}")
    n_third_queries = int(n_third_queries)
    if math.isinf(epsilon):
        return NoisePlan((0.0,) * n_first, (0.0,) * (n_power + 1 if n_power else 1), 0.0, 0,
                         int(n_power), None)
    mu = gdp_mu(epsilon, delta)
    z_first = (math.sqrt(n_first) / (mu * math.sqrt(shares["first"])),) * n_first
    second = mu * math.sqrt(shares["second"])
    if n_power:
        steps = power_schedule(second * math.sqrt(1.0 - PROJECTION_SHARE), n_power)
        z_second = (*(float(z) for z in steps), 1.0 / (second * math.sqrt(PROJECTION_SHARE)))
    else:
        z_second = (1.0 / second,)
    z_third = math.sqrt(n_third_queries) / (mu * math.sqrt(shares["third"]))
    counts = Counter((*z_first, *z_second))
    event = ComposedEvent((*(GaussianEvent(z, c) for z, c in counts.items()),
                           GaussianEvent(z_third, n_third_queries)))
    return NoisePlan(z_first, z_second, z_third, n_third_queries, int(n_power), event)


#: Floating-point operations in a released coordinate besides its sum over the units and the
#: sums over one unit's features (or words): the unit's own products and scalings (at most 4),
#: the combination of a unit's parts, the divisions by n or a public weight, a public offset's
#: subtraction, the mirror average ``(P + P^T) / 2`` and the Frobenius geometry's ``sqrt(m)``:
#: at most 12 at any site of the latent models (``docs/derivations/latent.rst``, "Rounding").
SPARE_TERMS = 16


def rounding(total: float, n: int, inner: int = 0) -> Rounding:
    """The :class:`~dptensor.mechanisms.Rounding` of a release whose coordinates are sums over
    the ``n`` units of terms that are themselves sums of at most ``inner`` products (a row's
    ``x . q``: ``inner = d``), then a few scalings (:data:`SPARE_TERMS`). A term's roundings
    and the sum's chain through at most ``inner + n + SPARE_TERMS`` operations, whatever order
    BLAS or Dask takes. ``total`` bounds, in the release's norm, the sum over units of the norm
    of a unit's term with every summand taken by its absolute value, plus the public offsets'."""
    return Rounding(total=float(total), terms=int(n) + int(inner) + SPARE_TERMS)


def whitening_roundings(n: int, d: int, p: int, unit_total: float, offset: float = 0.0):
    """``(analyze, step, projection)``: the roundings of the second moment's releases.

    ``unit_total`` bounds the sum over units of the Frobenius norm of a unit's term ``|A_x|``
    (entrywise absolute values, in the released matrix's scale), ``offset`` the Frobenius norm
    of the absolute value of a public matrix subtracted from it. A block ``Q`` with orthonormal
    columns has ``|| |Q| ||_2 <= || Q ||_F = sqrt(p)``, so ``|| |A_x| |Q| ||_F <= sqrt(p)
    ||A_x||_F`` (a power step: ``d`` more operations per entry, the product ``x . q``) and
    ``|| |V|^T |A_x| |V| ||_F <= p ||A_x||_F`` (the projection: ``2 d`` more).
    """
    whole = float(unit_total) + float(offset)
    return (rounding(whole, n), rounding(math.sqrt(p) * whole, n, d),
            rounding(p * whole, n, 2 * d))


def release(value, sensitivity: float, noise_multiplier: float, rng, *, rounding: Rounding | None):
    """``value`` plus ``N(0, (z s)^2)`` noise (one Gaussian release), ``s`` raised by the value's
    ``rounding`` allowance; unchanged when ``z == 0`` (no privacy: the plan's multipliers are then
    all zero)."""
    if noise_multiplier == 0:
        return value
    return gaussian_release(value, sensitivity, noise_multiplier, rng, rounding=rounding)


def release_second(second, sensitivity, plan: NoisePlan, rng, frobenius: bool = False, *,
                   rounding: Rounding | None):
    """The symmetric second moment with Gaussian noise on its upper triangle, diagonal included
    (Analyze Gauss: one release at ``z sensitivity``, raised by the ``rounding`` allowance).
    ``frobenius``: ``sensitivity`` bounds the Frobenius norm of the matrix's change, and the
    off-diagonal noise is ``1 / sqrt(2)`` of the diagonal's
    (:func:`~dptensor.mechanisms.symmetric_gaussian_release`)."""
    if not plan.private:
        return second
    return symmetric_gaussian_release(second, sensitivity, plan.z_second[0], rng,
                                      frobenius=frobenius, rounding=rounding)


class ImplicitMatrix:
    """A symmetric d x d matrix known only through its products ``matmat(Q)`` (d x p blocks)."""

    def __init__(self, d: int, matmat):
        self.shape = (d, d)
        self.matmat = matmat


def power_subspace(operator, k: int, plan: NoisePlan, rng, *, step_sensitivity: float,
                   projection_sensitivity: float, step_rounding: Rounding | None,
                   projection_rounding: Rounding | None, few_passes: bool = False,
                   frobenius: bool = False):
    """An orthonormal basis V (d x p) of M2's top subspace and the released projection ``V^T M2 V``.

    ``operator`` applies the symmetric d x d ``M2`` to a d x p block (``matmat``), never forming
    it. Private: ``plan.n_power`` steps of the noisy power method
    (:func:`~dptensor.algorithms.power.noisy_power_method`, ``p = min(2k, d)``: k oversampled
    columns), each one Gaussian release of ``M2 Q`` at ``step_sensitivity``; V spans the last one.
    Then one symmetric Gaussian release of the p x p ``V^T M2 V`` (upper triangle at
    ``projection_sensitivity``, a Frobenius-norm bound when ``frobenius``). Each sensitivity is
    raised by its rounding's allowance (:func:`whitening_roundings`). The noise is d x p per step
    and p x p at the end: nothing of size d x d is formed or noised. Every product is one pass over
    the data.

    Without privacy the exact top-k eigenpairs: ``V`` the eigenvectors and ``V^T M2 V`` their
    eigenvalues, by Lanczos on single-vector products, or (``few_passes``, for data whose every
    pass is costly, such as a Dask array) by the block power method until the top-k part of the
    iterate is still: a few block passes instead of tens of single-vector ones.
    """
    d = operator.shape[0]
    p = min(2 * k, d)
    if not plan.private and not few_passes:
        values, V = top_eigenpairs(operator, k, rng, dense_below=0)
        return V, np.diag(values)
    if plan.private:
        result = noisy_power_method(operator, k, plan.n_power, rng,
                                    noise_multiplier=np.asarray(plan.z_second[:-1]),
                                    sensitivity=step_sensitivity, rounding=step_rounding,
                                    n_oversamples=p - k)
    else:
        result = noisy_power_method(operator, k, auto_n_iter(d, False), rng, n_oversamples=p - k,
                                    tol=1e-8)
    V = result.basis
    P = V.T @ operator.matmat(V)
    P = (P + P.T) / 2.0
    if plan.private:
        P = symmetric_gaussian_release(P, projection_sensitivity, plan.z_second[-1], rng,
                                       frobenius=frobenius, rounding=projection_rounding)
    return V, P


@dataclass(frozen=True)
class Whitening:
    """``W = U diag(values)^(-1/2)`` (d x k), with left inverse ``(W^T)^+ = U diag(values)^(1/2)``.

    ``noise`` is the standard deviation of the Gaussian noise on each entry of the released
    ``M2 u`` (``u`` a unit vector): public (a noise multiplier times a sensitivity), 0 without
    privacy. To first order it moves each eigenvector by ``noise / value`` per coordinate.
    ``spread`` (k x k, see :attr:`noise_map`) is set when the vectors are mixtures of the noisy
    eigenvectors of another released matrix (:func:`whiten` with ``basis_values``).
    """

    vectors: np.ndarray
    values: np.ndarray
    noise: float = 0.0
    spread: np.ndarray | None = None

    @property
    def noise_map(self) -> np.ndarray:
        """A (k x k) with ``noise * ||A v||`` the first-order noise std, per coordinate, of
        ``unwhiten @ v``: ``diag(values)^(-1/2)`` when the vectors are the noisy eigenvectors
        themselves (``u_j`` moves by ``noise / value_j``, carrying the coefficient
        ``value_j^(1/2) v_j``)."""
        return np.diag(self.values**-0.5) if self.spread is None else self.spread

    @property
    def W(self) -> np.ndarray:
        return self.vectors / np.sqrt(self.values)

    @property
    def unwhiten(self) -> np.ndarray:
        return self.vectors * np.sqrt(self.values)


def whiten(M2, k: int, rng, basis=None, noise: float = 0.0, basis_values=None) -> Whitening:
    """Whitening from the top-k eigenpairs of ``M2``, or of ``V^T M2 V`` given ``basis=V``.

    With a basis (d x p, orthonormal columns) ``M2`` is the p x p projection and the eigenvectors
    are mapped back by V: ``W = V U_k Lambda_k^(-1/2)``. A noisy (or finite-sample) ``M2`` can
    have non-positive eigenvalues among its top k; they are floored at ``1e-6`` times the largest
    magnitude so the whitening stays finite and on the data's scale (post-processing). ``noise`` is
    recorded (see :class:`Whitening`);
    ``basis_values``: V's columns are the noisy eigenvectors, with these eigenvalues, of the
    released matrix whose noise ``noise`` describes, so the whitening's vectors ``V U_k`` move by
    their mixtures of ``noise / basis_values`` (recorded as :attr:`Whitening.spread`).
    """
    values, vectors = top_eigenpairs(M2, k, rng)
    # relative to the largest magnitude: when noise makes every top value negative, a floor at
    # 1e-6 * tiny gave a whitening near 1e157, and the data products after the spend overflowed
    # (warnings, a refused release) or not, depending on the data
    floor = 1e-6 * max(float(np.max(np.abs(values))), np.finfo(float).tiny)
    values = np.maximum(values, floor)
    spread = None
    if basis_values is not None:
        # U_k's coefficient (Lambda^(1/2) v) on V's column l moves it by noise / value_l
        # (floored as the values are: a noise-dominated release can have non-positive ones)
        basis_values = np.asarray(basis_values, dtype=float)
        basis_floor = 1e-6 * max(float(basis_values.max()), np.finfo(float).tiny)
        basis_values = np.maximum(basis_values, basis_floor)
        spread = vectors * np.sqrt(values) / basis_values[:, None]
    return Whitening(vectors if basis is None else basis @ vectors, values, float(noise), spread)


def topic_noise_std(components, scale, whitening):
    r"""The standard deviation of the whitening's noise on each entry of each topic (first order).

    A topic is ``mu_i = scale_i U Lambda^(1/2) v_i`` (``components`` holds the ``v_i`` as rows).
    The released second moment carries noise ``E`` whose product with a unit vector has iid
    entries of std ``whitening.noise``; to first order it moves ``u_j`` by
    ``(I - U U^T) E u_j / lambda_j``, about independently across ``j``, so each entry of ``mu_i``
    outside the top subspace moves with std ``scale_i noise ||Lambda^(-1/2) v_i||``. All of it is
    public (released values and the plan), so using it is post-processing.
    """
    return scale * whitening.noise * np.linalg.norm(
        np.asarray(components) @ whitening.noise_map.T, axis=1)


def m2_noise_level(noise_std: float, d: int, k: int, power: bool) -> float:
    """The typical size of the privacy noise in the top eigenvalues of the released ``M2``.

    ``noise_std`` is :attr:`Whitening.noise`, the noise's std on each entry of the released
    ``M2 u`` (a public multiplier times a public sensitivity). Analyze Gauss: the edge of the noise
    matrix's semicircle, ``2 sqrt(d) noise_std``, where the top eigenvalues of pure noise sit; the
    power method: the Ritz values' noise of its last step on ``p = min(2k, d)`` columns,
    ``sqrt(2 p) noise_std`` (:func:`~dptensor.algorithms.power.eigenvalue_noise_level`, as
    :class:`~dptensor.PrivatePCA` judges its components). An eigenvalue below twice it is
    dominated by the noise, and so is the whitening made from it.
    """
    if power:
        return eigenvalue_noise_level(noise_std, min(2 * k, d), "power")
    return eigenvalue_noise_level(noise_std, d, "analyze_gauss")


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

    :func:`~dptensor.algorithms.tensor_power.choose_moment` picks the cheaper: with k small the
    dense k^3 tensor (one GEMM) nearly always wins over ``n_queries`` implicit passes over the rows.
    """
    n, k = Y.shape
    if choose_moment(n, k, n_queries, Y.dtype.itemsize) == "dense":
        return SymmetricTensor(moment_tensor(Y))
    return ThirdMoment(Y)


def decompose_whitened(data, correction, k: int, *, sensitivity: float, rounding: Rounding | None,
                       plan: NoisePlan, method: str, n_restarts: int, n_iter: int, rng,
                       verbose: int = 0, frobenius: bool = False):
    """Release and decompose the whitened third moment ``data + correction``.

    ``data`` is the data-dependent part (a dense k x k x k array, or a tensor operator), of
    row-level l2 sensitivity ``sensitivity``; ``correction`` is public. Without privacy: the robust
    tensor power method on the sum. ``method="perturb"``: one Gaussian release of the distinct
    entries of ``data`` (then the power method is post-processing; ``frobenius``: ``sensitivity``
    bounds the Frobenius norm of the tensor's change, see
    :func:`~dptensor.mechanisms.symmetric_gaussian_release`). ``method="power"``: the
    private tensor power method (``k L (R + 1)`` Gaussian queries of the sum). ``rounding``: the
    data part's (:func:`rounding`), raising the sensitivity of either release; a power query
    adds its contraction and the correction (the deflation's offsets are the power method's).

    Returns ``(components (k, k), eigenvalues (k,))``.
    """
    if plan.private and method == "perturb":
        dense = data if isinstance(data, np.ndarray) else _dense(data)
        # input perturbation (tensor_power.perturb_tensor), here with the sum's rounding
        noisy = symmetric_gaussian_release(dense, sensitivity, plan.z_third, rng,
                                           frobenius=frobenius, rounding=rounding)
        operator = SymmetricTensor(noisy + correction)
        noise = None
    else:
        base = SymmetricTensor(data) if isinstance(data, np.ndarray) else data
        operator = CorrectedTensor(base, correction)
        noise = None
        if plan.private:  # a query contracts the data and the public correction: both round
            query = _query_rounding(rounding, correction, k)
            noise = PowerNoise(plan.z_third, sensitivity, query=query)
    return tensor_power_method(operator, k, n_restarts, n_iter, rng, noise, verbose=verbose)


def _query_rounding(data: Rounding | None, correction, k: int) -> Rounding | None:
    """A power query ``(T + C)(I, u, u)`` (or ``(u, u, u)``) for unit ``u``: the data tensor's
    entries, contracted over ``k^2`` of them (``|| |T|(I, |u|, |u|) || <= ||T||_F``), plus the
    public correction's, whose Frobenius norm joins the total. ``k^2 + k`` operations cover
    either path of the dense contraction (the compiled one's ``3 + (k + 1) (k + 2) / 2`` from
    k = 4 on, and it runs only from k = 96)."""
    if data is None:
        return None
    return Rounding(total=data.total + float(np.linalg.norm(correction)),
                    terms=data.terms + k * k + k, dtype=data.dtype)


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
