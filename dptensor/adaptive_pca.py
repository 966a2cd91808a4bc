r"""AdaptivePrivatePCA, the estimator: private power iteration whose noise follows the data.

Each round AboveThreshold picks a threshold and the rows above it sit out, so the noise is set by
what rows contribute, not by the worst row the public bound allows. :class:`AdaptivePrivatePCA`
checks its parameters, splits the budget, records the spend and sets its attributes; the rounds
are :func:`dptensor.algorithms.adaptive_power.adaptive_power_iteration`. The derivation is in
``docs/derivations/adaptive_pca.rst``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._guards import warn
from ._base import FitData, FitPlan, PrivateEstimatorMixin, SearchTag
from ._memory import FLOAT
from ._validation import (check_data_norm, check_positive_int, check_projections, check_verbose,
                          validate_private_data)
from .exceptions import real_scalar
from .accounting import (
    AboveThresholdEvent,
    ComposedEvent,
    GaussianEvent,
    NonPrivateEvent,
    calibrate,
)
from .algorithms.adaptive_groups import (
    GROUP_BLOCK,
    SQUARES_BLOCK,
    group_component_variances,
    grouped_adaptive_power_iteration,
)
from .algorithms.adaptive_power import (
    VARIANCE_SHARE,
    adaptive_power_iteration,
    component_variances,
    row_sq_norms,
    svt_epsilon_for,
    zcdp_rho,
)
from .algorithms.power import flip_signs, row_power_sensitivity
from .algorithms.sparse import map_row_blocks, row_blocks
from .mechanisms import clip_rows

__all__ = ["AdaptivePrivatePCA"]


@dataclass(frozen=True)
class _Settings:
    """A fit's validated parameters and budget split: what the release reads. ``svt_epsilon``
    each round's AboveThreshold epsilon and ``noise`` its Gaussian multiplier, ``variance_noise``
    that of the variances' release (``None``, 0 and 0 when not private)."""

    k: int
    n_iter: int
    data_norm: float | None
    svt_epsilon: float | None
    noise: float
    variance_noise: float


class AdaptivePrivatePCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, PrivateEstimatorMixin,
                         BaseEstimator):
    r"""Row-level private PCA by adaptive power iteration: AboveThreshold filtering, then a noisy
    power step.

    Each round, with the current unit iterate ``x`` (public: a previous release):

    1. every row's contribution ``c_i = ||a_i|| |<a_i, x>|`` (one GEMV);
    2. AboveThreshold over the geometric grid ``theta_j = data_norm^2 2^-j`` (increasing, from
       about ``data_norm^2 / n`` to ``data_norm^2``) releases the first ``theta_j`` with
       ``#{i : c_i <= theta_j} >= n - 6 ln(1/beta) / eps1`` (noisy comparison);
    3. the kept rows ``c_i <= theta`` give ``y = sum_kept a_i a_i^T x + N(0, (s z)^2 I)``, where
       ``s <= 2 theta`` is the update's exact sensitivity
       (:func:`~dptensor.algorithms.adaptive_power.filtered_sensitivity`);
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
        share :data:`~dptensor.algorithms.adaptive_power.VARIANCE_SHARE` of the budget (sensitivity
        ``sqrt(min(k, 2)) data_norm^2``; see
        :func:`~dptensor.algorithms.adaptive_power.component_variances`), floored at 0. Exact
        without privacy. In the order of ``components_`` (the order of deflation), so the noisy
        values need not be decreasing.
    explained_variance_noise_ : ndarray (n_components,)
        The std of the noise in each ``explained_variance_`` (public; 0 without privacy). ``fit``
        warns (``UserWarning``) when a component's variance is below twice it.
    explained_variance_ratio_ : ndarray (n_components,)
        Set only without privacy (``epsilon=np.inf``): ``explained_variance_`` over the total
        uncentred variance ``sum_i ||a_i||^2 / (n - 1)`` of the (clipped) rows, the trace of the
        second moment the components are taken from, so the ratios sum to at most 1. A private
        fit releases no total, and a ratio over an unreleased one would not be private, so it is
        not set (``AttributeError``); releasing a total would take its own share of the budget.
    mean_ : ndarray (n_features,)
        Zeros: the fit does not centre (the components are those of ``A^T A``), and
        :meth:`transform` subtracts nothing. Set for scikit-learn's interface, not a release.
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

    **Groups of rows.** ``fit(X, groups=labels)`` protects each group (rows sharing a label: a
    person's visits, sessions, transactions) as one unit: neighbours replace a whole group (its
    rows, how many, their values); the number of groups ``G`` is public and takes the place of
    ``n`` (the grid, the AboveThreshold target ``G - 6 ln(1/beta) / eps1``, the variances'
    ``G - 1``), the number of rows is not. Rows go on the exact grid and each group is scaled as
    a whole so that its squared norms add up to at most ``data_norm^2``; a round's
    contribution and term are then those of the group, ``c_g = ||sum_{i in g} a_i (a_i . x)||``
    and that sum, computed exactly, so one group moves every count by at most 1 and the
    update by at most the lens ``s(theta)`` of one row (with a relative margin of about
    ``d 2^-52`` for the float norm the test reads). Each component's rows are projected off the
    released ones, put on the grid and scaled per group again. ``privacy_cost_.unit`` and the
    ledger say ``"group of rows"``. Refused before any spend: bad labels, ``epsilon=inf``, dask,
    sparse rows (``derivations/adaptive_pca.rst``, "Groups of rows").

    **Proof sketch.** Condition on everything released before the round (``x``, the components
    already found): all are public. (i) The grid is public; a count ``#{c_i <= theta_j}`` changes
    by at most 1 when one row is replaced, so AboveThreshold is pure ``eps1``-DP. (ii) Given the
    released ``theta``, the kept set differs only in the replaced row, whose term has norm
    ``c_i <= theta``. A term ``a (a . x)`` also lies in the ball with diameter ``[0, data_norm^2
    x]``, so the update's l2 sensitivity is the diameter ``s`` of the intersection of the two balls:
    ``2 theta sqrt(1 - t^2)`` with ``t = theta / data_norm^2 <= 1/sqrt(2)``, ``data_norm^2`` beyond;
    always ``<= 2 theta`` (SPEC §5's bound). The Gaussian step with std ``s z`` is ``1/(2
    z^2)``-zCDP (``1/z``-GDP). (iii) ``R = n_components * n_iter`` rounds
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

    **Sparse rows.** ``fit``, ``transform`` and ``score`` take ``scipy.sparse`` CSR or CSC
    rows. The rows are clipped a densified block at a time and kept sparse (the same values as
    the dense clip); every pass (the products ``X x``, the kept rows' update, the variances)
    densifies one block of rows at a time: memory O(nnz + block d + d k) beside the matrix, a
    block holding about ``2**22`` entries (:data:`~dptensor.algorithms.sparse.BLOCK_ENTRIES`).
    The releases, their sensitivities and their rounding allowances are those of the dense fit;
    with the same seed the noise is the same (the seed is keyed by the dense rows' digest), so
    the results equal the dense fit's up to the order of the float64 sums.

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

    _search_tag = SearchTag(groups=True)  # fit(X, groups=...) bounds a group of rows

    def __init__(self, n_components=1, *, epsilon=np.inf, delta=None, n_iter=5, beta=0.05,
                 svt_fraction=0.1, data_norm=None, accountant=None, random_state=None, verbose=0):
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

    def fit(self, X, y=None, *, groups=None):
        """Fit on rows ``X`` (n, d); ``y`` is ignored.

        ``groups`` (shape (n_samples,)): rows sharing a label are one person, protected as a
        whole; the rounds then count, filter and add groups, and ``n`` is the number of groups.
        See the class Notes, "Groups of rows".
        """
        return self._fit_private(X) if groups is None else self._fit_private(X, groups)

    _sparse_as_dense = True  # a fit on sparse rows releases the dense fit's values, to rounding

    def _check_data(self, X, groups=None) -> FitData:
        """``X`` validated (never modified), and a private fit's delta checked against its ``n``
        rows (public) before the spend; with ``groups``, against the number of groups."""
        if groups is not None:
            return self._check_grouped(X, groups)
        epsilon, delta = self._privacy_target()
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=1,
                                  accept_sparse=("csr", "csc"))
        self._check_delta_for(X.shape[0], epsilon, delta)
        return FitData(arrays=(X,), shape=X.shape)

    def _check_grouped(self, X, groups) -> FitData:
        """A fit whose unit is a group of rows: private, on rows in memory, one label a row.
        The public shape is ``(n_groups, d)``; the number of rows only sizes the memory."""
        self._check_groups_allowed(X)
        if sp.issparse(X):  # the group scaling holds every grid row at once, as in PrivatePCA
            raise TypeError("AdaptivePrivatePCA.fit with groups needs dense rows: a sparse X "
                            "would be densified whole. Fit without groups, or pass X.toarray()")
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=1)
        codes, n_groups = self._check_groups(groups, X.shape[0])
        return FitData(arrays=(X, codes), shape=(n_groups, X.shape[1]), extra=codes,
                       public=dict(n_rows=X.shape[0], grouped=True))

    def _plan(self, shape, *, n_rows=None, grouped=False) -> FitPlan:
        """The fit's plan from its public shape ``(n, d)`` (``(n_groups, d)`` with groups, the
        rows' count ``n_rows`` then sizing the memory only): parameters checked, the budget split
        (:meth:`_budget_split`), the event priced, the memory bounded."""
        n, d = shape
        epsilon, delta = self._privacy_target()
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d}, got {k}")
        n_iter = check_positive_int(self.n_iter, "n_iter")
        _check_open_unit(self.beta, "beta")
        _check_open_unit(self.svt_fraction, "svt_fraction")
        check_verbose(self.verbose)
        data_norm = check_data_norm(self.data_norm, epsilon)
        rounds = k * n_iter
        event, eps1, z, z_var = self._budget_split(epsilon, delta, rounds)
        settings = _Settings(k=k, n_iter=n_iter, data_norm=data_norm, svt_epsilon=eps1, noise=z,
                             variance_noise=z_var)
        private = event is not None
        return FitPlan(event=event if private else NonPrivateEvent("epsilon=inf"), delta=delta,
                       noise_multiplier=z, n_queries=rounds if private else 0,
                       calibration="exact" if private else "none",
                       memory=self._memory_estimate(n, d, n_rows=n_rows, grouped=grouped),
                       settings=settings, unit="group of rows" if grouped else "row")

    def _release(self, data, plan, rng):
        """Everything after the spend: the rounds, the variances, the fitted attributes."""
        settings, k, z_var = plan.settings, plan.settings.k, plan.settings.variance_noise
        release = self._rows_release if data.extra is None else self._groups_release
        X, variances, sensitivity, n_units = release(data, settings, rng)
        scale = 1.0 / max(n_units - 1, 1)
        self.explained_variance_ = np.maximum(variances * scale, 0.0).astype(
            self.components_.dtype)
        noise = z_var * sensitivity * scale if z_var else 0.0
        self.explained_variance_noise_ = np.full(k, noise, dtype=self.components_.dtype)
        self.variance_noise_multiplier_ = float(z_var)
        self._set_ratio(X, scale, private=settings.svt_epsilon is not None)
        self.mean_ = np.zeros(X.shape[1], dtype=self.components_.dtype)  # no centring: see mean_
        weak = np.flatnonzero(self.explained_variance_ < 2 * self.explained_variance_noise_)
        if weak.size:
            warn(f"the released explained_variance_ of component(s) "
                 f"{(weak + 1).tolist()} is below twice its noise level "
                 "(explained_variance_noise_): those components are dominated by the "
                 "privacy noise.", UserWarning)
        self.svt_epsilon_ = math.inf if settings.svt_epsilon is None else settings.svt_epsilon
        self.noise_multiplier_ = float(settings.noise)
        self._n_features_out = k

    def _rows_release(self, data, settings, rng):
        """The row-level rounds and variances: ``(clipped X, variances, their sensitivity, n)``;
        sets ``components_`` and ``thresholds_``."""
        X, data_norm, k = data.arrays[0], settings.data_norm, settings.k
        # Clipped only now: a refused fit computes nothing from the data.
        X = _clip(X, data_norm) if data_norm is not None else X
        components, self.thresholds_ = adaptive_power_iteration(
            X, k, settings.n_iter, rng=rng, data_norm=data_norm,
            svt_epsilon=settings.svt_epsilon, noise_multiplier=settings.noise, beta=self.beta,
            verbose=self.verbose)
        # post-processing: a deterministic sign, as PrivatePCA
        self.components_ = flip_signs(components)
        variances = component_variances(X, self.components_, data_norm,
                                        settings.variance_noise, rng)
        sensitivity = row_power_sensitivity(data_norm, k) if data_norm is not None else 0.0
        return X, variances, sensitivity, X.shape[0]

    def _groups_release(self, data, settings, rng):
        """The rounds over groups (one group of rows is the unit): exact sums of group-scaled
        grid rows (:mod:`~dptensor.algorithms.adaptive_groups`); ``(X, variances, their
        sensitivity, n_groups)``, the variances over the public number of groups."""
        (X, codes), n_groups = data.arrays, data.shape[0]
        components, self.thresholds_, M = grouped_adaptive_power_iteration(
            X, codes, n_groups, settings.k, settings.n_iter, rng=rng,
            data_norm=settings.data_norm, svt_epsilon=settings.svt_epsilon,
            noise_multiplier=settings.noise, beta=self.beta, verbose=self.verbose)
        self.components_ = flip_signs(components)
        variances, sensitivity = group_component_variances(
            M, self.components_, settings.data_norm, settings.variance_noise, rng)
        return X, variances, sensitivity, n_groups

    def _set_ratio(self, X, scale, *, private):
        """``explained_variance_ratio_`` without privacy: over the exact uncentred total of the
        clipped rows. A private fit releases no total (its plan spends nothing on one), so the
        ratio is not set rather than formed from an unreleased statistic."""
        self.__dict__.pop("explained_variance_ratio_", None)
        if private:
            return
        total = float(np.sum(row_sq_norms(X)) if sp.issparse(X) else
                      np.einsum("ij,ij->", X, X, dtype=np.float64)) * scale
        if total > 0:
            self.explained_variance_ratio_ = (self.explained_variance_ / total).astype(
                self.explained_variance_.dtype)

    def transform(self, X):
        """Project ``X`` onto the released components: ``X @ components_.T`` (no centering)."""
        check_is_fitted(self)
        X = self._validate_rows(X)
        return map_row_blocks(lambda A: A @ self.components_.T.astype(A.dtype, copy=False), X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR and CSC rows, read a dense block at a time
        return tags

    def _validate_rows(self, X):
        """Rows to project or score (dense, or sparse CSR/CSC read a dense block at a time)."""
        return validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False,
                                     accept_sparse=("csr", "csc"))

    def inverse_transform(self, X):
        """Map projections back to feature space: ``X @ components_`` (the components' span, no
        mean)."""
        check_is_fitted(self)
        Z = check_projections(X, self.components_.shape[0])  # finite numbers, as transform's X
        return Z @ self.components_

    def _memory_estimate(self, n_samples, n_features, *, n_rows=None, grouped=False):
        """``(bytes, advice)``: the fit's peak allocation, in float64: the clipped copy of the rows,
        the per-row projections and weights of a round (a few n-vectors), the n x k products of
        the variances' release, and the d x k components. With groups (``n_samples`` groups of
        ``n_rows`` rows): the grid rows, their deflated copy and the scaling's copy, one block's
        int64 products, the groups' exact terms, their norms and the kept ones, and one block of
        the variances' products."""
        n, d = int(n_samples), int(n_features)
        k = min(check_positive_int(self.n_components, "n_components"), d)
        if grouped:
            rows = n if n_rows is None else int(n_rows)  # a preview's: the groups stand for them
            peak = (3 * rows * d + 4 * rows + 3 * GROUP_BLOCK * d + 4 * n * d + 4 * d * (k + 2)
                    + 6 * min(rows, SQUARES_BLOCK) * k)
            return peak * FLOAT, "Pass fewer rows or features"
        peak = n * d + n * (2 * k + 8) + 4 * d * (k + 2)
        return peak * FLOAT, "Pass fewer rows or features"

    # ------------------------------------------------------------------ pricing and scoring
    def _budget_split(self, epsilon, delta, rounds):
        """``(event, svt epsilon, noise multiplier, variance noise multiplier)`` of a fit of
        ``rounds`` rounds; ``(None, None, 0, 0)`` when not private."""
        if not math.isfinite(epsilon):
            return None, None, 0.0, 0.0
        eps1 = svt_epsilon_for(epsilon, delta, self.svt_fraction, rounds)
        # A Gaussian at multiplier z is 1/(2 z^2)-zCDP: the variances' release takes its share of
        # rho.
        z_var = 1.0 / math.sqrt(2.0 * VARIANCE_SHARE * zcdp_rho(epsilon, delta))

        def event_at(z):
            return ComposedEvent((AboveThresholdEvent(eps1, rounds), GaussianEvent(z, rounds),
                                  GaussianEvent(z_var, 1)))

        z = calibrate(epsilon, delta, event_at)
        return event_at(z), eps1, z, z_var

    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` rows would
        record.

        Computed from the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`.
        ``groups=True``: preview a fit given groups; ``n_samples`` is then the number of groups
        (the fit's unit a group of rows, priced by the same plan).
        """
        return self._preview_rows(n_samples, n_features, groups)

    def _score_units(self, X, y=None):
        """Per-row captured variance and its public range ``(0, 1)`` (``None`` without
        ``data_norm``)."""
        check_is_fitted(self)
        X = self._validate_rows(X)
        B = None if self.data_norm is None else float(self.data_norm)

        def captured(A):
            P = clip_rows(A, B) @ self.components_.T  # clip_rows(A, None) is A
            return np.einsum("ij,ij->i", P, P) if B is None else np.clip(
                np.einsum("ij,ij->i", P, P) / B**2, 0.0, 1.0)
        return map_row_blocks(captured, X), None if B is None else (0.0, 1.0)

    def score(self, X, y=None):
        """Captured variance: the mean over rows of ``||V clip(x)||^2 / data_norm^2``, higher is
        better.

        ``V`` holds the released components and rows are clipped to ``data_norm`` as in the fit
        (no centering, as in :meth:`transform`); each row's score is clipped to [0, 1], so a
        replaced row moves the mean over ``n`` rows by at most ``1/n``. ``y`` is ignored; the
        score reads ``X`` exactly (it is not private).
        """
        return self._mean_score(X, y)


def _clip(X, data_norm):
    """``clip_rows``; sparse rows clipped one densified block at a time and stored sparse again
    (the same values as the dense clip: each row is scaled on its own)."""
    if not sp.issparse(X):
        return clip_rows(X, data_norm)
    blocks = [sp.csr_matrix(clip_rows(A, data_norm)) for A in row_blocks(X)]
    return sp.vstack(blocks, format="csr") if blocks else X.tocsr()


def _check_open_unit(value, name):
    value = real_scalar(value)  # a 0-d array of a number is that number, as epsilon's
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number in (0, 1), got {value!r}")
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)
