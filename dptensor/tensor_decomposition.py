r"""Orthogonal tensor decomposition by the robust tensor power method, private or not.

The estimator :class:`PrivateTensorDecomposition` validates, plans and prices its release with the
accountant *before* any noisy query, then runs the algorithm of
:mod:`dptensor.algorithms.tensor_power` (Wang & Anandkumar 2016, Alg. 1 and 3). The sensitivities
are derived in ``docs/derivations/tensor_decomposition.rst`` and checked by brute force in the
tests.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import (FitData, FitPlan, NoisePreview, PrivateEstimatorMixin, SearchTag,
                    warn_noise_dominated)
from ._memory import FLOAT
from ._validation import (check_data_norm, check_positive_int, check_symmetric_tensor,
                          check_verbose, validate_private_data)
from .accounting.events import GaussianEvent, NonPrivateEvent
from .algorithms.dask import (DaskThirdMoment, check_dask_array, clip_chunks, dask_moment_tensor,
                              is_dask_array)
from .algorithms.exact import ExactThirdMoment, exact_memory, grid_rows, map_rows
from .algorithms.exact_entries import DIGITS, ExactEntryTensor
from .algorithms.grouped_tensor import ExactGroupMoment, group_scale_cubes, moment_tensor_split
from .algorithms.operators import SymmetricTensor, ThirdMoment, moment_chunk_rows, moment_tensor
from .algorithms.tensor_power import (ENTRY_SENSITIVITY, PowerNoise, choose_moment,
                                      dense_moment_rounding, eigenvalue_noise, moment_fit_scores,
                                      n_power_queries,
                                      perturb_tensor, plan_noise_multiplier, row_sensitivity,
                                      tensor_power_method)
from .mechanisms import clip_rows

__all__ = ["PrivateTensorDecomposition"]

#: What a noise-dominated fit's warning advises.
_ADVICE = "Use fewer components, more data, a larger epsilon or a tighter data_norm."


@dataclass(frozen=True)
class DecompositionSettings:
    """What a fit's release step needs, decided before the spend from public values only.

    ``moment`` is ``"tensor"`` (3-D X), ``"implicit"`` or ``"dense"``; ``data_norm`` the rows'
    clip (``None`` for a tensor); ``sensitivity`` the row sensitivity of every query (``None``:
    the tensor-entry unit, or no privacy); ``grouped``: one group of rows is the unit (``n``,
    in ``sensitivity``, is then the number of groups).
    """

    n_components: int
    method: str
    moment: str
    private: bool
    data_norm: float | None
    sensitivity: float | None
    grouped: bool = False


class PrivateTensorDecomposition(ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                                 PrivateEstimatorMixin, BaseEstimator):
    r"""Orthogonal decomposition ``T ~ sum_i lambda_i v_i⊗3`` by the robust tensor power method.

    ``fit(X)`` accepts either a symmetric d x d x d tensor, or data X (n x d), decomposed through
    its empirical third moment ``T = (1/n) sum_l x_l⊗3`` (never formed unless ``moment`` says so).
    With ``epsilon=np.inf`` it runs Alg. 1 (Wang & Anandkumar 2016): for each component, L random
    restarts, R power steps ``u <- T(I,u,u)/||.||``, the restart with the largest ``T(u,u,u)`` wins,
    then deflation. With a finite epsilon it runs Alg. 3 (every query noised) or the
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

    **Groups of rows.** ``fit(X, groups=labels)`` (2-D X) protects each group (rows sharing a
    label: one person's rows) as one unit. The grid rows of each group are scaled together so
    that ``sum_i ||x_i||^3 <= data_norm^3`` (checked in integers), and every power query is an
    exact integer sum of them: replacing a whole group moves each query by at most one row's
    ``2 B^3 / n``, with ``n`` the number of groups (public). ``privacy_cost_.unit`` and the
    ledger say ``"group of rows"``. ``moment="dense"`` and ``method="input_perturbation"`` use
    the group-scaled dense moment, summed exactly. Refused before any spend: a 3-D X (its unit
    is one entry), bad labels, ``epsilon=inf`` and dask.
    See ``docs/derivations/tensor_decomposition.rst``, "Groups of rows".

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
        is finite; must be None for a 3-D X (a tensor's entries are not clipped: its unit is one
        entry), which is refused otherwise, before any spend.
    moment : {"auto", "implicit", "dense"}, default="auto"
        How the third moment of 2-D data is held for ``method="power"``. ``"implicit"`` costs
        O(ndL) per step and O(nd + dL) memory; ``"dense"`` forms T in O(nd^3) time and O(d^3)
        memory, then costs O(d^3 L) per step; ``"auto"`` picks by :func:`choose_moment`
        (``"implicit"`` for a Dask X, whose d^3 tensor would be summed on the client, and for a
        private fit, whose implicit queries are exact sums of grid rows:
        ``docs/derivations/exact_sums.rst``; a private ``"dense"`` fit sums in float64, with the gap
        the privacy guide states). A fit whose memory bound (these sizes, from the shape) exceeds
        what the process can allocate is refused before its spend
        (:class:`~dptensor.MemoryRefusedError`).
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
    eigenvalues_noise_ : ndarray of shape (n_components,)
        The typical size of the privacy noise in each released eigenvalue, in the units of
        ``eigenvalues_``: a function of the noise plan and the released components only
        (:func:`~dptensor.algorithms.tensor_power.eigenvalue_noise`; 0 without privacy). For
        ``method="power"`` it is the norm of one power step's noise, ``sqrt(d) z s_2``; for input
        perturbation, where the noise tensor's own top eigenvalues sit. A component whose
        eigenvalue is below twice it is dominated by the noise, and ``fit`` warns
        (``UserWarning``) naming it. :meth:`expected_noise` reports it before a fit on rows.
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

    _search_tag = SearchTag(groups=True)  # fit(X, groups=...) bounds a group of rows

    def __init__(self, n_components=None, *, epsilon=np.inf, delta=None, n_restarts=10, n_iter=20,
                 method="power", calibration="exact", data_norm=None, moment="auto",
                 symmetrize=False, accountant=None, random_state=None, verbose=0):
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
    def fit(self, X, y=None, *, groups=None):
        """Decompose X (n x d data, or a d x d x d symmetric tensor); ``y`` is ignored.
        ``groups`` (shape (n_samples,), 2-D X only): rows sharing a label are one person,
        protected as a whole; see the class Notes, "Groups of rows".

        A ``dask.array.Array`` of data stays where it is: it is validated lazily and every power
        step is one reduction over its row chunks (see ``docs/dask.rst``); the noise is drawn here,
        as for an in-memory X, so the fit and its privacy cost are the same.
        """
        return self._fit_private(X) if groups is None else self._fit_private(X, groups)

    def _check_data(self, X, groups=None) -> FitData:
        """X validated (a Dask X lazily, never materialised here); a tensor checked symmetric
        (``extra``: the tensor, or its symmetric part); rows warned about a ``delta >= 1/n``."""
        if groups is not None:
            return self._check_grouped(X, groups)
        if is_dask_array(X):
            X = check_dask_array(self, X)
        else:
            X = validate_private_data(self, X, allow_nd=True, dtype=[np.float64, np.float32])
        if X.ndim not in (2, 3):
            raise ValueError(f"X must be 2-D data (n_samples, n_features) or a 3-D symmetric "
                             f"tensor, got {X.ndim} dimensions")
        epsilon, delta = self._privacy_target()
        if X.ndim == 3:
            self._check_symmetrize()
            return FitData(arrays=(X,), shape=X.shape,
                           extra=check_symmetric_tensor(X, symmetrize=self.symmetrize))
        self._check_delta_for(X.shape[0], epsilon, delta)
        return FitData(arrays=(X,), shape=X.shape)

    def _check_grouped(self, X, groups) -> FitData:
        """A fit whose unit is a group of rows: private, on 2-D rows in memory, with a method
        whose every query is an exact sum (refused otherwise, with the reason, before any
        spend). ``shape`` is ``(n_groups, d)``; the row count only sizes the memory."""
        if np.ndim(X) == 3:
            raise ValueError("groups labels rows: a 3-D X is a tensor, whose unit is one entry "
                             "(no rows to group). Pass the rows (2-D X) to fit with groups")
        self._check_groups_allowed(X)
        X = validate_private_data(self, X, dtype=[np.float64, np.float32])
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D data (n_samples, n_features) with groups, got "
                             f"{X.ndim} dimensions")
        codes, n_groups = self._check_groups(groups, X.shape[0])
        return FitData(arrays=(X, codes), shape=(n_groups, X.shape[1]),
                       public=dict(n_rows=X.shape[0], grouped=True))

    def _plan_for(self, data: FitData) -> FitPlan:
        X = data.arrays[0]
        return self._plan(data.shape, itemsize=X.dtype.itemsize, dask=is_dask_array(X),
                          **data.public)

    def _plan(self, shape, *, itemsize: int = 8, dask: bool = False, n_rows=None,
              grouped: bool = False) -> FitPlan:
        """The fit's parameters checked, its moment chosen and its spend priced, from the shape
        of X (rows, or a tensor; ``(n_groups, d)`` with groups, ``n_rows`` then sizing the
        memory), its dtype's size and whether it lives on Dask."""
        epsilon, delta = self._privacy_target()
        k = self._check_params(shape[1])
        private, rows = math.isfinite(epsilon), len(shape) == 2
        if not rows and self.data_norm is not None:
            raise ValueError(f"data_norm={self.data_norm!r} bounds the rows of 2-D data, but X is "
                             "a 3-D tensor: its entries are not clipped and its unit is one "
                             "entry (neighbours differ by sym(e_i⊗e_j⊗e_k)), so data_norm would "
                             "bound nothing. Set data_norm=None for a tensor, or pass the rows")
        data_norm = check_data_norm(self.data_norm, epsilon) if rows else None
        if not private:
            event, z, K = NonPrivateEvent("epsilon=inf"), 0.0, 0
        else:
            K = n_power_queries(k, self.n_restarts, self.n_iter) if self.method == "power" else 1
            z = plan_noise_multiplier(epsilon, delta, K, self.calibration)
            event = GaussianEvent(z, K)
        settings = DecompositionSettings(
            n_components=k, method=self.method, private=private, data_norm=data_norm,
            moment=self._moment_for(shape, itemsize, dask, k) if rows else "tensor",
            sensitivity=row_sensitivity(data_norm, shape[0]) if private and rows else None,
            grouped=grouped)
        n_rows = shape[0] if n_rows is None else n_rows  # a preview's: the groups stand for them
        memory = (self._grouped_memory((n_rows, shape[1]), k) if grouped
                  else self._fit_memory(shape, k, itemsize, dask))
        return FitPlan(event=event, delta=delta, noise_multiplier=z, n_queries=K,
                       calibration=self.calibration, settings=settings, memory=memory,
                       unit="group of rows" if grouped else "row" if rows else "tensor entry")

    def _release(self, data: FitData, plan: FitPlan, rng) -> None:
        """The decomposition, from the plan's moment and noise: every query, or the tensor once
        (input perturbation), released through the Gaussian mechanism."""
        settings = plan.settings
        if settings.grouped:
            base, noise, dtype = self._grouped_moment(data, plan, rng)
        else:
            base, noise, dtype = self._moment_and_noise(data, plan, rng)
        self.moment_ = settings.moment
        # A private fit's candidates are float64 whatever the data's dtype: the sensitivities
        # price unit columns, and float32's normalisation leaves |u|^2 - 1 up to about 4e-7
        work = dtype if noise is None else np.float64
        components, eigenvalues = tensor_power_method(
            base, settings.n_components, self.n_restarts, self.n_iter, rng, noise, dtype=work,
            verbose=self.verbose)
        self.components_, self.eigenvalues_ = components.astype(dtype), eigenvalues.astype(dtype)
        # A function of the released components and eigenvalues and of the public plan only, so
        # it may be set and warned about after the spend (post-processing)
        z = plan.noise_multiplier if settings.private else 0.0
        self.eigenvalues_noise_ = eigenvalue_noise(z, settings.sensitivity, base.shape[0],
                                                   settings.method,
                                                   self.components_).astype(dtype)
        warn_noise_dominated(self.eigenvalues_, self.eigenvalues_noise_, "eigenvalues_",
                             "eigenvalues_noise_", _ADVICE)

    @staticmethod
    def _grouped_moment(data: FitData, plan: FitPlan, rng):
        """``(operator, noise, dtype)`` of a grouped fit: each group's grid rows scaled so that
        ``sum_i ||q_i||^3 <= 1``, every query (or the dense moment, input perturbation) an exact
        sum of them over ``G`` groups."""
        (raw, codes), settings = data.arrays, plan.settings
        B, n_groups, z = settings.data_norm, data.shape[0], plan.noise_multiplier
        M = group_scale_cubes(grid_rows(raw, B), codes, n_groups)
        if settings.moment == "dense" and settings.method == "power":
            # the exact moment rounded once an entry: moment_roundings' n-row sum becomes one
            # rounding (n = 1 counts it), the rest of its terms and total as for rows
            T = moment_tensor_split(M, B ** 3 / n_groups).value()
            noise = PowerNoise(z, settings.sensitivity, rows=(B, 1))
            return SymmetricTensor(T), noise, raw.dtype
        if settings.method == "input_perturbation":  # its distinct entries, on their grid
            # an entry moves by 2 B^3 / G times the unit's rounding (B^3, / G): the margin
            s = settings.sensitivity * (1 + 2.0 ** -50)
            T = moment_tensor_split(M, B ** 3 / n_groups).for_release(s, z)
            released = perturb_tensor(T, s, z, rng, rounding=None)  # exact: no allowance
            return SymmetricTensor(released), None, raw.dtype
        noise = PowerNoise(z, settings.sensitivity, groups=(B, n_groups))
        return ExactGroupMoment(M, B, n_groups), noise, raw.dtype

    def _moment_and_noise(self, data: FitData, plan: FitPlan, rng):
        """``(operator, noise, dtype)`` of a fit on rows (one row the unit) or on a tensor."""
        settings = plan.settings
        if data.extra is not None:  # a tensor: the symmetric one checked before the spend
            base, rows, dtype = SymmetricTensor(data.extra), None, data.arrays[0].dtype
        else:
            base, rows, dtype = self._moment_operator(data.arrays[0], settings)
        noise = None
        if settings.private and settings.method == "power" and data.extra is not None:
            # a tensor's entries are each a unit, of any size: exact queries on their grid
            base = ExactEntryTensor(data.extra, 1.0)
            noise = PowerNoise(plan.noise_multiplier, None, entry_bound=base.bound)
        elif settings.private and settings.method == "power":
            noise = PowerNoise(plan.noise_multiplier, settings.sensitivity, rows=rows)
            if settings.moment == "implicit":  # exact sums of grid rows at any n
                raw, B = data.arrays[0], settings.data_norm
                base = ExactThirdMoment(map_rows(raw, grid_rows, B), B, raw.shape[0])
                noise = PowerNoise(plan.noise_multiplier, settings.sensitivity,
                                   grid=(B, raw.shape[0]))
        if settings.private and settings.method == "input_perturbation":
            base = self._perturbed(base, rows, settings, plan.noise_multiplier, rng)
        return base, noise, dtype

    @staticmethod
    def _moment_operator(raw, settings: DecompositionSettings):
        """``(operator, rows, dtype)``: the third moment of the clipped rows, dense or implicit
        as planned, on Dask chunk by chunk on the workers; ``rows`` is ``(data_norm, n)``, for
        the rounding of its float sums."""
        data_norm = settings.data_norm
        if is_dask_array(raw):  # the implicit moment clips each chunk inside its own task
            X = clip_chunks(raw, data_norm)
            if settings.moment == "dense":
                wide = X.astype(np.float64) if settings.private else X
                base = SymmetricTensor(dask_moment_tensor(wide))
            else:
                clip = (None if data_norm is None
                        else functools.partial(clip_rows, data_norm=data_norm))
                base = DaskThirdMoment(raw, prepare=clip)
        else:  # a private dense moment is summed in float64, whose rounding is allowed for
            X = clip_rows(raw, data_norm)
            base = (SymmetricTensor(moment_tensor(X, np.float64 if settings.private else None))
                    if settings.moment == "dense" else ThirdMoment(X))
        return base, (data_norm, X.shape[0]), X.dtype

    @staticmethod
    def _perturbed(base, rows, settings: DecompositionSettings, noise_multiplier, rng):
        """Input perturbation: noise on the tensor's distinct entries, once."""
        T = base.T if isinstance(base, SymmetricTensor) else moment_tensor(base.X, np.float64)
        scale = ENTRY_SENSITIVITY if settings.sensitivity is None else settings.sensitivity
        # a 3-way tensor's entries are each one unit's own value (no sum); a moment is a sum
        rounding = None if rows is None else dense_moment_rounding(*rows)
        return SymmetricTensor(perturb_tensor(T, scale, noise_multiplier, rng, rounding=rounding))
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
        if len(shape) == 3:  # a private power method holds the entries' exact digits too
            exact = DIGITS + 1 if math.isfinite(self.epsilon) and self.method == "power" else 0
            return ((4 + exact) * d**3 + small) * FLOAT, advice
        rows = 0 if dask else 2 * n * d  # the clipped copy, and a chunk's slice of it
        if self._moment_for(shape, itemsize, dask, k) == "dense":
            perturbed = math.isfinite(self.epsilon) and self.method == "input_perturbation"
            noise = 2 * d**3 if perturbed else 0
            block = 0 if dask else min(n, moment_chunk_rows(d)) * d * d
            peak = rows + 3 * d**3 + noise + block
        else:
            peak = rows + (0 if dask else 3 * n * L)
            if math.isfinite(self.epsilon):  # its steps are exact sums of grid rows
                peak += exact_memory(n, d, L, dask) / FLOAT
        return (peak + small) * FLOAT, advice

    def _grouped_memory(self, shape, k):
        """``(bytes, advice)`` of a grouped fit on ``n_rows x d`` rows: the grid rows and their
        group-scaled copy, and one chunk's digit products with their exact totals (7 L
        columns: :func:`~dptensor.algorithms.grouped_tensor.moment_product_split`)."""
        n, d, L = shape[0], shape[1], self.n_restarts
        peak = 2 * n * d + exact_memory(n, d, 7 * L) / FLOAT + 8 * d * (k + L) + 4 * L * L
        if self._moment_for((n, d), 8, False, k) == "dense":  # the exact d^3 integers, T
            # (three object arrays of Python integers, 8 words an entry, as exact_memory counts)
            peak += 24 * d ** 3 + 4 * d ** 3 + 8 * min(n * d * d, 2 ** 22)
        return peak * FLOAT, "Use fewer restarts, or fewer rows per group (combine them first)"

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` x ``n_features`` rows (no data
        read)."""
        k = self._check_params(n_features)
        return self._fit_memory((int(n_samples), int(n_features)), k)

    def _check_params(self, d: int) -> int:
        k = (d if self.n_components is None
             else check_positive_int(self.n_components, "n_components"))
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d} (an orthogonal decomposition "
                             f"has at most d components), got {k}")
        check_positive_int(self.n_restarts, "n_restarts")
        check_positive_int(self.n_iter, "n_iter")
        for name, allowed in (("method", ("power", "input_perturbation")),
                              ("calibration", ("exact", "paper")),
                              ("moment", ("auto", "implicit", "dense"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        self._check_symmetrize()
        check_verbose(self.verbose)
        return k

    def _check_symmetrize(self):
        if not isinstance(self.symmetrize, (bool, np.bool_)):
            raise TypeError(f"symmetrize must be a bool, got {self.symmetrize!r}")

    def _moment_for(self, shape, itemsize, dask, k: int) -> str:
        """How the third moment of rows is held, from the data's shape and kind alone."""
        if self.method == "input_perturbation" and math.isfinite(self.epsilon):
            return "dense"  # the released object is the dense moment itself
        if self.moment != "auto":
            return self.moment
        if dask:
            return "implicit"  # for data too big for one machine, never a d^3 tensor unless asked
        if math.isfinite(self.epsilon):
            # private: its sums are exact (dptensor.algorithms.exact); a dense T's are not
            return "implicit"
        steps = n_power_queries(k, self.n_restarts, self.n_iter)
        return choose_moment(shape[0], shape[1], steps, itemsize)

    # -- transform -----------------------------------------------------------------------------
    def transform(self, X):
        """Project X onto the components: ``X @ components_.T``, shape (n_samples, n_components)."""
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
    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` rows would
        record.

        Computed from the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`.
        ``groups=True``: preview a fit given groups; ``n_samples`` is then the number of groups
        (the fit's unit a group of rows, priced by the same plan).
        """
        return self._preview_rows(n_samples, n_features, groups)

    def expected_noise(self, n_samples, n_features):
        """The noise level a ``fit`` on ``n_samples`` x ``n_features`` rows would record in
        ``eigenvalues_noise_``, against the largest eigenvalue rows of norm ``data_norm`` can give
        (``data_norm**3``): a :class:`~dptensor.NoisePreview`, from the fit's own plan (no data,
        no spend), to choose epsilon before spending it. A component needs an eigenvalue above
        twice ``noise``; when that is near ``signal_bound`` no data can be learned at this size.
        """
        shape = (check_positive_int(n_samples, "n_samples"),
                 check_positive_int(n_features, "n_features"))
        plan, d = self._plan(shape), shape[1]
        settings = plan.settings
        noise = eigenvalue_noise(plan.noise_multiplier, settings.sensitivity, d, settings.method,
                                 np.zeros((1, d)))
        bound = None if settings.data_norm is None else float(settings.data_norm) ** 3
        return NoisePreview(float(noise[0]), bound, "eigenvalues_noise_")

    def _score_units(self, X, y=None):
        """Per-row moment-fit scores and their public range (see :func:`moment_fit_scores`)."""
        check_is_fitted(self)
        X = validate_private_data(self, X, allow_nd=True, dtype=[np.float64, np.float32],
                                  reset=False)
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
