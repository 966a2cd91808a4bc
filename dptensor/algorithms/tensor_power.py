r"""The robust tensor power method (Wang & Anandkumar 2016, Alg. 1), and its private form (Alg. 3).

:func:`tensor_power_method` runs over any tensor operator (:mod:`dptensor.algorithms.operators`);
given a :class:`PowerNoise` plan it releases every query through the Gaussian mechanism. Around
it: the sensitivities of its queries (tensor-entry and row neighbours), their roundings, the
number of queries and the noise multiplier they need, the choice between a dense and an implicit
moment, input perturbation, and each row's moment-fit score.

All L restarts of one component advance together: a power step is one
``operator.apply_evaluate`` over the d x L block of candidates, and deflation goes through
:class:`~dptensor.algorithms.operators.DeflatedTensor` (never a dense update of T). The
sensitivities are derived in ``docs/derivations/tensor_decomposition.rst`` and checked by brute
force in the tests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .power import normalize_columns, random_unit_columns, select_restart
from ..accounting.calibration import calibrate_gaussian, paper_tensor_power_noise
from ..mechanisms import Rounding, clip_rows, gaussian_release, symmetric_gaussian_release
from .exact import BITS, Exact, exact_gaussian_release, grid_vectors, moment_sensitivities
from .grouped_tensor import group_moment_sensitivities
from .operators import DeflatedTensor
from .symmetric_contraction import contraction_terms

__all__ = ["PowerNoise", "tensor_power_method", "plan_noise_multiplier", "n_power_queries",
           "entry_sensitivities", "row_sensitivity", "choose_moment", "perturb_tensor",
           "moment_fit_scores", "moment_roundings", "dense_moment_rounding", "eigenvalue_noise",
           "ENTRY_SENSITIVITY", "PURE_NOISE_TENSOR_TOP",
           "FORM_SPEEDUP", "DENSE_MOMENT_MAX_BYTES", "MOMENT_SCORE_RANGE"]

#: l2 sensitivity of a tensor's distinct entries under Def. 4.2 (``T' - T = ±sym(e_i⊗e_j⊗e_k)``):
#: one orbit changes, by at most 6 (i = j = k).
ENTRY_SENSITIVITY = 6.0

#: Largest dense d^3 tensor ``moment="auto"`` will form, in bytes.
DENSE_MOMENT_MAX_BYTES = 2**30

#: How much faster per flop the one-off GEMM that forms a dense moment runs than a power step's
#: thin products. Two runs of the crossover benchmark on a quiet machine (n=2e4, d=50, one BLAS
#: thread) put the crossover at about 650 and 1700 column-queries (forming T took 0.2-0.45 s);
#: c = 1.4 puts the model's crossover (920) between them. Near the crossover both paths cost about
#: the same, so the choice only matters away from it, where the model is clear.
FORM_SPEEDUP = 1.4


# ----------------------------------------------------------------------------------------------
# Sensitivities and the noise plan
# ----------------------------------------------------------------------------------------------

def entry_sensitivities(U):
    """Per-column l2 sensitivities of ``T(I,u,u)`` and ``T(u,u,u)`` under tensor-entry neighbours.

    For a neighbour ``T' = T ± sym(e_i⊗e_j⊗e_k)`` (the sum of the 6 index permutations), the change
    is ``6 ||u||_inf^2`` for the vector query and ``6 ||u||_inf^3`` for the scalar, both reached at
    i = j = k (derivation: ``docs/derivations/tensor_decomposition.rst``).

    Returns two arrays of shape (L,).
    """
    top = np.max(np.abs(np.asarray(U, dtype=float)), axis=0)
    return ENTRY_SENSITIVITY * top**2, ENTRY_SENSITIVITY * top**3


def row_sensitivity(data_norm: float, n_samples: int) -> float:
    """l2 sensitivity ``2 B^3 / n`` of both moment queries when one row (norm <= B) is replaced.

    ``T = (1/n) sum_l x_l⊗3``; replacing x by x' moves ``T(I,u,u)`` by
    ``((x.u)^2 x - (x'.u)^2 x') / n`` and ``T(u,u,u)`` by ``((x.u)^3 - (x'.u)^3) / n``, each of norm
    at most ``2 B^3 / n`` for a unit u (reached at x = B u, x' = -B u). The same number bounds the
    change of the moment's distinct entries (used by input perturbation).
    """
    return 2.0 * float(data_norm) ** 3 / float(n_samples)


@dataclass(frozen=True)
class PowerNoise:
    """The noise plan of Alg. 3: one multiplier ``z`` and the privacy unit's sensitivities.

    ``row_sensitivity=None`` means tensor-entry neighbours (the noise of each restart scales with
    its previous iterate, which is already public); a number means row-level neighbours with that
    fixed sensitivity for both queries.
    """

    noise_multiplier: float
    row_sensitivity: float | None = None
    #: ``(data_norm, n_samples)`` when the queries are exact sums of grid rows
    #: (:class:`~dptensor.algorithms.exact.ExactThirdMoment`): their sensitivities carry the
    #: grid's allowance.
    grid: tuple | None = None
    #: ``(data_norm, n_samples)`` when the queries are float sums over rows (a dense moment
    #: summed in float64): their rounding is :func:`moment_roundings`'. ``None``: exact sums
    #: (``grid``), or a 3-way tensor under the entry unit (see :func:`tensor_power_method`).
    rows: tuple | None = None
    #: The rounding of a vector query on another float operator (the latent models' corrected
    #: moments), to which the deflation's subtraction and the scalar query are added here.
    query: Rounding | None = None
    #: The entry bound of a tensor on its exact entry grid
    #: (:class:`~dptensor.algorithms.exact_entries.ExactEntryTensor`): the queries are exact, at
    #: the entry-level sensitivities of the grid columns with each entry moving by this much.
    entry_bound: float | None = None
    #: ``(data_norm, n_groups)`` when the queries are exact sums of group-scaled grid rows
    #: (:class:`~dptensor.algorithms.grouped_tensor.ExactGroupMoment`): one group is the unit.
    groups: tuple | None = None

    def roundings(self, d: int, eigenvalues):
        """(vector-query, scalar-query) :class:`~dptensor.mechanisms.Rounding`, or
        ``(None, None)``."""
        if self.rows is not None:
            return moment_roundings(*self.rows, d, eigenvalues)
        if self.query is None:
            return None, None
        # the public deflation sum_j lambda_j (v_j . u)^2 v_j: one subtraction, sum |lambda_j|
        deflation = float(np.sum(np.abs(np.asarray(eigenvalues, dtype=float))))
        vector = Rounding(self.query.total + deflation, self.query.terms + 1, self.query.dtype)
        return vector, Rounding(vector.total, vector.terms + d + 1, vector.dtype)

    def sensitivities(self, U):
        """(vector-query, scalar-query) sensitivities, one per column of U, shape (L,) each."""
        if self.grid is not None:
            return moment_sensitivities(grid_vectors(U), *self.grid)
        if self.groups is not None:
            return group_moment_sensitivities(grid_vectors(U), *self.groups)
        if self.entry_bound is not None:
            vector, scalar = entry_sensitivities(grid_vectors(U) * 2.0 ** -BITS)
            return vector * self.entry_bound, scalar * self.entry_bound
        if self.row_sensitivity is None:
            return entry_sensitivities(U)
        s = np.full(U.shape[1], float(self.row_sensitivity))
        return s, s


#: The top eigenvalue the robust power method finds in a symmetric d x d x d Gaussian tensor whose
#: distinct entries have std sigma, in units of ``sqrt(d) sigma``: ``E(u,u,u)`` has variance about
#: ``6 sigma^2`` at a unit u, and the spherical 3-spin model's maximum is ``1.657 sqrt(d)`` times
#: its std, so ``sqrt(6) 1.657 = 4.06`` for large d (3.2 to 3.6 measured at d = 5 to 60).
PURE_NOISE_TENSOR_TOP = 4.0


def eigenvalue_noise(noise_multiplier: float, sensitivity, d: int, method: str, components=None):
    r"""The typical size of the privacy noise in each released eigenvalue: public or released
    values only (the plan's multiplier and sensitivity, and the released components).

    ``method="power"``: the norm of one power step's noise, ``sqrt(d) z s_2``. At ``u = v_i`` a
    step returns ``lambda_i v_i`` plus it, so a component whose eigenvalue is not clearly above it
    is mostly noise, and one that was never found releases ``T(u,u,u)`` of a few ``z s_3``, far
    below it. Rows: ``s_2 = 2 B^3 / n`` (``sensitivity``); the tensor-entry unit
    (``sensitivity=None``): ``6 ||v_i||_inf^2``, at the released component ``v_i``.
    ``"input_perturbation"``: where the top eigenvalues of the noise tensor alone sit,
    :data:`PURE_NOISE_TENSOR_TOP` ``sqrt(d) z s``, with ``s`` the distinct entries' sensitivity
    (``2 B^3 / n``, or 6 for the tensor-entry unit). Returns one level per component (zeros when
    ``noise_multiplier`` is 0; ``components`` sets their number).

    >>> eigenvalue_noise(2.0, 0.5, 100, "power", np.zeros((3, 100))).tolist()
    [10.0, 10.0, 10.0]
    """
    V = np.asarray(components, dtype=float)
    z, root = float(noise_multiplier), float(np.sqrt(d))
    if method == "input_perturbation":
        s = ENTRY_SENSITIVITY if sensitivity is None else float(sensitivity)
        return np.full(len(V), PURE_NOISE_TENSOR_TOP * root * z * s)
    if sensitivity is None:  # the entry unit: a step's noise scales with its iterate's peak
        return root * z * ENTRY_SENSITIVITY * np.max(np.abs(V), axis=1, initial=0.0) ** 2
    return np.full(len(V), root * z * float(sensitivity))


def moment_roundings(data_norm: float, n_samples: int, d: int, eigenvalues=()):
    r"""The rounding of ``(T - D)(I,u,u)`` and ``(T - D)(u,u,u)`` on a dense float64 moment of rows.

    Every elementary term ``x_a x_b x_c u_b u_c / n`` passes through: the sum over the ``n`` rows
    with the moment's scalings (``/ n``; on Dask a chunk's ``/ m`` and ``* m`` too): ``n + 3``;
    the contraction, on either of its paths: the packed weight, two products and a sum of at
    most ``(d + 1) (d + 2) / 2`` summands started at zero
    (:func:`~dptensor.algorithms.symmetric_contraction.contraction_terms`); the deflation's
    subtraction: 1; the scalar query adds ``u . T(I,u,u)``: ``d + 1``. In
    l2 a row's terms add at most ``||x|| (|x| . |u|)^2 / n <= B^3 / n`` (unit ``u``) and the
    public deflation ``sum_j lambda_j (v_j . u)^2 v_j`` at most ``sum_j |lambda_j|``:
    ``total = B^3 + sum_j |lambda_j|`` for both queries.
    """
    terms = int(n_samples) + 3 + contraction_terms(d) + 1
    total = float(data_norm) ** 3 + float(np.sum(np.abs(np.asarray(eigenvalues, dtype=float))))
    return Rounding(total, terms), Rounding(total, terms + d + 1)


def dense_moment_rounding(data_norm: float, n_samples: int) -> Rounding:
    """The rounding of the dense moment's distinct entries (input perturbation on rows): a sum of
    ``n`` rows with the scalings (``n + 3`` operations), each row adding ``||x||^3 / n <= B^3 / n``
    to their l2 norm: ``total = B^3``."""
    return Rounding(float(data_norm) ** 3, int(n_samples) + 3)


def n_power_queries(n_components: int, n_restarts: int, n_iter: int) -> int:
    """``K = k L (R + 1)``: R vector queries and one eigenvalue query per restart and component."""
    return int(n_components) * int(n_restarts) * (int(n_iter) + 1)


def plan_noise_multiplier(epsilon: float, delta: float, n_queries: int,
                          calibration: str = "exact") -> float:
    """Noise multiplier for ``n_queries`` adaptive Gaussian queries at target ``(epsilon, delta)``.

    ``"exact"``: the GDP optimum (:func:`~dptensor.accounting.calibrate_gaussian`), so the cost the
    accountant records equals the target. ``"paper"``: Wang–Anandkumar's ``nu / 6``
    (:func:`~dptensor.accounting.paper_tensor_power_noise`); it over-spends the noise, and the
    accountant records what that noise really costs.
    """
    if calibration == "exact":
        return calibrate_gaussian(epsilon, delta, n_queries)
    if calibration == "paper":
        return paper_tensor_power_noise(epsilon, delta, n_queries)
    raise ValueError(f"calibration must be 'exact' or 'paper', got {calibration!r}")


# ----------------------------------------------------------------------------------------------
# The algorithm
# ----------------------------------------------------------------------------------------------

def tensor_power_method(operator, n_components: int, n_restarts: int, n_iter: int, rng,
                        noise=None, *, dtype=np.float64, verbose: int = 0):
    """Robust tensor power method with deflation (Alg. 1); with ``noise``, its private form
    (Alg. 3).

    Parameters
    ----------
    operator : tensor operator
        Anything with ``shape`` (d, d, d) and batched ``apply_evaluate(U)`` / ``evaluate(U)`` (see
        :mod:`dptensor.algorithms.operators`); it is deflated through ``DeflatedTensor``.
    n_components, n_restarts, n_iter : int
        k, L and R.
    rng : numpy.random.Generator
    noise : PowerNoise or None
        ``None`` runs Alg. 1. Otherwise every query is released with Gaussian noise of std
        ``noise_multiplier * sensitivity``: ``(T-D)(I,u,u)`` at each of the R steps, and
        ``(T-D)(u_R,u_R,u_R)`` once per restart: ``K = k L (R + 1)`` releases in all. The caller
        must have recorded that spend already.
    dtype : numpy dtype
        Dtype of the candidate block (float32 stays float32).

    Returns
    -------
    components : ndarray of shape (k, d)
    eigenvalues : ndarray of shape (k,)
    """
    d = operator.shape[0]
    components = np.zeros((n_components, d), dtype=dtype)
    eigenvalues = np.zeros(n_components, dtype=dtype)
    for i in range(n_components):
        deflated = DeflatedTensor(operator, eigenvalues[:i], components[:i])
        U = random_unit_columns(d, n_restarts, rng, dtype)
        rounding = noise.roundings(d, eigenvalues[:i]) if noise is not None else None
        stepwise = noise is not None or verbose > 1 or (verbose and d >= 1000)
        # nothing to release or print between steps: the compiled steps where there are some
        fast = None if stepwise else deflated.compiled_power_steps(U, n_iter)
        U = fast if fast is not None else _power_steps(deflated, U, n_iter, rng, noise, dtype,
                                                       rounding, verbose, (i, n_components))
        lams = deflated.evaluate(U)
        if noise is not None:
            _, s_val = noise.sensitivities(U)
            lams = _release(lams, s_val, noise.noise_multiplier, rng, dtype, rounding[1])
        best = select_restart(lams)
        components[i], eigenvalues[i] = U[:, best], lams[best]
        if verbose:
            print(f"[tensor_power_method] component {i + 1}/{n_components}: "
                  f"eigenvalue {float(eigenvalues[i]):.6g} (restart {best})")
    return components, eigenvalues


def _power_steps(deflated, U, n_iter, rng, noise, dtype, rounding, verbose, component):
    """R power steps of U's columns, each released through ``noise`` where it is not None."""
    d, (i, n_components) = U.shape[0], component
    for step in range(1, n_iter + 1):
        TU = deflated.apply(U)
        if noise is not None:
            s_vec, _ = noise.sensitivities(U)
            TU = _release(TU, s_vec, noise.noise_multiplier, rng, dtype, rounding[0])
        U = normalize_columns(TU)
        if verbose > 1 or (verbose and d >= 1000 and step % max(1, n_iter // 5) == 0):
            # progress within a component: public counts only (large d: a component takes long)
            print(f"[tensor_power_method] component {i + 1}/{n_components}: "
                  f"step {step}/{n_iter} of {U.shape[1]} restarts", flush=True)
    return U


def _release(value, sensitivity, noise_multiplier, rng, dtype, rounding):
    """A query's Gaussian release; an exact statistic is rounded to its grid exactly first, a
    float one released with its ``rounding``."""
    if isinstance(value, Exact):
        return exact_gaussian_release(value, sensitivity, noise_multiplier, rng, dtype=dtype)
    return gaussian_release(value, sensitivity, noise_multiplier, rng, dtype=dtype,
                            rounding=rounding)


#: Public range of one row's moment-fit score (see :func:`moment_fit_scores`).
MOMENT_SCORE_RANGE = (-3.0, 2.0)


def moment_fit_scores(X, components, eigenvalues, data_norm):
    r"""Each row's share of ``||T||^2 - ||T - T_hat||^2`` for ``T_hat = sum_i lambda_i v_i⊗3``.

    For rows clipped to ``B = data_norm`` the share of row ``x`` is
    ``(2 <T_hat, x⊗3> - ||T_hat||^2) / B^6`` with ``<T_hat, x⊗3> = sum_i lambda_i (v_i.x)^3``
    and ``||T_hat||^2 = sum_ij lambda_i lambda_j (v_i.v_j)^3``; its mean over rows is the
    moment-fit score. When ``||T_hat||_F <= B^3`` (which the moment of rows of norm ``B`` obeys)
    the share lies in [-3, 2] (Cauchy–Schwarz: ``|<T_hat, x⊗3>| <= ||T_hat|| B^3``); it is clipped
    to that range in any case, so each row's score is bounded whatever the model. Returns
    ``(scores, range)``; without ``data_norm`` the shares are unnormalised and the range ``None``.
    """
    V = np.asarray(components, dtype=float)
    lam = np.asarray(eigenvalues, dtype=float)
    if data_norm is not None:
        X = clip_rows(X, data_norm)
    fit = (X @ V.T) ** 3 @ lam
    norm2 = float(lam @ ((V @ V.T) ** 3) @ lam)
    values = 2.0 * fit - norm2
    if data_norm is None:
        return values, None
    return np.clip(values / float(data_norm) ** 6, *MOMENT_SCORE_RANGE), MOMENT_SCORE_RANGE


def choose_moment(n_samples: int, n_features: int, n_column_steps: int, itemsize: int = 8,
                  max_bytes: int = DENSE_MOMENT_MAX_BYTES) -> str:
    """``"dense"`` or ``"implicit"``: which way of holding the third moment of X (n x d) is cheaper.

    Flop model, with S = k L (R + 1) column-queries in the whole fit:

    * implicit, ``X^T (X U)^2``: about ``4 n d`` flops per column-query, so ``4 n d S``;
    * dense: ``2 n d^3`` to form T once, then ``d^3`` per column-query (the packed product of
      :class:`~dptensor.algorithms.operators.SymmetricTensor`, which uses the symmetry of T).

    Forming T is one large GEMM, which runs about ``c =`` :data:`FORM_SPEEDUP` (1.4) times faster
    per flop than the thin per-step products (both kinds of step run at similar rates), so dense
    wins when ``2 n d^3 / c + d^3 S < 4 n d S``: that needs ``n > d^2 / 4`` and then
    ``S > 2 n d^2 / (c (4 n - d^2))`` (about ``d^2 / (2c)`` column-queries when ``n >> d^2``), and
    only if the d^3 tensor and its packed half fit in ``max_bytes`` (1 GiB by default: d <= 447 in
    float64). The benchmarks measure the real crossover against this model.
    """
    n, d, S = float(n_samples), float(n_features), float(n_column_steps)
    if 1.5 * d**3 * itemsize > max_bytes:
        return "implicit"
    dense = 2 * n * d**3 / FORM_SPEEDUP + d**3 * S
    return "dense" if dense < 4 * n * d * S else "implicit"


def perturb_tensor(T, sensitivity: float, noise_multiplier: float, rng, frobenius: bool = False,
                   rounding: Rounding | None = None):
    """Input perturbation: ``T + E`` with E symmetric Gaussian, each distinct entry of std
    ``noise_multiplier * sensitivity`` (one Gaussian release of the distinct entries, through
    :func:`~dptensor.mechanisms.symmetric_gaussian_release`); with ``frobenius``, ``sensitivity``
    bounds the Frobenius norm of the whole tensor's change and an entry with m positions gets
    ``1 / sqrt(m)`` of that std. ``rounding``: that of a float sum ``T`` (a moment of rows:
    :func:`dense_moment_rounding`); ``None`` for a tensor whose every entry is one unit's own
    value (the tensor-entry unit: no sum)."""
    return symmetric_gaussian_release(T, sensitivity, noise_multiplier, rng, frobenius=frobenius,
                                      rounding=rounding)

