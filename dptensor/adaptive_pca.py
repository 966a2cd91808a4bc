r"""Adaptive private power iteration: AboveThreshold picks a per-round threshold, rows above it sit out.

A row-level private power method must add noise for the worst row a neighbour could hold: the
update ``sum_i a_i (a_i . x)`` moves by up to ``2 data_norm^2`` when one row is replaced. On
low-coherence data almost every row contributes far less than that, ``c_i = ||a_i|| |a_i . x|``
small. Each round here finds, privately, a threshold ``theta`` that all but ``O(log(1/beta)/eps1)``
rows stay under, drops the rows above it, and adds noise for at most ``2 theta`` instead (SPEC §5).
The full derivation is in ``docs/derivations/adaptive_pca.rst``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import PrivateEstimatorMixin
from ._power import flip_signs
from ._memory import FLOAT
from ._validation import check_data_norm, check_positive_int, check_verbose, validate_private_data
from .accounting import AboveThresholdEvent, ComposedEvent, GaussianEvent, NonPrivateEvent, calibrate
from .mechanisms import Rounding, above_threshold, clip_rows, gaussian_release
from .pca import row_power_sensitivity

__all__ = ["AdaptivePrivatePCA", "adaptive_power_iteration", "threshold_grid", "contributions",
           "grid_counts", "choose_threshold", "filtered_update", "filtered_sensitivity",
           "svt_epsilon_for", "zcdp_rho", "VARIANCE_SHARE", "component_variances",
           "update_rounding", "BLOCK_ROWS"]

#: Share of the total zCDP budget ``rho`` spent on ``explained_variance_``: one Gaussian release
#: of ``sum_i (a_i . v_j)^2`` for every released component ``v_j`` (sensitivity
#: ``sqrt(min(k, 2)) data_norm^2``). Its relative error is about
#: ``sqrt(2) B^2 / (sqrt(2 * 0.05 rho) n lambda)``: 1.5% at epsilon = 1, n = 5e4 and a variance a
#: twentieth of ``B^2``; it takes 5% of the budget from the power steps.
VARIANCE_SHARE = 0.05


# --------------------------------------------------------------------------------------------
# The pieces of one round. Plain functions of arrays, so the tests can check each on its own.
# --------------------------------------------------------------------------------------------

def threshold_grid(n: int, data_norm: float) -> np.ndarray:
    """The public candidate thresholds: ``data_norm^2 * 2^-j`` for ``j = J..0``, increasing.

    The top is ``data_norm^2``: with ``||a|| <= data_norm`` and a unit iterate ``x``,
    ``||a|| |a . x| <= ||a||^2 <= data_norm^2``, so at the top every row is kept. The floor is the
    first power of two at or below ``data_norm^2 / n``: if all but a few rows contribute less than
    that, the kept rows' whole update is smaller than one worst-case row, so a finer grid could not
    buy a useful release. The grid depends on public values only (``n``, ``data_norm``).
    """
    levels = max(0, math.ceil(math.log2(max(int(n), 1))))
    return float(data_norm) ** 2 * np.exp2(-np.arange(levels, -1, -1, dtype=float))


def contributions(projections: np.ndarray, sq_norms: np.ndarray) -> np.ndarray:
    """Per-row contribution ``c_i = ||a_i|| |a_i . x|`` (float64), from ``a_i . x`` and ``||a_i||^2``.

    ``c_i`` is the l2 norm of row ``i``'s term ``a_i (a_i . x)`` in the power update.
    """
    return np.sqrt(np.maximum(sq_norms, 0.0)) * np.abs(projections.astype(np.float64, copy=False))


def grid_counts(c: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``counts[j] = #{i : c_i <= grid[j]}`` for every grid point, in one pass over the rows.

    ``searchsorted`` places each row at the first grid point it does not exceed; a cumulative
    histogram of those places is every count at once (O(n log J), no loop over rows or points).
    """
    place = np.searchsorted(grid, c, side="left")
    return np.cumsum(np.bincount(place, minlength=grid.size + 1))[: grid.size]


def choose_threshold(c: np.ndarray, grid: np.ndarray, epsilon: float, beta: float,
                     rng: np.random.Generator) -> float:
    """AboveThreshold over the grid: the first ``theta_j`` whose count clears ``n - 6 ln(1/beta)/eps``.

    Each count has sensitivity 1 under replace-one (one row moves in or out of one side of the
    threshold), ``n`` is public, so the run is pure ``epsilon``-DP and releases only the index.
    When no grid point clears (possible only through the noise), the top ``data_norm^2`` is used:
    every row is kept and the round is the non-adaptive one.
    """
    n = c.shape[0]
    target = n - 6.0 * math.log(1.0 / beta) / epsilon
    j = above_threshold(grid_counts(c, grid), target, epsilon, rng, sensitivity=1.0)
    return float(grid[-1] if j is None else grid[j])


def filtered_update(X: np.ndarray, projections: np.ndarray, c: np.ndarray, theta: float) -> np.ndarray:
    """``sum_{i : c_i <= theta} a_i (a_i . x)``: the power step on the kept rows only.

    Zeroing the dropped rows' weights keeps it a GEMV (no copy of the kept rows). Its l2
    sensitivity is :func:`filtered_sensitivity` (at most ``2 theta``). Summed in float64 whatever
    ``X``'s dtype: float32 rows are widened one block of :data:`BLOCK_ROWS` at a time (never a
    float64 copy of ``X``), so its rounding is :func:`update_rounding`'s.
    """
    weights = np.where(c <= theta, projections.astype(np.float64, copy=False), 0.0)
    if X.dtype == np.float64:
        return X.T @ weights
    out = np.zeros(X.shape[1])
    for i in range(0, X.shape[0], BLOCK_ROWS):
        out += np.asarray(X[i:i + BLOCK_ROWS], dtype=np.float64).T @ weights[i:i + BLOCK_ROWS]
    return out


#: Rows of float32 data widened to float64 at once by :func:`filtered_update`.
BLOCK_ROWS = 8192


def update_rounding(n_samples: int, n_features: int, theta: float, data_norm: float,
                    n_released: int) -> Rounding:
    """The rounding of a released power step, :func:`filtered_update` in float64, projected off
    the ``n_released`` components once there are any.

    The exact statistic is ``sum_i a'_i w_i`` over the kept rows (``a' = P a``, ``w_i`` the
    computed ``a_i . x``, ``c_i`` the computed ``||a'_i|| |w_i| <= theta``). Computed: one sum of
    ``n`` terms ``a_i w_i`` (each of norm at most ``B^2``, and at most ``theta`` before any
    deflation), then ``y - V^T (V y)``, ``d + k + 2`` more operations whose error is at most
    ``gamma (1 + k) ||y||``. A row's own term misses the lens of :func:`filtered_sensitivity` by
    its dot product's rounding, at most ``gamma_d B^2``: one more ``B^2`` in the total. So
    ``terms = n + d`` and ``total = n min(theta, B^2) + B^2`` on the first component, and
    ``terms = n + d + k + 2``, ``total = (k + 2)(n + 1) B^2`` after ``k`` released ones.
    """
    n, d, k, top = int(n_samples), int(n_features), int(n_released), float(data_norm) ** 2
    if k == 0:
        return Rounding(total=n * min(float(theta), top) + top, terms=n + d)
    return Rounding(total=(k + 2) * (n + 1) * top, terms=n + d + k + 2)


def filtered_sensitivity(theta: float, data_norm: float) -> float:
    """l2 sensitivity of :func:`filtered_update` under replace-one: at most ``2 theta``, and exact.

    Replacing row ``a`` by ``b`` changes one term, ``u = a (a . x)`` or 0 (dropped) into another.
    Every possible term lies in the ball with diameter ``[0, data_norm^2 x]`` (``||u||^2 = ||a||^2
    (a . x)^2 <= data_norm^2 (u . x)``) and, when kept, in the ball ``||u|| <= theta``; 0 lies in
    both. The sensitivity is the diameter of that lens, ``t = theta / data_norm^2``::

        2 theta sqrt(1 - t^2)   for t <= 1/sqrt(2),   data_norm^2 beyond

    (two terms of norm ``theta`` mirrored about ``x``). SPEC §5 states the bound ``2 theta``; the
    lens is never larger and is half of it at the grid's top, ``theta = data_norm^2``.
    """
    top = float(data_norm) ** 2
    t = min(float(theta) / top, 1.0)
    return top if t >= math.sqrt(0.5) else 2.0 * float(theta) * math.sqrt(1.0 - t * t)


# --------------------------------------------------------------------------------------------
# The loop.
# --------------------------------------------------------------------------------------------

def adaptive_power_iteration(X, n_components: int, n_iter: int, *, rng: np.random.Generator,
                             data_norm: float | None = None, svt_epsilon: float | None = None,
                             noise_multiplier: float = 0.0, beta: float = 0.05, verbose: int = 0):
    """Top ``n_components`` directions of ``A^T A`` by adaptive (private) power iteration with deflation.

    Parameters
    ----------
    X : ndarray (n, d)
        Rows already clipped to ``data_norm`` (the caller clips; this function does not check).
    n_components, n_iter : int
        Components, found one after another, and rounds per component.
    rng : numpy.random.Generator
        Draws the starts, the AboveThreshold noise and the Gaussian noise.
    data_norm : float or None
        Public row-norm bound; the grid's top. Needed when ``svt_epsilon`` is given.
    svt_epsilon : float or None
        Pure epsilon of each round's AboveThreshold. ``None``: no filtering and no noise (the
        plain, non-private power method on ``A^T A``).
    noise_multiplier : float
        Gaussian multiplier ``z``: each round's update gets ``N(0, (s z)^2 I)`` with
        ``s = filtered_sensitivity(theta, data_norm) <= 2 theta``.
    beta : float
        AboveThreshold's failure probability (sets how many rows a round may drop).

    Returns
    -------
    components : ndarray (n_components, d), orthonormal rows, X's dtype
    thresholds : ndarray (n_components, n_iter), the released ``theta`` of every round
        (``inf`` when not private: nothing is filtered)

    Deflation: once ``v_1..v_{j-1}`` are released, component ``j`` runs on the projected rows
    ``a' = P a`` with ``P = I - V V^T``. Projection never grows a norm, so ``||a'|| <= data_norm``
    and every bound of the rank-1 round holds unchanged. It is implicit: with ``x`` kept
    orthogonal to ``V``, ``a' . x = a . x`` and ``||a'||^2 = ||a||^2 - ||V^T a||^2``, so the update
    is ``P X_kept^T (X_kept x)`` and ``X`` is never copied.
    """
    n, d = X.shape
    private = svt_epsilon is not None
    grid = threshold_grid(n, data_norm) if private else None
    sq_norms = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    V = np.zeros((0, d), dtype=np.float64)
    thresholds = np.full((n_components, n_iter), np.inf)

    def project(y):  # onto the complement of the released components (post-processing)
        return y - V.T @ (V @ y)

    for k in range(n_components):
        x = _unit(project(rng.standard_normal(d)))  # public start: costs nothing
        for t in range(n_iter):
            proj = X @ x.astype(X.dtype, copy=False)
            if private:
                c = contributions(proj, sq_norms)
                theta = choose_threshold(c, grid, svt_epsilon, beta, rng)
                # projected before the release: the lens bounds the projected terms a' (a . x)
                # only (the unprojected a (a . x) can reach B^2 after a deflation)
                y = gaussian_release(project(filtered_update(X, proj, c, theta)),
                                     filtered_sensitivity(theta, data_norm), noise_multiplier, rng,
                                     rounding=update_rounding(n, d, theta, data_norm, k))
                thresholds[k, t] = theta
                if verbose:
                    print(f"[AdaptivePrivatePCA] component {k + 1} round {t + 1}: theta = {theta:.4g}")
            else:
                y = (X.T @ proj).astype(np.float64)
            y = project(y)
            x = _unit(y) if np.linalg.norm(y) > 0 else x
        V = np.vstack([V, x[None, :]])
        # The next component sees the projected rows: their squared norms drop by (a . v_k)^2.
        sq_norms = sq_norms - (X @ x.astype(X.dtype, copy=False)).astype(np.float64) ** 2
    return V.astype(X.dtype, copy=False), thresholds


def _unit(y):
    norm = np.linalg.norm(y)
    return y / norm if norm > 0 else y


# --------------------------------------------------------------------------------------------
# The budget split.
# --------------------------------------------------------------------------------------------

def component_variances(X: np.ndarray, components: np.ndarray, data_norm, noise_multiplier: float,
                        rng: np.random.Generator) -> np.ndarray:
    """``sum_i (a_i . v_j)^2`` for every component ``v_j``, plus Gaussian noise (one release).

    Rows ``a_i`` are already clipped to ``data_norm``; ``components`` are orthonormal rows, a
    previous release. Replacing row ``a`` by ``b`` moves the vector ``((a . v_j)^2)_j`` to
    ``((b . v_j)^2)_j``: both non-negative with sums at most ``B^2``, so the change has norm at most
    ``sqrt(||u||^2 + ||w||^2) <= sqrt(2) B^2``, or ``B^2`` for one component; attained at
    ``a = B v_1``, ``b = B v_2``. That is :func:`~dptensor.pca.row_power_sensitivity` with ``p = k``.

    Rounding: the squares are each row's own (its per-row map, float64), then one sum of ``n``
    terms whose l2 norm is at most ``sum_j (a . v_j)^2 <= B^2``: ``total = n B^2``, ``terms = n``.
    """
    V = components.astype(X.dtype, copy=False)
    totals = np.sum((X @ V.T).astype(np.float64) ** 2, axis=0)
    if noise_multiplier > 0:
        n = X.shape[0]
        totals = gaussian_release(totals, row_power_sensitivity(data_norm, V.shape[0]),
                                  noise_multiplier, rng,
                                  rounding=Rounding(total=n * float(data_norm) ** 2, terms=n))
    return totals


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The zCDP ``rho`` whose standard conversion gives exactly ``(epsilon, delta)``.

    Bun & Steinke (2016): ``rho``-zCDP implies ``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP;
    solving for ``rho`` gives ``(sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2``. Used only to
    *define* the AboveThreshold share; the final noise is calibrated with the accountant itself.
    """
    log_inv = math.log(1.0 / delta)
    return (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2


def svt_epsilon_for(epsilon: float, delta: float, svt_fraction: float, n_rounds: int) -> float:
    """Per-round AboveThreshold epsilon: ``n_rounds * eps1^2 / 2 = svt_fraction * zcdp_rho(eps, delta)``.

    Pure ``eps1``-DP is ``eps1^2/2``-zCDP, so the AboveThreshold runs together take the fraction
    ``svt_fraction`` of the total zCDP budget; the Gaussian steps get what the accountant leaves.
    """
    return math.sqrt(2.0 * svt_fraction * zcdp_rho(epsilon, delta) / n_rounds)


# --------------------------------------------------------------------------------------------
# The estimator.
# --------------------------------------------------------------------------------------------

class AdaptivePrivatePCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, PrivateEstimatorMixin,
                         BaseEstimator):
    r"""Row-level private PCA by adaptive power iteration: AboveThreshold filtering, then a noisy power step.

    Each round, with the current unit iterate ``x`` (public: a previous release):

    1. every row's contribution ``c_i = ||a_i|| |<a_i, x>|`` (one GEMV);
    2. AboveThreshold over the geometric grid ``theta_j = data_norm^2 2^-j`` (increasing, from
       about ``data_norm^2 / n`` to ``data_norm^2``) releases the first ``theta_j`` with
       ``#{i : c_i <= theta_j} >= n - 6 ln(1/beta) / eps1`` (noisy comparison);
    3. the kept rows ``c_i <= theta`` give ``y = sum_kept a_i a_i^T x + N(0, (s z)^2 I)``, where
       ``s <= 2 theta`` is the update's exact sensitivity (:func:`filtered_sensitivity`);
    4. ``x = y / ||y||``.

    With ``n_components > 1`` the components are found one after another by deflation: component
    ``j`` runs on the rows projected off the released ``v_1..v_{j-1}``, and the budget is split
    evenly across components (every one of the ``n_components * n_iter`` rounds gets the same
    ``eps1`` and ``z``). The directions are those of the *uncentered* second moment ``A^T A``:
    center with a public (or separately private) mean first if that is what you want.

    Parameters
    ----------
    n_components : int, default=1
        Number of components.
    epsilon : float, default=np.inf
        Target epsilon of the whole fit (``np.inf``: the plain power method, no filtering, no noise,
        as for every estimator here: a private fit is asked for explicitly).
    delta : float or None, default=None
        Target delta; ``None`` takes the accountant's delta, else 1e-5. A private fit warns
        (``PrivacyWarning``) when delta is not below ``1/n_samples``.
    n_iter : int, default=5
        Rounds per component. Chosen by measurement (see Notes): the noise of a round grows like
        ``sqrt(rounds)``, and on data with a clear eigengap a handful of rounds has converged.
    beta : float, default=0.05
        AboveThreshold failure probability: each round drops at most about
        ``6 ln(1/beta) / eps1`` rows (plus the grid's factor 2).
    svt_fraction : float, default=0.1
        Share of the total zCDP budget ``rho`` spent on AboveThreshold, in (0, 1); the rest goes to
        the Gaussian steps. See Notes.
    data_norm : float or None, default=None
        Public bound on row l2 norms; rows are clipped to it. Required when epsilon is finite (a
        private fit refuses to guess it, as :class:`~dptensor.PrivatePCA` does); ``None`` without
        privacy clips nothing. Choose it from public knowledge, never from the data.
    accountant : PrivacyAccountant or None, default=None
        Shared budget; the fit's cost is checked and recorded before any noisy release.
    random_state : None, int, RandomState or Generator, default=None
        ``None`` (fresh OS entropy) for a real release; a seed makes the noise reproducible.
    verbose : int, default=0
        Print each round's released threshold.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
        Orthonormal released directions, each with its largest entry positive.
    thresholds_ : ndarray (n_components, n_iter)
        Every round's released threshold ``theta`` (public output of AboveThreshold; ``inf`` when
        ``epsilon=np.inf``). How many rows a round dropped is *not* released.
    explained_variance_ : ndarray (n_components,)
        Variance along each released component, ``sum_i (a_i . v_j)^2 / (n - 1)`` over all the
        clipped rows (uncentred, like the components), released with Gaussian noise from its own
        share :data:`VARIANCE_SHARE` of the budget (sensitivity ``sqrt(min(k, 2)) data_norm^2``;
        see :func:`component_variances`), floored at 0. Exact without privacy. In the order of
        ``components_`` (the order of deflation), so the noisy values need not be decreasing.
    explained_variance_noise_ : ndarray (n_components,)
        The std of the noise in each ``explained_variance_`` (public; 0 without privacy). ``fit``
        warns (``UserWarning``) when a component's variance is below twice it.
    variance_noise_multiplier_ : float
        Gaussian multiplier of the variances' release (0 when not private).
    svt_epsilon_ : float
        Per-round AboveThreshold epsilon ``eps1`` (``inf`` when not private).
    noise_multiplier_ : float
        Gaussian multiplier ``z`` of every round (0 when not private).
    privacy_cost_ : PrivacyCost
        The fit's recorded cost: ``ComposedEvent(AboveThresholdEvent(eps1, R), GaussianEvent(z, R),
        GaussianEvent(z_var, 1))`` with ``R = n_components * n_iter``.
    n_features_in_ : int
    feature_names_in_ : ndarray, when X has string column names

    Notes
    -----
    **Privacy unit.** Neighbouring data sets differ in one row, replaced (``n`` is public); rows are
    clipped to ``data_norm``. **Released:** ``components_``, ``thresholds_`` and
    ``explained_variance_`` (one more Gaussian release, after the components).
    **Guarantee:** ``(epsilon, delta)``-DP for the whole fit, composed by the accountant.

    **Proof sketch.** Condition on everything released before the round (``x``, the components
    already found): all are public. (i) The grid is public; a count ``#{c_i <= theta_j}`` changes
    by at most 1 when one row is replaced, so AboveThreshold is pure ``eps1``-DP. (ii) Given the
    released ``theta``, the kept set differs only in the replaced row, whose term has norm
    ``c_i <= theta``. A term ``a (a . x)`` also lies in the ball with diameter ``[0, data_norm^2 x]``,
    so the update's l2 sensitivity is the diameter ``s`` of the intersection of the two balls:
    ``2 theta sqrt(1 - t^2)`` with ``t = theta / data_norm^2 <= 1/sqrt(2)``, ``data_norm^2`` beyond;
    always ``<= 2 theta`` (SPEC §5's bound). The Gaussian step with std ``s z`` is ``1/(2 z^2)``-zCDP
    (``1/z``-GDP). (iii) ``R = n_components * n_iter`` rounds
    compose adaptively; the accountant prices ``ComposedEvent(AboveThresholdEvent(eps1, R),
    GaussianEvent(z, R))`` in RDP and converts to ``(epsilon, delta)``. Deflation projects rows off
    released directions, which never grows a norm, so (i)-(ii) hold for every component.

    **The split.** ``rho = (sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2`` is the zCDP budget
    of the target; AboveThreshold gets ``R eps1^2 / 2 = svt_fraction * rho`` and the variances'
    release ``1 / (2 z_var^2) = VARIANCE_SHARE * rho``. Then ``z`` is the
    smallest multiplier for which the accountant prices the whole event at ``epsilon``
    (:func:`dptensor.accounting.calibrate`), so the recorded cost equals the target.

    **Defaults.** Chosen by sweeps on spiked Gaussian rows (d = 50, spike 5, n = 2e4 to 1e5,
    epsilon = 1, bounds ``data_norm`` from the longest row to 3x the typical row, 12-20 seeds per
    cell; tables on the derivation page): ``sin^2`` was lowest at 4-6 rounds; 3 rounds often had
    not converged from the random start, and rounds beyond 6 only added noise, so ``n_iter=5``.
    ``svt_fraction`` 0.05-0.1 beat 0.2 and 0.3 everywhere (more AboveThreshold budget starves the
    Gaussian steps and moves the threshold by less than one grid step); 0.05 converged less
    reliably than 0.1, so 0.1. ``beta=0.05`` drops about ``18 / eps1`` rows per round (about 620
    at epsilon = 1 with the defaults), under 1% of the rows from n = 6e4.

    **When it helps.** The noise follows the data's ``(n - m)``-th largest contribution instead of
    the public bound ``data_norm^2``. On Gaussian rows at d = 50 the top contributions are within
    a factor 2 of the longest row, so with ``data_norm`` equal to that row there is nothing to
    gain, and the adaptive method loses (it pays for AboveThreshold and drops the rows most
    aligned with the iterate). The gain grows with the ratio between the public bound and what
    rows actually contribute, and with the dimension (``benchmarks/bench_adaptive_pca.py``). On
    coherent data (more than about ``18 / eps1`` rows along the top direction) AboveThreshold
    cannot drop them and the adaptive method only pays for its threshold search.

    If AboveThreshold finds no grid point (only the noise can cause it, since the top count is
    ``n``), the round uses the top ``data_norm^2``: every row is kept and the noise is that of the
    unfiltered power step, sensitivity ``data_norm^2`` (the lens at the top is the whole ball).

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor import AdaptivePrivatePCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((20000, 10)) * np.r_[3.0, np.ones(9)] / 6
    >>> est = AdaptivePrivatePCA(epsilon=1.0, data_norm=1.0, random_state=0).fit(X)
    >>> bool(abs(est.components_[0, 0]) > 0.99)
    True
    >>> est.thresholds_.shape
    (1, 5)
    """

    def __init__(self, n_components=1, *, epsilon=np.inf, delta=None, n_iter=5, beta=0.05, svt_fraction=0.1,
                 data_norm=None, accountant=None, random_state=None, verbose=0):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.beta = beta
        self.svt_fraction = svt_fraction
        self.data_norm = data_norm
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y=None):
        """Fit on rows ``X`` (n, d); ``y`` is ignored."""
        epsilon, delta = self._privacy_target()
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=1)
        n, d = X.shape
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d}, got {k}")
        n_iter = check_positive_int(self.n_iter, "n_iter")
        _check_open_unit(self.beta, "beta")
        _check_open_unit(self.svt_fraction, "svt_fraction")
        check_verbose(self.verbose)
        data_norm = check_data_norm(self.data_norm, epsilon)
        self._check_delta_for(n, epsilon, delta)
        entropy = self._entropy()
        rounds = k * n_iter

        event, eps1, z, z_var = self._plan_spend(epsilon, delta, rounds)
        memory = self._memory_estimate(n, d)
        if event is not None:  # checked and recorded before anything noisy is computed
            self.privacy_cost_, rng = self._spend(event, entropy=entropy, delta=delta, noise_multiplier=z,
                                                  n_queries=rounds, calibration="exact",
                                                  data_shape=X.shape, memory=memory, data=(X,))
        else:
            self.privacy_cost_, rng = self._spend(NonPrivateEvent("epsilon=inf"), entropy=entropy,
                                                  delta=delta, data_shape=X.shape, memory=memory,
                                                  data=(X,))

        # Clipped only now: a refused fit computes nothing from the data.
        X = clip_rows(X, data_norm) if data_norm is not None else X
        components, self.thresholds_ = adaptive_power_iteration(
            X, k, n_iter, rng=rng, data_norm=data_norm, svt_epsilon=eps1, noise_multiplier=z,
            beta=self.beta, verbose=self.verbose)
        self.components_ = flip_signs(components)  # post-processing: a deterministic sign, as PrivatePCA
        scale = 1.0 / max(n - 1, 1)
        variances = component_variances(X, self.components_, data_norm, z_var, rng) * scale
        self.explained_variance_ = np.maximum(variances, 0.0).astype(self.components_.dtype)
        noise = z_var * row_power_sensitivity(data_norm, k) * scale if z_var else 0.0
        self.explained_variance_noise_ = np.full(k, noise, dtype=self.components_.dtype)
        self.variance_noise_multiplier_ = float(z_var)
        weak = np.flatnonzero(self.explained_variance_ < 2 * self.explained_variance_noise_)
        if weak.size:
            warnings.warn(f"the released explained_variance_ of component(s) {(weak + 1).tolist()} is below "
                          "twice its noise level (explained_variance_noise_): those components are "
                          "dominated by the privacy noise.", UserWarning, stacklevel=2)
        self.svt_epsilon_ = math.inf if eps1 is None else eps1
        self.noise_multiplier_ = float(z)
        self._n_features_out = k
        return self

    def transform(self, X):
        """Project ``X`` onto the released components: ``X @ components_.T`` (no centering)."""
        check_is_fitted(self)
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return X @ self.components_.T.astype(X.dtype, copy=False)

    def inverse_transform(self, X):
        """Map projections back to feature space: ``X @ components_`` (the components' span, no mean)."""
        check_is_fitted(self)
        Z = np.asarray(X)
        if Z.ndim != 2 or Z.shape[1] != self.components_.shape[0]:
            raise ValueError(f"X must have shape (n_samples, {self.components_.shape[0]}), got {Z.shape}")
        return Z @ self.components_

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)``: the fit's peak allocation, in float64: the clipped copy of the rows,
        the per-row projections and weights of a round (a few n-vectors), the n x k products of
        the variances' release, and the d x k components."""
        n, d = int(n_samples), int(n_features)
        k = min(check_positive_int(self.n_components, "n_components"), d)
        peak = n * d + n * (2 * k + 8) + 4 * d * (k + 2)
        return peak * FLOAT, "Pass fewer rows or features"

    # ------------------------------------------------------------------ pricing and scoring
    def _plan_spend(self, epsilon, delta, rounds):
        """``(event, svt epsilon, noise multiplier, variance noise multiplier)`` of a fit of ``rounds``
        rounds; ``(None, None, 0, 0)`` when not private."""
        if not math.isfinite(epsilon):
            return None, None, 0.0, 0.0
        eps1 = svt_epsilon_for(epsilon, delta, self.svt_fraction, rounds)
        # A Gaussian at multiplier z is 1/(2 z^2)-zCDP: the variances' release takes its share of rho.
        z_var = 1.0 / math.sqrt(2.0 * VARIANCE_SHARE * zcdp_rho(epsilon, delta))

        def plan(z):
            return ComposedEvent((AboveThresholdEvent(eps1, rounds), GaussianEvent(z, rounds),
                                  GaussianEvent(z_var, 1)))

        z = calibrate(epsilon, delta, plan)
        return plan(z), eps1, z, z_var

    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` rows would record.

        Computed from the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`.
        """
        epsilon, delta = self._privacy_target()
        check_positive_int(n_samples, "n_samples")
        d = check_positive_int(n_features, "n_features")
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d}, got {k}")
        rounds = k * check_positive_int(self.n_iter, "n_iter")
        _check_open_unit(self.beta, "beta")
        _check_open_unit(self.svt_fraction, "svt_fraction")
        check_data_norm(self.data_norm, epsilon)
        event, _, z, _ = self._plan_spend(epsilon, delta, rounds)
        return self._preview(event, delta=delta, noise_multiplier=z, n_queries=rounds, calibration="exact")

    def _score_units(self, X, y=None):
        """Per-row captured variance and its public range ``(0, 1)`` (``None`` without ``data_norm``)."""
        check_is_fitted(self)
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False)
        if self.data_norm is None:
            P = X @ self.components_.T
            return np.einsum("ij,ij->i", P, P), None
        B = float(self.data_norm)
        P = clip_rows(X, B) @ self.components_.T
        return np.clip(np.einsum("ij,ij->i", P, P) / B**2, 0.0, 1.0), (0.0, 1.0)

    def score(self, X, y=None):
        """Captured variance: the mean over rows of ``||V clip(x)||^2 / data_norm^2``, higher is better.

        ``V`` holds the released components and rows are clipped to ``data_norm`` as in the fit
        (no centering, as in :meth:`transform`); each row's score is clipped to [0, 1], so a
        replaced row moves the mean over ``n`` rows by at most ``1/n``. ``y`` is ignored; the
        score reads ``X`` exactly (it is not private).
        """
        return self._mean_score(X, y)


def _check_open_unit(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number in (0, 1), got {value!r}")
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)
