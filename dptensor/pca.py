r"""Private PCA, the estimator: the top-k principal subspace of rows or of a symmetric matrix.

:class:`PrivatePCA` checks its parameters, resolves its method, records the spend and sets its
attributes; each method (its noise plan, its memory, its spectral step) is a class in
:mod:`dptensor.algorithms.pca_methods`, and the algorithms they run (the noisy power method,
Analyze Gauss, the streaming power method, the private mean and total) are in
:mod:`dptensor.algorithms.power` and :mod:`dptensor.algorithms.streaming_power`.
Every sensitivity used is derived in ``docs/derivations/pca.rst``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import FitData, FitPlan, PrivateEstimatorMixin, SearchTag
from ._guards import as_dtype, warn
from .algorithms.dask import RowChunks, check_dask_array, is_dask_array
from ._memory import FLOAT, check_fits
from ._validation import (check_data_norm, check_finite_rows, check_positive_int, check_projections,
                          check_verbose, validate_private_data, validate_stream_chunk)
from .accounting import NonPrivateEvent, epsilon_of
from .algorithms.pca_fit import (FINITE_IN_PASS, entry_matrix_fit, exact_rows_fit, finite_in_pass,
                                 fit_memory, float_pass_first, float_rows_fit, grouped_rows_fit)
from .algorithms.pca_methods import CHOICES, METHODS, PCAMethod, last_multiplier as _last, resolve
from .algorithms.pca_model import noise_variance
from ._pca_model import ProbabilisticPCAMixin
from .algorithms.power import center_and_clip, row_power_sensitivity
from .algorithms.sparse import SparseRows, block_rows, map_row_blocks, row_blocks
from .algorithms.streaming_power import StreamingPowerMethod
from .exceptions import PrivacyWarning
from .mechanisms import clip_rows
from .mechanisms.randomness import RowDigest

__all__ = ["PrivatePCA"]


_METHODS = CHOICES  # "auto" and every batch method of algorithms/pca_methods.METHODS
_INPUTS = ("data", "precomputed")
_NEIGHBORS = (None, "row", "entry")
_UNITS = {"row": "row", "entry": "matrix entry"}  # the privacy unit, as the ledger names it
_CALIBRATIONS = ("exact", "paper")


@dataclass(frozen=True)
class _Settings:
    """A fit's validated parameters and, once planned, its noise multipliers: what the release
    reads. ``k`` components, ``p = k + n_oversamples`` columns of the power block, ``bound`` the
    unit's public bound, ``method`` the method run (:mod:`~dptensor.algorithms.pca_methods`);
    ``noise`` the spectral releases' multiplier (one, or one per power step), ``mean_noise`` and
    ``total_noise`` those of the mean and the total variance (0: not released with noise)."""

    k: int
    p: int
    epsilon: float
    delta: float
    private: bool
    precomputed: bool
    neighbors: str
    bound: float | None
    method: PCAMethod
    n_iter: int
    tol: float
    center: bool
    block_size: int | None = None
    noise: Any = 0.0
    mean_noise: float = 0.0
    total_noise: float = 0.0


class PrivatePCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ProbabilisticPCAMixin,
                 PrivateEstimatorMixin, BaseEstimator):
    r"""Differentially private PCA: noisy power method, streaming power method, or Analyze Gauss.

    Parameters
    ----------
    n_components : int, default=2
        Number of components k.
    epsilon : float, default=np.inf
        Privacy budget of one fit (or one stream); ``np.inf`` runs the exact, non-private method.
    delta : float or None, default=None
        ``None``: the accountant's delta, else 1e-5. A private ``fit`` on rows warns
        (``PrivacyWarning``) when delta is not below ``1/n_samples``; a ``partial_fit`` stream,
        whose length is not known when it starts, is not checked.
    n_iter : int or "auto", default="auto"
        Power steps (each one release). ``"auto"``: :func:`~dptensor.algorithms.power.auto_n_iter`
        (private: 3 at d = 50, 5 at d = 10^4; non-private: until the iterate is still, at most 300).
    n_oversamples : int, default=0
        Extra columns of the power block, ``p = n_components + n_oversamples``.
    method : {"auto", "power", "analyze_gauss", "clipped_power"}, default="auto"
        ``"auto"`` (public settings only): private (exact) rows without ``groups`` and with
        ``300 <= d <= 5000`` get ``"clipped_power"`` (grid: ``benchmarks/results/pca_high_d.md``);
        else Analyze Gauss up to ``d = 2000``, the power method beyond, for a precomputed matrix and
        ``partial_fit``. ``"clipped_power"``: an Analyze Gauss start, then ``n_iter`` (auto: 2)
        power steps clipping each row's projection (sensitivity ``2 data_norm tau``), or, where
        ``tau > data_norm / 4``, Analyze Gauss pooled from the same releases. Memory is checked.
    input : {"data", "precomputed"}, default="data"
        ``"data"``: X is (n_samples, n_features). ``"precomputed"``: X is a symmetric d x d matrix
        ``A`` whose top-k eigenvectors (by magnitude) are wanted; ``transform`` takes d-rows.
    neighbors : {None, "row", "entry"}, default=None
        The privacy unit. ``"row"`` (the default for data): replace one row. ``"entry"`` (the
        default, and the only choice, for precomputed input): one symmetric pair ``A_ij = A_ji`` (or
        one diagonal entry) changes by at most ``data_norm`` (1 when ``data_norm`` is None).
    data_norm : float or None, default=None
        Row-level: the public l2 bound rows are clipped to; required when epsilon is finite.
        Entry-level: the bound on an entry's change.
    centered : bool, default=False
        ``False``: the mean is estimated (privately, from its own budget share ``MEAN_SHARE`` of
        ``mu^2``) and subtracted, and centred rows are clipped again to ``data_norm``. ``True``: the
        caller promises the data are already centred by public means; nothing is subtracted and
        ``mean_`` is zero. The promise cannot be checked.
    calibration : {"exact", "paper"}, default="exact"
        ``"exact"``: the least noise meeting ``(epsilon, delta)`` by exact GDP composition, so the
        recorded cost equals the target. ``"paper"``: the papers' formulas (Hardt–Price
        ``sigma = eps^-1 sqrt(4 p L ln(1/delta))`` times ``||X_{l-1}||_inf`` for entry-level PPM,
        its multiplier ``sqrt(4 L ln(1/delta))/eps`` for row-level power steps, the classical
        ``sqrt(2 ln(1.25/delta))/eps`` for Analyze Gauss); the cost recorded is what that noise
        really costs.
    whiten : bool, default=False
        ``transform`` divides by ``sqrt(explained_variance_)`` (the released estimate).
    block_size : int or None, default=None
        Rows per block of the streaming power method (``partial_fit`` only). ``None``:
        ``max(1000, 10 * n_features)``. Fixed for a stream, so the result does not depend on the
        batch sizes given to ``partial_fit``.
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) for real releases; a seed makes the noise reproducible.
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Released principal axes (orthonormal rows, largest entry positive).
    explained_variance_ : ndarray of shape (n_components,)
        Private estimate of the variance along each component, released at no extra cost as
        post-processing: Analyze Gauss's noisy eigenvalues, or the power method's Ritz values
        from its last product; divided by ``n_samples - 1`` for data (a covariance), raw
        eigenvalues of ``A`` for precomputed input. Floored at 0 for data.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``explained_variance_`` over the total variance, a share of a whole (it sums to at most 1).
        The total is exact without privacy; a private row-level fit with ``calibration="exact"``
        releases it from its own budget share :data:`~dptensor.algorithms.power.TOTAL_SHARE`
        (``sum_i ||c_i||^2`` over the clipped, centred rows plus Gaussian noise; sensitivity
        ``data_norm^2``); with ``calibration="paper"`` or precomputed input, Analyze Gauss's
        released trace serves. When noise pushes the released eigenvalues' sum above the released
        total, they are divided by their own sum instead. Not set when no total is released (private
        power method with ``calibration="paper"`` or on a precomputed matrix; ``partial_fit``).
    explained_variance_noise_ : ndarray of shape (n_components,)
        The typical size of the privacy noise in each released eigenvalue, in the units of
        ``explained_variance_``: a public function of the noise plan
        (:func:`~dptensor.algorithms.power.eigenvalue_noise_level`; 0 without privacy). A component
        whose ``explained_variance_`` is not clearly above it (below twice it) is dominated by
        noise, and ``fit`` warns (``UserWarning``) naming it.
    singular_values_ : ndarray of shape (n_components,)
        ``sqrt(explained_variance_ * (n_samples_ - 1))``, as scikit-learn relates them: released
        values only. Not set for a precomputed matrix (no rows) or ``partial_fit``.
    noise_variance_ : float
        scikit-learn's ``(total - sum(explained_variance_)) / (min(n_samples_, n_features) - k)``
        (0 when ``k >= min(n, d)``), ``total`` the released total variance behind
        ``explained_variance_ratio_`` over ``n_samples_ - 1``, floored at ``2**-20`` times the
        eigenvalues' noise level (0 without privacy): a private model is never singular. It and
        the model it sets (:meth:`get_covariance`, :meth:`get_precision`, :meth:`score_samples`)
        exist only where that total is released: not for precomputed input or ``partial_fit``,
        nor for the private power method with ``calibration="paper"`` (no total in its plan).
    mean_ : ndarray of shape (n_features,)
        The released (private) mean, or zeros when ``centered=True`` or the input is precomputed.
    n_components_, n_features_in_, feature_names_in_ : as in scikit-learn.
    n_samples_ : int
        Rows used by ``fit`` (public under the replace-one relation).
    n_samples_seen_ : int
        Rows streamed through ``partial_fit``.
    method_ : str
        The method ``"auto"`` resolved to (``"power"``, ``"analyze_gauss"``,
        ``"clipped_power"`` or ``"streaming_power"``).
    n_iter_ : int
        Products released (power steps, completed power blocks, or 1 for Analyze Gauss).
    privacy_cost_ : PrivacyCost
        The fit's (or stream's) cost, recorded with the accountant before any noisy release.

    Notes
    -----
    **Guarantee.** With a finite epsilon, a fit is ``(epsilon, delta)``-DP for the chosen unit: all
    it releases (``components_``, ``explained_variance_``, ``mean_``, the total behind the ratio) is
    post-processing of Gaussian releases whose sensitivities are derived in
    ``docs/derivations/pca.rst``; ``n`` and ``d`` are public. A stream through ``partial_fit`` is
    ``(epsilon, delta)``-DP as a whole, under replace-one of a streamed row, by parallel
    composition over disjoint blocks.

    **Groups of rows.** ``fit(X, groups=labels)`` protects each group (rows sharing a label: a
    person's visits, sessions, transactions) as one unit. Each group adds its average row
    (clipped) to the mean, and its centred rows, scaled together by ``min(1, data_norm /
    sqrt(sum_i ||c_i||^2))``, to the total and the covariance: replacing a whole group moves
    each release by at most one row's sensitivity. ``n`` is the number of groups (public);
    ``privacy_cost_.unit`` and the ledger say ``"group of rows"``. Refused before any spend: bad
    labels, ``epsilon=inf``, dask, precomputed input, ``partial_fit`` (``derivations/pca.rst``).

    **Sparse rows.** ``fit``, ``partial_fit``, ``transform``, ``score`` and ``score_samples``
    take ``scipy.sparse`` CSR or CSC rows (``input="data"``; a precomputed matrix is dense).
    Every pass over the rows densifies one block of about ``2**22`` entries at a time
    (:mod:`dptensor.algorithms.sparse`), so a fit holds O(block d + d^2) beside the matrix
    (Analyze Gauss; O(block d + d p) for the power method), and the centring happens on each
    block's dense copy: no mean is ever subtracted from the sparse matrix. Each statistic is the
    dense fit's per-row map summed over the blocks: a private fit's exact sums on the grid are
    the same integers, so with the same seed (keyed by the dense rows' digest) it releases the
    dense fit's values bit for bit, at the same sensitivities; a fit without privacy (float
    sums) agrees to rounding. ``fit`` with ``groups`` needs dense rows.

    **Which method.** Analyze Gauss releases one noisy d x d matrix; the row-level power method
    releases ``n_iter`` noisy d x p products at the same sensitivity, so its noise is
    ``sqrt(n_iter)`` larger for the same budget and it is less accurate whenever the d x d matrix
    fits. It wins on memory and time, O(n d p) per step and O(d p) state (d = 10^4 and beyond), and
    in streams. For a precomputed matrix under entry-level privacy, the PPM noise scales with the
    iterate's largest rows: on an incoherent matrix (rows of size ``sqrt(p/d)``) it is far below
    Analyze Gauss's; on a coherent one it is not, and ``method="analyze_gauss"`` is better.

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor import PrivatePCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((10000, 5)) * [5.0, 2.0, 1.0, 0.5, 0.1]
    >>> pca = PrivatePCA(n_components=2, epsilon=1.0, data_norm=12.0, random_state=0).fit(X)
    >>> np.abs(pca.components_.round(1)).tolist()
    [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]]
    >>> round(pca.privacy_cost_.epsilon, 6)
    1.0
    """

    _search_tag = SearchTag(groups=True)  # fit(X, groups=...) bounds a group of rows

    _stream_attributes = ("_stream", "_stream_params")
    _sparse_as_dense = True  # a fit on sparse rows releases the dense fit's values

    def __init__(self, n_components=2, *, epsilon=np.inf, delta=None, n_iter="auto",
                 n_oversamples=0, method="auto", input="data", neighbors=None, data_norm=None,
                 centered=False, calibration="exact", whiten=False, block_size=None,
                 accountant=None, random_state=None, verbose=0):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.n_oversamples = n_oversamples
        self.method = method
        self.input = input
        self.neighbors = neighbors
        self.data_norm = data_norm
        self.centered = centered
        self.calibration = calibration
        self.whiten = whiten
        self.block_size = block_size
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_settings(self, n_features, *, streaming=False, grouped=False) -> _Settings:
        """The validated parameters (no noise yet); raises an error naming the one at fault."""
        for name, value, allowed in (("method", self.method, _METHODS),
                                     ("input", self.input, _INPUTS),
                                     ("neighbors", self.neighbors, _NEIGHBORS),
                                     ("calibration", self.calibration, _CALIBRATIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        check_verbose(self.verbose)
        k = check_positive_int(self.n_components, "n_components")
        over = check_positive_int(self.n_oversamples, "n_oversamples", minimum=0)
        if k > n_features:
            raise ValueError(f"n_components={k} must be <= n_features={n_features} "
                             f"(X has {n_features} feature(s))")
        epsilon, delta = self._privacy_target()
        private = math.isfinite(epsilon)
        precomputed = self.input == "precomputed"
        neighbors, bound = self._check_unit(precomputed, epsilon)
        for name in ("centered", "whiten"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        method = self._check_method(n_features, precomputed, private, streaming, grouped)
        p = k + over
        if method.block and p > n_features:
            raise ValueError(f"n_components + n_oversamples = {p} must be <= "
                             f"n_features={n_features}")
        if self.n_iter == "auto":
            n_iter, tol = method.auto_n_iter(n_features, private), (0.0 if private else 1e-13)
        else:
            n_iter, tol = check_positive_int(self.n_iter, "n_iter"), 0.0
        block_size = None
        if streaming:
            block_size = (max(1000, 10 * n_features) if self.block_size is None
                          else check_positive_int(self.block_size, "block_size"))
        return _Settings(k=k, p=p, epsilon=epsilon, delta=delta, private=private,
                         precomputed=precomputed, neighbors=neighbors, bound=bound, method=method,
                         n_iter=n_iter, tol=tol, center=not (self.centered or precomputed),
                         block_size=block_size)

    def _check_unit(self, precomputed, epsilon):
        """``(neighbors, bound)``: the privacy unit and its public bound."""
        neighbors = self.neighbors or ("entry" if precomputed else "row")
        if precomputed and neighbors != "entry":
            raise ValueError("neighbors='row' needs the rows themselves (input='data'): a "
                             "precomputed matrix hides the clipping that the row-level guarantee "
                             "rests on")
        if not precomputed and neighbors != "row":
            raise ValueError("neighbors='entry' is the unit of a precomputed matrix "
                             "(input='precomputed'); data input is private per row")
        if neighbors == "entry":
            return neighbors, 1.0 if self.data_norm is None else check_data_norm(self.data_norm,
                                                                                 np.inf)
        return neighbors, check_data_norm(self.data_norm, epsilon)

    def _check_method(self, n_features, precomputed, private, streaming, grouped=False):
        """The method ``method`` resolves to for this input."""
        if streaming:
            if precomputed or not (self.method == "auto" or METHODS[self.method].streams):
                raise ValueError("partial_fit runs the streaming power method on rows: it needs "
                                 "method='auto' or 'power' and input='data'")
            if private and self.calibration == "paper":
                raise ValueError("calibration='paper' has no streaming form (Hardt–Price's SPM "
                                 "is not private); use calibration='exact'")
            return METHODS["streaming_power"]
        return resolve(self.method, n_features, precomputed, grouped=grouped,  # "paper": as before
                       private=private and self.calibration == "exact")

    def _validate_input(self, X, reset, finite=True):
        if is_dask_array(X):  # rows on a Dask cluster: checked lazily, never pulled here
            if self.input == "precomputed":
                raise TypeError("input='precomputed' takes a d x d NumPy matrix, not a dask "
                                "array; pass the rows themselves (input='data') to run on Dask")
            return check_dask_array(self, X, reset=reset)
        # sparse rows are read a dense block at a time; a precomputed matrix is dense
        sparse = ("csr", "csc") if self.input == "data" else False
        X = validate_private_data(self, X, dtype=[np.float64, np.float32], reset=reset,
                                  accept_sparse=sparse, ensure_all_finite=finite)
        if self.input == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError("input='precomputed' needs a square symmetric matrix, got shape "
                                 f"{X.shape}")
            scale = max(float(np.max(np.abs(X))), np.finfo(X.dtype).tiny)
            if np.max(np.abs(X - X.T)) > (1e-10 if X.dtype == np.float64 else 1e-5) * scale:
                raise ValueError("input='precomputed' needs a symmetric matrix; X differs from X.T")
        return X

    def _check_data(self, X, groups=None) -> FitData:
        """``X`` (and ``groups``) validated, the delta checked against the public ``n``."""
        if groups is not None:
            return self._check_grouped(X, groups)
        in_pass = finite_in_pass(X, self.input)  # NaN refused by the first pass itself
        X = self._validate_input(X, reset=True, finite=not in_pass)
        if self.input != "precomputed":
            epsilon, delta = self._privacy_target()
            self._check_delta_for(X.shape[0], epsilon, delta)
        return FitData(arrays=(X,), shape=X.shape, extra=FINITE_IN_PASS if in_pass else None)

    def _before_spend(self, data, plan):  # the first pass, which checks X itself
        if data.extra is not FINITE_IN_PASS:
            return data
        check_fits(plan.memory[0], "PrivatePCA.fit", plan.memory[1])  # before the pass, too
        return replace(data, extra=float_pass_first(  # refused with validation's own message
            data.arrays[0], plan.settings, lambda X: check_finite_rows(self, X)))

    def _check_grouped(self, X, groups) -> FitData:
        """A fit whose unit is a group of rows: private, on rows in memory, one label a row."""
        self._check_groups_allowed(X)
        if sp.issparse(X):  # the group scaling holds every grid row at once
            raise TypeError("PrivatePCA.fit with groups needs dense rows: a sparse X would be "
                            "densified whole. Fit without groups, or pass X.toarray()")
        X = self._validate_input(X, reset=True)
        codes, n_groups = self._check_groups(groups, X.shape[0])
        return FitData(arrays=(X, codes), shape=(n_groups, X.shape[1]), extra=codes,
                       public=dict(n_rows=X.shape[0], grouped=True))

    def _check_groups_private(self):  # a fit or a preview given groups: rows, and private
        if self.input == "precomputed":
            raise ValueError("groups labels rows: a precomputed matrix has none (its unit: entry)")
        super()._check_groups_private()

    # ------------------------------------------------------------------ planning
    def _plan(self, shape, *, streaming=False, n_rows=None, grouped=False) -> FitPlan:
        """The fit's plan from its public shape: parameters checked, noise multipliers chosen,
        the event priced, the memory bounded (no data involved). ``shape`` is ``(n_rows,
        n_features)`` (a stream's chunk; ``(n_groups, d)`` with groups, ``n_rows`` then sizing
        the memory), ``(d, d)`` for a precomputed matrix."""
        settings = self._check_settings(shape[1], streaming=streaming, grouped=grouped)
        noise, event, queries = self._noise_plan(settings)
        settings = replace(settings, **noise)
        rows = None if settings.precomputed else (shape[0] if n_rows is None else n_rows)
        return FitPlan(event=NonPrivateEvent("epsilon=inf") if event is None else event,
                       delta=settings.delta, noise_multiplier=_last(settings.noise),
                       n_queries=queries, calibration=self.calibration, settings=settings,
                       memory=self._fit_memory(settings, rows, shape[1], grouped),
                       unit="group of rows" if grouped else _UNITS[settings.neighbors])

    def _noise_plan(self, settings):
        """``(multipliers, event, n_queries)``: the noise of every release and the event they make
        together (``None``: not private), from the method's plan
        (:meth:`~dptensor.algorithms.pca_methods.PCAMethod.noise_plan`)."""
        if not settings.private:
            return dict(noise=0.0, mean_noise=0.0, total_noise=0.0), None, 0
        noise, event, queries = settings.method.noise_plan(settings, self.calibration)
        if self.calibration == "paper":
            eps, cost = settings.epsilon, epsilon_of(event, settings.delta)
            if cost > eps * (1 + 1e-9):
                warn(f"calibration='paper' costs epsilon={cost:.4g} > the target {eps:g} "
                     f"under this unit ({settings.neighbors}); the accountant records "
                     "the true cost", PrivacyWarning)
        return noise, event, queries

    def _spend_plan(self, plan, data):
        # Dask rows stay on the workers: the fit holds only its d x p (or d x d) arrays here.
        if data.arrays and is_dask_array(data.arrays[0]):
            plan = replace(plan, memory=self._fit_memory(plan.settings, None, data.shape[1]))
        elif data.arrays and sp.issparse(data.arrays[0]):  # one dense block of rows at a time
            d = data.shape[1]
            plan = replace(plan, memory=self._fit_memory(plan.settings, block_rows(d), d))
        return super()._spend_plan(plan, data)

    @staticmethod
    def _fit_memory(settings, n_rows, d, grouped=False):
        """``(bytes, advice)``: the fit's peak allocation (``pca_fit.fit_memory``)."""
        return fit_memory(n_rows, d, p=settings.p, method=settings.method,
                          private=settings.private, precomputed=settings.precomputed,
                          grouped=grouped)

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` x ``n_features`` data (none read)."""
        return self._fit_memory(self._check_settings(n_features), n_samples, n_features)

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, *, groups=None):
        """Fit on data X (n_samples, n_features) or a precomputed symmetric matrix; one plan.

        ``X`` is never modified. A NaN or an infinity anywhere in ``X`` is refused with
        ``ValueError`` before anything is spent (every row is in hand then); a stream through
        :meth:`partial_fit`, which spends first, maps such rows instead. Returns self.

        ``groups`` (shape (n_samples,)): rows sharing a label are one person, protected as a
        whole; ``n`` is the number of groups. See the class Notes, "Groups of rows".
        """
        return self._fit_private(X) if groups is None else self._fit_private(X, groups)

    def _release(self, data, plan, rng):
        """Everything after the spend: the releases of ``plan``, then the fitted attributes."""
        X, settings = data.arrays[0], plan.settings
        if sp.issparse(X):  # read one densified block of rows at a time
            X = SparseRows(X)
        for attr in ("_stream", "_stream_params", "n_samples_seen_", "_stream_detached"):
            self.__dict__.pop(attr, None)
        shared = dict(k=settings.k, p=settings.p, n_iter=settings.n_iter, bound=settings.bound,
                      method=settings.method, noise=settings.noise, verbose=self.verbose)
        if settings.precomputed:
            result = entry_matrix_fit(X, rng, paper=self.calibration == "paper",
                                      tol=settings.tol, **shared)
            mean, scale = None, 1.0
            total = None if settings.private else float(np.trace(X))
        else:
            rows = dict(center=settings.center, mean_noise=settings.mean_noise,
                        total_noise=settings.total_noise, **shared)
            if data.public.get("grouped"):  # groups of rows: one group is the unit
                result, mean, total = grouped_rows_fit(X, rng, codes=data.extra,
                                                       n_groups=data.shape[0], **rows)
            elif settings.private:  # exact sums of grid rows (NumPy or Dask): hold at any n
                result, mean, total = exact_rows_fit(X, rng, sums=data.extra, **rows)
            else:
                result, mean, total = float_rows_fit(X, rng, private=False, tol=settings.tol,
                                                     gram=data.extra, **rows)
            self.n_samples_ = data.shape[0]  # the number of groups, with groups
            scale = 1.0 / max(data.shape[0] - 1, 1)
        mean = np.zeros(X.shape[1], dtype=X.dtype) if mean is None else mean
        # The total variance: released from its own share (exact row-level fits), exact without
        # privacy, else the trace of Analyze Gauss's released matrix (calibration="paper",
        # precomputed input); the private power method otherwise releases none.
        if total is None and result.total is not None:
            total = result.total
        self.method_ = settings.method.name
        noise = settings.method.result_noise_level(result, X.shape[1], settings.p)
        ev = self._set_spectrum(result, mean, scale, total, noise, floor=not settings.precomputed)
        self._set_model(None if settings.precomputed else data.shape[0], ev)

    def _set_model(self, n_rows, ev):
        """``singular_values_`` and ``noise_variance_`` from the released spectrum and total, as
        scikit-learn's PCA defines them (post-processing); neither for a precomputed matrix."""
        self.__dict__.pop("singular_values_", None), self.__dict__.pop("noise_variance_", None)
        if n_rows is None:
            return
        # from the float64 variances ev: ev (n - 1), even ev, may pass float32's range, the root not
        self.singular_values_ = as_dtype(np.sqrt(ev * max(n_rows - 1, 1)), self.components_.dtype)
        if self._total_variance is not None:
            self.noise_variance_ = noise_variance(
                self._total_variance, ev, n_rows, self.components_.shape[1],
                noise_level=float(np.max(self.explained_variance_noise_)))

    def _set_spectrum(self, result, mean, scale, total, noise, *, floor):
        self.components_ = result.components
        dtype = result.components.dtype  # in float64 (a float32 fit's sums reach n B^2), then cast
        ev = np.asarray(result.eigenvalues, dtype=np.float64) * scale
        ev = np.maximum(ev, 0) if floor else ev
        self.explained_variance_ = as_dtype(ev, dtype)
        self.explained_variance_noise_ = as_dtype(np.full(ev.shape, noise * scale), dtype)
        self.__dict__.pop("explained_variance_ratio_", None)
        self._total_variance = None
        if total is not None:
            # Noise can push the released eigenvalues above the released total; dividing by the
            # larger of the two keeps the ratios a share of a whole (post-processing).
            whole = max(float(total), float(np.sum(np.abs(ev))) / scale)
            self._total_variance = whole * scale  # the covariance's trace, as released
            if whole > 0:
                self.explained_variance_ratio_ = as_dtype(ev / (whole * scale), dtype)
        weak = np.flatnonzero(np.abs(ev) < 2 * noise * scale)
        if weak.size:
            warn(f"the released explained_variance_ of component(s) "
                 f"{(weak + 1).tolist()} is below twice its noise level "
                 "(explained_variance_noise_): those components are dominated by the "
                 "privacy noise. Use fewer components, more data, a larger epsilon or a "
                 "tighter data_norm.", UserWarning)
        self.mean_, self.n_iter_ = mean, result.n_iter
        self.n_components_ = result.components.shape[0]
        if self.verbose:
            print(f"[PrivatePCA] {self.method_}: {self.n_iter_} release(s), "
                  f"epsilon={self.privacy_cost_.epsilon:.4g}")
        return ev  # the float64 variances, for singular_values_

    # ------------------------------------------------------------------ streaming
    def partial_fit(self, X, y=None, *, groups=None):
        """Stream a batch of rows through the Streaming Power Method
        (:class:`~dptensor.algorithms.streaming_power.StreamingPowerMethod`).

        The first call plans and records the whole stream's cost (one Gaussian event, whatever its
        length). Components exist once the first power block has closed. ``fit`` starts over.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_rows, n_features), or a dask array (fed chunk
            by chunk; sparse rows one densified block at a time)
            The next rows of the stream, any number. Not modified. In a private stream a row that
            holds a NaN, an infinity or an entry that is no number (text) is used as a zero row
            (see Notes), as is a later chunk's row that is not ``n_features`` numbers (ragged
            rows); a non-private stream refuses it with ``ValueError``.
        y : ignored
        groups : None
            Refused (a group could span two blocks): use :meth:`fit` with ``groups``.

        Returns
        -------
        self

        Notes
        -----
        A private stream spends at its first call, before its later chunks exist, so it cannot
        refuse a non-finite value in one without an error after the spend that depends on the
        data. It therefore takes every row, in every chunk (the first too, so that the result does
        not depend on where the stream is cut), through one public map: a row with a NaN or an
        infinity becomes the zero row. The row keeps its place in its block and is counted in
        ``n_samples_seen_``; the map acts on each row alone, so the stream's guarantee and
        sensitivities are unchanged (``docs/derivations/pca.rst``). Nothing warns or reports how
        many rows were mapped: check the rows first if that matters to you.
        """
        if groups is not None:
            raise ValueError("partial_fit takes no groups: one group's rows could fall in two "
                             "power blocks and count in both. Use fit(X, groups=groups)")
        # Dask rows: pulled one chunk at a time, in order (the cut does not matter)
        if is_dask_array(X):
            for chunk in RowChunks(X, skip_empty=True):
                self.partial_fit(chunk)
            return self
        if sp.issparse(X) and not X.shape[0]:  # no rows: checked as the empty array it stands for
            X = X.toarray()  # (a later one adds nothing, a first is refused before the spend)
        if sp.issparse(X):  # sparse rows: one densified block at a time
            for block in row_blocks(X):
                self.partial_fit(block)
            return self
        self._check_stream_attached()
        if not (first := getattr(self, "_stream", None) is None):
            self._check_stream_params()
        X = validate_stream_chunk(self, X, reset=first, dtype=[np.float64, np.float32])
        if first:
            self._start_stream(X)
        else:  # a later chunk, larger maybe: refused by its shape alone, and the stream goes on
            check_fits(2 * X.size * FLOAT, "PrivatePCA.partial_fit",
                       "Pass the rows in smaller chunks (the result does not depend on the cut)")
        before = self._stream.n_blocks
        # the stream computes in its own dtype: a float64 chunk of a float32 stream is cast first
        stream = self._stream.update(np.asarray(X, dtype=self._stream.dtype))
        self.n_samples_seen_ = stream.n_samples_seen
        self.n_iter_ = stream.n_blocks
        if self.verbose and stream.n_blocks > before:  # progress: counts only, all public
            print(f"[PrivatePCA] stream: {stream.n_blocks} power block(s) released, "
                  f"{stream.n_samples_seen} rows seen", flush=True)
        dtype = stream.dtype  # its releases are float64: cast here, inf past float32's range
        if stream.mean is not None:
            self.mean_ = as_dtype(stream.mean, dtype)
        if stream.components is not None:
            self.components_ = stream.components
            self.explained_variance_ = as_dtype(np.maximum(stream.eigenvalues, 0), dtype)
            self.explained_variance_noise_ = as_dtype(
                np.full(len(stream.eigenvalues), float(self._stream_noise)), dtype)
            self.n_components_ = stream.components.shape[0]
        return self

    def _start_stream(self, X):
        """A stream's first chunk: plan and spend the whole stream, open its state."""
        d = X.shape[1]
        # the stream holds one chunk and its block's sums at a time: this chunk stands for it
        plan = self._plan((X.shape[0], d), streaming=True)
        settings = plan.settings
        T = settings.block_size
        self.privacy_cost_, rng = self._spend_plan(plan, FitData(arrays=(), shape=(d, T)))
        self._hold_stream_params()
        self._stream = StreamingPowerMethod(
            d, settings.k, T, rng, n_oversamples=settings.p - settings.k,
            data_norm=settings.bound, noise_multiplier=settings.noise,
            centered=not settings.center, dtype=X.dtype,
            digest=None if self.random_state is None else RowDigest(X.dtype, d))
        self.method_ = settings.method.name
        std = (_last(settings.noise) * row_power_sensitivity(settings.bound, settings.p) / T
               if settings.private else 0.0)
        self._stream_noise = settings.method.noise_level(std, d, settings.p)
        for attr in ("components_", "explained_variance_", "explained_variance_ratio_",
                     "mean_", "n_samples_", "explained_variance_noise_", "singular_values_",
                     "noise_variance_"):
            self.__dict__.pop(attr, None)

    # ------------------------------------------------------------------ transforming
    def transform(self, X):
        """Project rows onto ``components_`` (after subtracting ``mean_``); X is not modified."""
        check_is_fitted(self, "components_")
        if is_dask_array(X):  # a lazy dask projection, computed where the rows are
            X = check_dask_array(self, X, reset=False, check_finite=False)
        else:
            X = self._validate_rows(X)
        Z = map_row_blocks(lambda R: (R - self.mean_) @ self.components_.T, X)
        if self.whiten:
            Z = Z / self._whitening_scale()
        return Z

    def inverse_transform(self, X):
        """Map projections back to feature space: ``Z @ components_ + mean_`` (whitening undone)."""
        check_is_fitted(self, "components_")
        Z = check_projections(X, self.n_components_)  # finite numbers, as transform's X
        if self.whiten:
            Z = Z * self._whitening_scale()
        return Z @ self.components_ + self.mean_

    def _whitening_scale(self):
        ev = np.abs(self.explained_variance_)
        # A private estimate can be 0; floor it so whitening stays finite (post-processing).
        return np.sqrt(np.maximum(ev, np.finfo(ev.dtype).eps * max(float(ev.max()), 1.0)))

    @property
    def _n_features_out(self):
        return self.n_components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags

    # ------------------------------------------------------------------ pricing and scoring
    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The :class:`~dptensor.PrivacyCost` a ``fit`` on ``n_samples`` x ``n_features`` data
        would record, from the parameters alone with the fit's own plan (no data, no spend).
        ``groups=True``: preview a fit given groups; ``n_samples`` is then the number of groups."""
        return self._preview_rows(n_samples, n_features, groups)

    def _score_units(self, X, y=None):
        """Per-row captured variance and its public range ``(0, 1)`` (None without data_norm)."""
        check_is_fitted(self, "components_")
        if self.input == "precomputed":
            raise ValueError("score needs rows (input='data'); a precomputed matrix has no "
                             "per-row score")
        X = self._validate_rows(X)
        V = self.components_
        if self.data_norm is None:
            def captured(R):
                P = (R - self.mean_) @ V.T
                return np.einsum("ij,ij->i", P, P)
            return map_row_blocks(captured, X), None
        B = float(self.data_norm)

        def captured_share(R):
            P = (center_and_clip(clip_rows(R, B), self.mean_, B) @ V.T).astype(float) / B  # f64
            return np.clip(np.einsum("ij,ij->i", P, P), 0.0, 1.0)
        return map_row_blocks(captured_share, X), (0.0, 1.0)

    def score(self, X, y=None):
        """Captured variance: the mean over rows of ``||V r||^2 / data_norm^2``, higher is better.

        ``r`` is the row as the fit uses it (clipped to ``data_norm``, centred on ``mean_``,
        clipped again) and ``V`` the released components, so each row's score lies in [0, 1]: a
        replaced row moves the mean over ``n`` rows by at most ``1/n``, the sensitivity with which
        :class:`~dptensor.model_selection.PrivateGridSearchCV` releases it. Without ``data_norm``
        it is the unnormalised ``||V (x - mean_)||^2``, with no bound. ``y`` is ignored. The
        score itself is not private: it reads ``X`` exactly.
        """
        return self._mean_score(X, y)
