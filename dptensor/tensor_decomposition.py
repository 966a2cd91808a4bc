r"""Orthogonal tensor decomposition by the robust tensor power method, private or not.

Two layers, as everywhere in dptensor:

* plain functions (no scikit-learn): :func:`tensor_power_method` runs Wang–Anandkumar Alg. 1 over
  any tensor operator, and Alg. 3 when given a :class:`PowerNoise` plan; :func:`plan_noise_multiplier`,
  :func:`choose_moment` and :func:`perturb_tensor` are the pieces around it;
* the estimator :class:`PrivateTensorDecomposition`, which validates, prices the release with the
  accountant *before* any noisy query, and calls them.

All L restarts of one component advance together: a power step is one
``operator.apply_evaluate`` over the d x L block of candidates, and deflation goes through
:class:`~dptensor._operators.DeflatedTensor` (never a dense update of T). The sensitivities are
derived in ``docs/derivations/tensor_decomposition.rst`` and checked by brute force in the tests.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import PrivateEstimatorMixin
from ._exact import (Exact, ExactThirdMoment, exact_gaussian_release, exact_memory, grid_rows, grid_vectors, map_rows,
                     moment_sensitivities)
from ._dask import DaskThirdMoment, check_dask_array, clip_chunks, dask_moment_tensor, is_dask_array
from ._operators import DeflatedTensor, SymmetricTensor, ThirdMoment, moment_tensor
from .algorithms.power import normalize_columns, random_unit_columns, select_restart
from ._memory import FLOAT
from ._validation import (check_data_norm, check_positive_int, check_symmetric_tensor, check_verbose,
                          validate_private_data)
from .accounting.calibration import calibrate_gaussian, paper_tensor_power_noise
from .accounting.events import GaussianEvent, NonPrivateEvent
from .mechanisms import Rounding, clip_rows, gaussian_release, symmetric_gaussian_release

__all__ = ["PrivateTensorDecomposition", "PowerNoise", "tensor_power_method", "plan_noise_multiplier",
           "n_power_queries", "entry_sensitivities", "row_sensitivity", "choose_moment",
           "perturb_tensor", "ENTRY_SENSITIVITY", "FORM_SPEEDUP", "moment_roundings",
           "dense_moment_rounding"]

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
    #: (:class:`~dptensor._exact.ExactThirdMoment`): their sensitivities carry the grid's allowance.
    grid: tuple | None = None
    #: ``(data_norm, n_samples)`` when the queries are float sums over rows (a dense moment
    #: summed in float64): their rounding is :func:`moment_roundings`'. ``None``: exact sums
    #: (``grid``), or a 3-way tensor under the entry unit (see :func:`tensor_power_method`).
    rows: tuple | None = None
    #: The rounding of a vector query on another float operator (the latent models' corrected
    #: moments), to which the deflation's subtraction and the scalar query are added here.
    query: Rounding | None = None

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
        if self.row_sensitivity is None:
            return entry_sensitivities(U)
        s = np.full(U.shape[1], float(self.row_sensitivity))
        return s, s


def moment_roundings(data_norm: float, n_samples: int, d: int, eigenvalues=()):
    r"""The rounding of ``(T - D)(I,u,u)`` and ``(T - D)(u,u,u)`` on a dense float64 moment of rows.

    Every elementary term ``x_a x_b x_c u_b u_c / n`` passes through: the sum over the ``n`` rows
    with the moment's scalings (``/ n``; on Dask a chunk's ``/ m`` and ``* m`` too): ``n + 3``;
    the packed weight and the product with ``u_b u_c``: 2; the sum over the ``d (d + 1) / 2``
    pairs; the deflation's subtraction: 1; the scalar query adds ``u . T(I,u,u)``: ``d + 1``. In
    l2 a row's terms add at most ``||x|| (|x| . |u|)^2 / n <= B^3 / n`` (unit ``u``) and the
    public deflation ``sum_j lambda_j (v_j . u)^2 v_j`` at most ``sum_j |lambda_j|``:
    ``total = B^3 + sum_j |lambda_j|`` for both queries.
    """
    terms = int(n_samples) + 3 + 2 + d * (d + 1) // 2 + 1
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


def plan_noise_multiplier(epsilon: float, delta: float, n_queries: int, calibration: str = "exact") -> float:
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

def tensor_power_method(operator, n_components: int, n_restarts: int, n_iter: int, rng, noise=None,
                        *, dtype=np.float64, verbose: int = 0):
    """Robust tensor power method with deflation (Alg. 1); with ``noise``, its private form (Alg. 3).

    Parameters
    ----------
    operator : tensor operator
        Anything with ``shape`` (d, d, d) and batched ``apply_evaluate(U)`` / ``evaluate(U)`` (see
        :mod:`dptensor._operators`); it is deflated through ``DeflatedTensor``.
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
        for step in range(1, n_iter + 1):
            TU = deflated.apply(U)
            if noise is not None:
                s_vec, _ = noise.sensitivities(U)
                TU = _release(TU, s_vec, noise.noise_multiplier, rng, dtype, rounding[0])
            U = normalize_columns(TU)
            if verbose > 1 or (verbose and d >= 1000 and step % max(1, n_iter // 5) == 0):
                # progress within a component: public counts only (large d: a component takes long)
                print(f"[tensor_power_method] component {i + 1}/{n_components}: step {step}/{n_iter} "
                      f"of {n_restarts} restarts", flush=True)
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
      :class:`~dptensor._operators.SymmetricTensor`, which uses the symmetry of T).

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


# ----------------------------------------------------------------------------------------------
# The estimator
# ----------------------------------------------------------------------------------------------

class PrivateTensorDecomposition(ClassNamePrefixFeaturesOutMixin, TransformerMixin, PrivateEstimatorMixin,
                                 BaseEstimator):
    r"""Orthogonal decomposition ``T ~ sum_i lambda_i v_i⊗3`` by the robust tensor power method.

    ``fit(X)`` accepts either a symmetric d x d x d tensor, or data X (n x d), decomposed through its
    empirical third moment ``T = (1/n) sum_l x_l⊗3`` (never formed unless ``moment`` says so).
    With ``epsilon=np.inf`` it runs Alg. 1 (Wang & Anandkumar 2016): for each component, L random
    restarts, R power steps ``u <- T(I,u,u)/||.||``, the restart with the largest ``T(u,u,u)``
    wins, then deflation. With a finite epsilon it runs Alg. 3 (every query noised) or the
    input-perturbation baseline.

    Notes
    -----
    *Privacy unit.* For a 3-D X, one tensor entry (Def. 4.2): neighbours differ by
    ``±sym(e_i⊗e_j⊗e_k)``, the sum of the 6 index permutations. For a 2-D X, one row: rows are
    clipped to l2 norm ``data_norm`` and n is public.

    *What is released.* ``components_`` and ``eigenvalues_`` (and the fact of which restarts won,
    which is computed from released values only).

    *Guarantee.* ``(epsilon, delta)``-DP for that unit. ``method="power"`` makes
    ``K = k L (R + 1)`` adaptive Gaussian releases: ``(T-D)(I,u,u) + z s_2(u) g`` and
    ``(T-D)(u,u,u) + z s_3(u) g``, with ``s_2 = 6||u||_inf^2``, ``s_3 = 6||u||_inf^3`` (tensor
    entry) or ``s_2 = s_3 = 2 B^3/n`` (row), where u is the previous release (so a noise scale that
    depends on it is allowed by adaptive composition) and D is built from released values only.
    ``method="input_perturbation"`` releases T once plus a symmetric Gaussian tensor whose distinct
    entries have std ``z * 6`` (tensor entry) or ``z * 2 B^3/n`` (row), then runs Alg. 1 on it
    (post-processing). With ``calibration="exact"`` z is the Gaussian-DP optimum, so the recorded
    cost equals the target; ``"paper"`` uses the paper's formula (``nu = 6 z``) and records what
    that noise really costs (less than the target). The cost is checked and recorded with
    ``accountant`` before the first noisy query.

    Parameters
    ----------
    n_components : int or None, default=None
        Number of components k; ``None`` means d. The noise of a private fit grows like
        ``sqrt(k)``: choose k.
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` runs the non-private Alg. 1, which costs epsilon = infinity
        (an accountant with a finite budget refuses it).
    delta : float or None, default=None
        ``None`` takes the accountant's delta (1e-5 without an accountant). A private fit on rows
        warns (``PrivacyWarning``) when delta is not below ``1/n_samples``.
    n_restarts : int, default=10
        L, random restarts per component, all advanced in one batched step.
    n_iter : int, default=20
        R, power steps per restart.
    method : {"power", "input_perturbation"}, default="power"
        Alg. 3, or the baseline that perturbs the tensor once (forms the dense d^3 tensor).
    calibration : {"exact", "paper"}, default="exact"
        How the noise multiplier is chosen for ``(epsilon, delta)``: exact Gaussian-DP composition,
        or the paper's advanced-composition formula (several times more noise for the same
        guarantee; for comparison only, see the privacy model).
    data_norm : float or None, default=None
        Public bound B on the rows' l2 norm (2-D X); rows are clipped to it. Required when epsilon
        is finite; ignored for a 3-D X.
    moment : {"auto", "implicit", "dense"}, default="auto"
        How the third moment of 2-D data is held for ``method="power"``. ``"implicit"`` costs
        O(ndL) per step and O(nd + dL) memory; ``"dense"`` forms T in O(nd^3) time and O(d^3) memory,
        then costs O(d^3 L) per step; ``"auto"`` picks by :func:`choose_moment` (``"implicit"``
        for a Dask X, whose d^3 tensor would be summed on the client, and for a private fit, whose
        implicit queries are exact sums of grid rows: ``docs/derivations/exact_sums.rst``; a
        private ``"dense"`` fit sums in float64, with the gap the privacy guide states). A fit
        whose memory bound (these sizes, from the shape) exceeds what the process can allocate is
        refused before its spend (:class:`~dptensor.MemoryRefusedError`).
    symmetrize : bool, default=False
        For a 3-D X that is not symmetric: use its symmetric part instead of raising. Changing one
        entry of X by at most 1 changes the symmetric part by ``sym(e_i⊗e_j⊗e_k)/6``, a sixth of a
        Def. 4.2 step, so the guarantee still holds for that unit.
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) is the only choice fit for a real release: a known seed lets
        anyone subtract the noise.
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Unit vectors ``v_i``, in the order found.
    eigenvalues_ : ndarray of shape (n_components,)
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only for a 2-D X with string column names.
    moment_ : str
        ``"tensor"`` (3-D X), ``"implicit"`` or ``"dense"``.
    privacy_cost_ : PrivacyCost

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor import PrivateTensorDecomposition
    >>> V = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 2)))[0].T
    >>> T = np.einsum("i,ia,ib,ic->abc", [3.0, 1.0], V, V, V)
    >>> model = PrivateTensorDecomposition(n_components=2, random_state=0).fit(T)
    >>> np.round(model.eigenvalues_, 6).tolist()
    [3.0, 1.0]
    """

    def __init__(self, n_components=None, *, epsilon=np.inf, delta=None, n_restarts=10, n_iter=20,
                 method="power", calibration="exact", data_norm=None, moment="auto", symmetrize=False,
                 accountant=None, random_state=None, verbose=0):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.method = method
        self.calibration = calibration
        self.data_norm = data_norm
        self.moment = moment
        self.symmetrize = symmetrize
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # -- fit -----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Decompose X (n x d data, or a d x d x d symmetric tensor); ``y`` is ignored.

        A ``dask.array.Array`` of data stays where it is: it is validated lazily and every power
        step is one reduction over its row chunks (see ``docs/dask.rst``); the noise is drawn here,
        as for an in-memory X, so the fit and its privacy cost are the same.
        """
        dask = is_dask_array(X)
        if dask:  # Dask data: never materialised here (np.asarray would pull all of it)
            X = check_dask_array(self, X)
        else:
            X = validate_private_data(self, X, allow_nd=True, dtype=[np.float64, np.float32])
        if X.ndim not in (2, 3):
            raise ValueError(f"X must be 2-D data (n_samples, n_features) or a 3-D symmetric tensor, "
                             f"got {X.ndim} dimensions")
        epsilon, delta = self._privacy_target()
        d = X.shape[1]
        k = self._check_params(d)
        L, R = self.n_restarts, self.n_iter
        private = math.isfinite(epsilon)
        entropy = self._entropy()

        if X.ndim == 3:
            T = check_symmetric_tensor(X, symmetrize=self.symmetrize)
            sensitivity = None
        else:
            data_norm = check_data_norm(self.data_norm, epsilon)
            self._check_delta_for(X.shape[0], epsilon, delta)
            sensitivity = row_sensitivity(data_norm, X.shape[0]) if private else None

        # The spend, from public values only: a refused fit computes nothing from the data.
        event, z, K = self._plan_spend(epsilon, delta, k)
        memory = self._fit_memory(X.shape, k, X.dtype.itemsize, dask)
        self.privacy_cost_, rng = self._spend(event or NonPrivateEvent("epsilon=inf"), entropy=entropy,
                                              delta=delta, noise_multiplier=z, n_queries=K,
                                              calibration=self.calibration, data_shape=X.shape,
                                              memory=memory, data=(X,))

        if X.ndim == 3:
            base, self.moment_ = SymmetricTensor(T), "tensor"
        else:
            raw, X = X, clip_chunks(X, data_norm) if dask else clip_rows(X, data_norm)
            self.moment_ = self._pick_moment(X, k)
            if dask:  # the same moment, summed (dense) or applied (implicit) chunk by chunk on the workers;
                # the implicit one clips each chunk inside its own task rather than in a layer of its own
                clip = None if data_norm is None else functools.partial(clip_rows, data_norm=data_norm)
                wide = X.astype(np.float64) if private else X  # chunk by chunk, on the workers
                base = (SymmetricTensor(dask_moment_tensor(wide)) if self.moment_ == "dense"
                        else DaskThirdMoment(raw, prepare=clip))
            else:  # a private dense moment is summed in float64, whose rounding is allowed for
                base = (SymmetricTensor(moment_tensor(X, np.float64 if private else None))
                        if self.moment_ == "dense" else ThirdMoment(X))

        rows = None if X.ndim == 3 else (data_norm, X.shape[0])
        # OPEN: a 3-way tensor's power queries are float sums over entries that no public bound
        # limits (rows=None): no public allowance covers their rounding (tensor_decomposition.rst).
        power = private and self.method == "power"
        noise = PowerNoise(z, sensitivity, rows=rows) if power else None
        if noise is not None and self.moment_ == "implicit":  # exact sums of grid rows at any n
            base = ExactThirdMoment(map_rows(raw, grid_rows, data_norm), data_norm, X.shape[0])
            noise = PowerNoise(z, sensitivity, grid=(data_norm, X.shape[0]))
        if private and self.method == "input_perturbation":  # noise on the tensor's distinct entries
            T = base.T if isinstance(base, SymmetricTensor) else moment_tensor(X, np.float64)
            scale = ENTRY_SENSITIVITY if sensitivity is None else sensitivity
            # a 3-way tensor's entries are each one unit's own value (no sum); a moment is a sum
            rounding = None if rows is None else dense_moment_rounding(*rows)
            base = SymmetricTensor(perturb_tensor(T, scale, z, rng, rounding=rounding))

        self.components_, self.eigenvalues_ = tensor_power_method(
            base, k, L, R, rng, noise, dtype=X.dtype, verbose=self.verbose)
        return self

    def _fit_memory(self, shape, k, itemsize=8, dask=False):
        """``(bytes, advice)``: the fit's peak allocation from the shape of ``X`` (rows, or a
        tensor) and the parameters, in float64. A tensor: its packed half and the symmetric noise
        of input perturbation (a few d^3). Rows: the clipped copy (none on Dask) and the moment
        chosen: the dense d^3 one with its packed half and one block of its Khatri-Rao product,
        or the implicit one's n x L products per step."""
        n, d, L = shape[0], shape[1], self.n_restarts
        small = 8 * d * (k + L) + 4 * L * L
        advice = ("Use moment='implicit' (O(n L) per step instead of d^3), fewer features, or "
                  "method='power' (input perturbation forms the d^3 tensor)")
        if len(shape) == 3:
            return (4 * d**3 + small) * FLOAT, advice
        rows = 0 if dask else 2 * n * d  # the clipped copy, and a chunk's slice of it
        if self._moment_for(shape, itemsize, dask, k) == "dense":
            perturbed = math.isfinite(self.epsilon) and self.method == "input_perturbation"
            noise = 2 * d**3 if perturbed else 0
            block = 0 if dask else min(n * d * d, 2**26)
            peak = rows + 3 * d**3 + noise + block
        else:
            peak = rows + (0 if dask else 3 * n * L)
            if math.isfinite(self.epsilon):  # its steps are exact sums of grid rows
                peak += exact_memory(n, d, L, dask) / FLOAT
        return (peak + small) * FLOAT, advice

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` x ``n_features`` rows (no data
        read)."""
        k = self._check_params(n_features)
        return self._fit_memory((int(n_samples), int(n_features)), k)

    def _check_params(self, d: int) -> int:
        k = d if self.n_components is None else check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d} (an orthogonal decomposition has at "
                             f"most d components), got {k}")
        check_positive_int(self.n_restarts, "n_restarts")
        check_positive_int(self.n_iter, "n_iter")
        for name, allowed in (("method", ("power", "input_perturbation")),
                              ("calibration", ("exact", "paper")),
                              ("moment", ("auto", "implicit", "dense"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not isinstance(self.symmetrize, (bool, np.bool_)):
            raise TypeError(f"symmetrize must be a bool, got {self.symmetrize!r}")
        check_verbose(self.verbose)
        return k

    def _pick_moment(self, X, k: int) -> str:
        return self._moment_for(X.shape, X.dtype.itemsize, is_dask_array(X), k)

    def _moment_for(self, shape, itemsize, dask, k: int) -> str:
        """The moment of :meth:`_pick_moment`, from the data's shape and kind alone."""
        if self.method == "input_perturbation" and math.isfinite(self.epsilon):
            return "dense"  # the released object is the dense moment itself
        if self.moment != "auto":
            return self.moment
        if dask:
            return "implicit"  # for data too big for one machine, never a d^3 tensor unless asked
        if math.isfinite(self.epsilon):
            return "implicit"  # private: its sums are exact (dptensor._exact); a dense T's are not
        steps = n_power_queries(k, self.n_restarts, self.n_iter)
        return choose_moment(shape[0], shape[1], steps, itemsize)

    # -- transform -----------------------------------------------------------------------------
    def transform(self, X):
        """Project data onto the components: ``X @ components_.T``, shape (n_samples, n_components)."""
        check_is_fitted(self)
        if is_dask_array(X):  # a lazy dask projection, computed where the rows are
            X = check_dask_array(self, X, reset=False, check_finite=False)
        else:
            X = validate_private_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return X @ self.components_.T.astype(X.dtype, copy=False)

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # -- pricing and scoring -------------------------------------------------------------------
    def _plan_spend(self, epsilon: float, delta: float, k: int):
        """``(event, noise multiplier, queries)`` of a fit: ``(None, 0, 0)`` when not private."""
        if not math.isfinite(epsilon):
            return None, 0.0, 0
        K = n_power_queries(k, self.n_restarts, self.n_iter) if self.method == "power" else 1
        z = plan_noise_multiplier(epsilon, delta, K, self.calibration)
        return GaussianEvent(z, K), z, K

    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` rows would record.

        Computed from the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`.
        """
        check_positive_int(n_samples, "n_samples")
        k = self._check_params(check_positive_int(n_features, "n_features"))
        epsilon, delta = self._privacy_target()
        if math.isfinite(epsilon):
            check_data_norm(self.data_norm, epsilon)
        event, z, K = self._plan_spend(epsilon, delta, k)
        return self._preview(event, delta=delta, noise_multiplier=z, n_queries=K,
                             calibration=self.calibration)

    def _score_units(self, X, y=None):
        """Per-row moment-fit scores and their public range (see :func:`moment_fit_scores`)."""
        check_is_fitted(self)
        X = validate_private_data(self, X, allow_nd=True, dtype=[np.float64, np.float32], reset=False)
        if X.ndim == 3:
            raise ValueError("score takes rows (2-D X); for a tensor use -||T - T_hat||^2 directly")
        return moment_fit_scores(X, self.components_, self.eigenvalues_, self.data_norm)

    def score(self, X, y=None):
        """Moment fit on rows: ``(||T||^2 - ||T - T_hat||^2) / data_norm^6``, higher is better.

        ``T`` is the third moment of ``X``'s rows (clipped to ``data_norm``) and ``T_hat`` the
        released ``sum_i eigenvalues_[i] components_[i]⊗3``; it is the mean over rows of
        :func:`moment_fit_scores`, each in [-3, 2], so a replaced row moves it by at most
        ``5/n``. Without ``data_norm`` it is unnormalised and unbounded. ``y`` is ignored; the
        score reads ``X`` exactly (it is not private).
        """
        return self._mean_score(X, y)
