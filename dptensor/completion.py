r"""Private tensor completion: CP and Tucker models fitted on observed entries (SPEC §6).

:class:`PrivateTensorCompletion` is a scikit-learn regressor whose samples are index tuples:
``X`` (n_obs, order) integer positions in a tensor, ``y`` the values observed there. It predicts
the value at any position. Five ways to make the fit private, all with one privacy unit, **the
value of one observed entry** (the set of observed positions Omega, the tensor's shape and a
value range ``[lo, hi]`` are public):

``"statistics"`` (DP-ALS, the default private mode for CP), ``"implicit"``, ``"input"``,
``"gradient"`` and (comparison only, epsilon = infinity) ``"output"``: see the class docstring.
With ``privacy_unit="user"`` the unit is instead **one user** (mode 0) and her whole history,
positions included: only the item side is released, each user's side is solved from her own
ratings at prediction time (joint differential privacy; :mod:`dptensor.algorithms.completion.
user_level`).

The offsets are released with Gaussian noise when they hold a small share of the budget and with
Laplace noise when they hold most of it (each entry touches one coordinate of each of their
releases, where Laplace noise is smaller), whichever adds less noise for the plan, decided from
public parameters. The derivations are in ``docs/derivations/completion.rst``; the algorithms (ALS,
DP gradient descent, offsets) are in :mod:`dptensor.algorithms.completion`, one module per
mode in :mod:`dptensor.algorithms.completion.modes`.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._base import (FitData, FitPlan, NoisePreview, PrivateEstimatorMixin, SearchTag,
                    warn_noise_dominated)
from ._completion_auto import AutoChoice
from ._memory import FLOAT
from ._validation import (check_nonnegative_real, check_positive_int, check_positive_real,
                          check_completion_targets, check_value_range, check_verbose,
                          validate_private_data, check_data_scale, real_scalar, is_zero_int)
from .accounting import NonPrivateEvent
from .algorithms.completion.memory import fit_advice, fit_floats
from .algorithms.completion.model import Model, predict
from .algorithms.completion.modes import MODES, is_mode
from .algorithms.completion.modes.base import OFFSET_SHARE, FitSettings
from .algorithms.completion.modes.solvers import (AUTO_PRIOR_VAR, AUTO_REG_FLOOR, GD_DEFAULTS,
                                                  MAX_LEARNING_RATE)
from .algorithms.completion.user_level import ItemSide, predict_released
from .algorithms.completion.fit_noise import COMPONENT_ADVICE, OFFSET_ADVICE, noise_attributes
from .algorithms.completion.runtime import blas_controller, progress_printer
from .algorithms.completion.start_noise import (USER_ADVICE, VALUE_ADVICE, preview_level,
                                                weakest_factors)
from .algorithms.completion.observations import (Observations, check_indices, counts_fit,
                                                  to_observations)

__all__ = ["PrivateTensorCompletion", "to_observations", "complete", "check_indices",
           "OFFSET_SHARE"]


def complete(estimator, shape=None):
    """The dense completed array of a fitted :class:`PrivateTensorCompletion` (every position
    predicted).

    Forms the full array, so only for shapes that fit in memory; ``predict`` at chosen positions
    never does. ``shape`` defaults to ``estimator.shape_``.
    """
    check_is_fitted(estimator, "factors_")
    shape = estimator.shape_ if shape is None else tuple(shape)
    X = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
    return estimator.predict(X).reshape(shape)


class PrivateTensorCompletion(AutoChoice, PrivateEstimatorMixin, RegressorMixin, BaseEstimator):
    r"""CP or Tucker tensor completion, private by noisy statistics, implicit feedback, input,
    gradient or (comparison only) output perturbation.

    The model is ``y_hat(i_1..i_d) = intercept_ + sum_m biases_[m][i_m] + f(i_1..i_d)`` with
    ``f = sum_r prod_m factors_[m][i_m, r]`` (CP) or the Tucker product of ``core_`` with the rows
    ``factors_[m][i_m]``. Internally values are centred and divided by the width of
    ``value_range`` (the observed range when it is not given), so ``reg``, ``reg_core`` and
    ``clip_norm`` are in those units and the defaults fit any rating scale.

    Non-private fits (and input perturbation, which then runs the same fit on noisy values) use
    alternating least squares over the observed entries: each row's ridge regression, with its
    bias, is solved for all rows of a mode at once. ``"statistics"`` runs DP-ALS (``dp_als``).
    Gradient and output perturbation use full-batch gradient descent with a public Gauss-Newton
    preconditioner (see ``gradient_descent``). An index never seen in training (at or past
    ``shape_``) is a cold start: its mode adds no offset, and no interaction unless it is a mode
    without a factor (``factor_modes``), along which the interaction does not vary.

    Privacy unit: **the value of one observed entry** (replace-one), with Omega (which positions
    are observed), ``shape`` and ``value_range`` public; they must be chosen without looking at the
    values. What is released: ``factors_``, ``core_``, ``intercept_``, ``biases_``. A private fit
    never computes, stores or prints its training loss.

    ``privacy_unit="user"``: the unit is **one user** (mode 0): replacing her whole history
    (which items, how many, the values) is the neighbour relation, and Omega is private. At most
    ``max_ratings_per_user`` of her entries are used (a random subset, one per item, drawn after
    the spend: a user over the bound is subsampled, not refused); the fit releases only the item
    side (``intercept_``, the other modes' ``biases_``, ``factors_[1]``) from noisy sums over users,
    one ``(epsilon, delta)`` event at user level (``privacy_cost_.event.unit == "user"``); no
    user's offset or factor is stored (``biases_[0]``, ``factors_[0]`` are empty). ``predict`` and
    ``score`` take ``history=(X_hist, y_hist)`` to solve each user's side from her own rows (joint
    DP); ``rank=0`` is offsets only. Only ``perturbation="auto"``/``"statistics"``: ``"implicit"``
    is refused (its factors are a noise-free function of who rated what).

    Guarantees:

    * ``perturbation="statistics"``: ``(epsilon, delta)``-DP, exactly: Gaussian releases of the
      spectral start's ``n_f - 1`` Grams (share ``GRAM_SHARE`` of theirs) and ``1 + n_iter n_f``
      right-hand sides, ``n_f`` the number of modes with a factor (``factor_modes``), with
      ``(1 - offset_share)`` of ``mu^2`` (Gaussian DP), and ``order + 2`` releases of sums over
      many entries (offsets, residual scale; ``order + 1`` fewer without ``fit_intercept``) with
      the rest of the budget, Gaussian or Laplace. CP only.
    * ``perturbation="implicit"``: ``(epsilon, delta)``-DP, exactly: one Gaussian release of the
      interaction's statistic (l2 sensitivity ``sqrt(2) min(1, 2 clip)``) with
      ``(1 - offset_share)`` of ``mu^2``, and the offsets and residual scale with the rest,
      Gaussian or Laplace.
    * ``perturbation="input"``: pure ``epsilon``-DP (Laplace, parallel composition; no delta).
    * ``perturbation="gradient"``: ``(epsilon, delta)``-DP, exactly: ``n_iter`` gradient releases of
      l2 sensitivity ``2 clip_norm`` with ``(1 - offset_share)`` of ``mu^2``, and (when
      ``fit_intercept``) ``order + 1`` offset releases with the rest, Gaussian or Laplace.
    * ``perturbation="output"``: none formally. The paper's Laplace noise with sensitivity
      ``2 n_iter clip_norm learning_rate`` on the last factor assumes a convex, Lipschitz, smooth
      loss; CP and Tucker losses are not convex, the other factors and the core are released
      without noise (with ``fit_intercept=False`` the factors do not depend on the noise at
      all). The fit therefore costs epsilon = infinity: a finite budget refuses it before it
      touches the data; otherwise it is recorded as not private (``privacy_cost_.private`` is
      False) and a :class:`~dptensor.PrivacyWarning` says so.
    * ``epsilon=np.inf``: non-private; costs epsilon = infinity in the same way.

    Parameters
    ----------
    rank : int or "auto", default="auto"
        CP rank, or the size of every side of the Tucker core (``"implicit"``: the columns of each
        mode's spectral embedding; the released CP factors have ``2 rank`` columns). ``"auto"``:
        3; 20 where ``perturbation="auto"`` takes the implicit recipe; at user level 0 (offsets
        only) when the private start's preview noise at rank 3 is above ``USER_START_RATIO``
        (0.3) of its signal bound (see ``perturbation``). With the number of entries, the
        shape and the model it sets the fit's memory
        (:func:`~dptensor.algorithms.completion.memory.fit_floats`): a Tucker core holds
        ``rank^order`` numbers and its Gram their square, the spectral start of ``"statistics"``
        an ``n_m x n_m`` Gram per mode with a factor. A fit whose bound exceeds what the process
        can allocate is refused before its spend (:class:`~dptensor.MemoryRefusedError`).
    decomposition : {"cp", "tucker"}, default="cp"
    perturbation : {"auto", None, "statistics", "implicit", "input", "gradient", "output"}
        ``"auto"`` (the default): the non-private fit at ``epsilon=np.inf``; otherwise a rule
        (:func:`~dptensor.algorithms.completion.modes.auto.auto_choice`) fitted on a grid of
        studies (``benchmarks/results/completion_auto.md``; the completion guide shows it) from
        public quantities only. Value level (positions public): CP data observed at a density
        (entries over positions) below 0.25 (a matrix) or 0.005 (order >= 3) is fitted like
        ratings, ``"gradient"`` with (``offset_share=None``) an offsets' share of 0.97, or, at
        ``epsilon >= 3`` where the users x items positions follow a structure of their own
        (:func:`~dptensor.algorithms.completion.positions.position_ratio` >= 1.6, as people rate
        what they expect to like), the implicit recipe (``rank=20``, ``offset_share=0.5``,
        ``factor_modes=(0, 1)``; ``benchmarks/results/completion_positions.md``); denser CP
        data ``"statistics"``; Tucker ``"gradient"``. User level (positions private): user-level
        DP-ALS, and ``rank="auto"`` read from the ``shape`` you set, ``max_ratings_per_user``,
        ``epsilon`` and ``delta`` only (without ``shape``: rank 3). ``privacy_cost`` previews
        the fit's choice when ``shape`` is set, except the implicit one (it reads the positions):
        the epsilon is the same, the noise plan may differ. ``None`` is the non-private fit; a
        finite ``epsilon`` needs one of the others.
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` is the non-private fit, which costs epsilon = infinity.
    delta : float or None, default=None
        ``None`` takes the accountant's delta, else 1e-5. Unused by ``"input"``.
    learning_rate : float or None, default=None
        Gradient-descent step (``None``: 0.35; at most 1e6). Each row moves by ``lr`` times its
        Gauss-Newton step.
    n_iter : int or None, default=None
        Sweeps (ALS, default 100, stops early at ``tol``; DP-ALS, default 2) or gradient steps
        (default 5: every step of DP gradient descent costs budget, and a few well-preconditioned
        steps go furthest). Ignored by ``"implicit"`` (one release, one solve: ``n_iter_`` is 1).
    reg : float or "auto", default="auto"
        Ridge on the factors (ALS: and biases), scaled units; "auto": docs/choosing.rst.
    reg_core : float or None, default=None
        Ridge penalty on the Tucker core; ``None`` uses ``reg``.
    clip_norm : float or None, default=None
        Joint l2 bound on each entry's gradient (``None``: 0.1), in scaled units.
    value_range : (lo, hi) or None, default=None
        Public range of the values (width in [1e-90, 1e90]); required when private and at user
        level. Values are clipped to it; without it they must lie within +-1e90 (scaled by).
    shape : tuple of int or None, default=None
        The tensor's shape; ``None`` infers one past the largest index of each mode of ``X``
        (a private fit with ``privacy_unit="user"`` refuses it: the indices are private).
    batch_size : None, default=None
        Only full batches are offered: Poisson-subsampled DP gradient descent would need an
        exactly accounted subsampled-Gaussian event, which the accountant does not price, and
        accounting each batch as a full step would waste the subsampling. Any other value raises.
    fit_intercept : bool, default=True
        Fit the global mean and per-mode row effects (released privately when private). False:
        values are not centred, only scaled (by their width and size, without value_range): data far
        from 0 fits poorly (private fits clip residuals). User level refuses it.
    solver : {"auto", "als", "gd"}, default="auto"
        ``"auto"``: ALS for ``None``, ``"input"``, ``"statistics"`` and ``"implicit"``, gradient
        descent for ``"gradient"`` and ``"output"`` (which require it).
    tol : float, default=1e-8
        ALS stops when the objective's relative decrease falls below ``tol``.
    factor_modes : tuple of int, None or "auto", default="auto"
        The modes that get factors (CP only; ``None``: every mode). The other modes keep their
        offsets but no factor: the interaction does not vary along them, and a private fit makes
        no release for them (fewer releases, less noise in each). For ratings-like data
        (user, item, time) use ``factor_modes=(0, 1)``: a user x item low-rank model with a time
        effect (on MovieLens-100K a CP time factor made the fit worse; see the completion guide).
        ``"auto"``: every mode, except that a CP fit without noise (``perturbation=None``, what
        ``"auto"`` runs at ``epsilon=inf``) of order >= 3 on at least 10 000 entries fits both
        every mode and ``(0, 1)`` on nine tenths of them, keeps the one that predicts the other
        tenth better (as scikit-learn's ``early_stopping="auto"``) and refits it on all: about 3
        times one fit's time (5 where most cells are observed). A private fit cannot ask its
        data's values: every mode, except users x items ``(0, 1)`` where it runs ``"implicit"``
        (set, or the implicit recipe of ``perturbation="auto"``) or ``privacy_unit="user"``.
        ``factor_modes_`` says which. With ``"implicit"`` the order matters: the first mode leads
        (users: each row's factor is the normalised sum of learned vectors over the rows it was
        observed with), the second is the partner (items: a spectral embedding of who rated what).
    offset_share : float in (0, 1) or None, default=None
        The share of the privacy budget spent on the offsets (global mean and row effects) when
        ``fit_intercept``: the factors' Gaussian releases get ``1 - offset_share`` of ``mu^2``
        (Gaussian DP) and the offsets the rest, by Gaussian noise or, when that is less noisy
        (large shares), Laplace noise; for ``"output"``, ``offset_share`` of ``epsilon``;
        for ``"statistics"`` and ``"implicit"`` the share also pays for the released residual
        scale (all of it without ``fit_intercept``). Unused by ``"input"`` (one Laplace release of
        every value), by ``"gradient"`` and ``"output"`` without ``fit_intercept``, and without
        privacy. ``None``: ``STATS_OFFSET_SHARE`` (0.1) for ``"statistics"``,
        ``IMPLICIT_OFFSET_SHARE`` (0.97) for ``"implicit"``, ``OFFSET_SHARE`` (0.5) for
        ``"gradient"`` and ``"output"``. Data whose row effects carry most of the signal (ratings:
        user and item means) want most of the budget there (see the completion guide
        for MovieLens-100K); on a synthetic study without row effects 0.1 keeps 0.6 of the
        non-private gain at epsilon = 2 and 0.5 keeps 0.25.
        Choose it from public knowledge of the data, or with :mod:`dptensor.model_selection`.
    privacy_unit : {"value", "user"}, default="value"
        What one fit protects: one observed value (positions public), or one user (mode 0) and
        her whole history (positions private).
    max_ratings_per_user : int or None, default=None
        ``privacy_unit="user"``: the public bound ``m`` on each user's entries (``None``: 64).
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        Seeds the initialisation and the noise. ``None`` (OS entropy) for any real release.
    verbose : int, default=0
        When > 0, print progress after each sweep or step; a non-private fit also prints and
        records its training RMSE (``train_rmse_``). A private fit prints only the step number:
        the training loss is an unnoised statistic.

    Attributes
    ----------
    factors_ : list of ndarray (n_m, rank)
        A mode left out of ``factor_modes`` holds ones (a constant factor: no interaction).
    core_ : ndarray (rank,) * order or None
    intercept_ : float
    biases_ : list of ndarray (n_m,)
    shape_ : tuple of int
    factor_modes_ : tuple of int
        The modes with a factor (``factor_modes``, or what ``"auto"`` chose), sorted: with
        ``"implicit"`` the lead is still the first mode of ``factor_modes`` as you set it.
    n_features_in_ : int
        The order of the tensor (the number of index columns).
    n_iter_ : int
    perturbation_ : str or None
        The mode used (``"auto"`` resolved).
    privacy_cost_ : PrivacyCost
    start_eigenvalues_, start_eigenvalues_noise_ : ndarray
        The private start's released matrices, in units of their clipping level (each clipped
        residual divided by it, so every entry lies in [-1, 1]): their top eigenvalues and noise
        levels (half the noise's edge; 0 without privacy). ``privacy_unit="user"``: the item-item
        matrix (from 4000 items, rank <= items / 10: the power start's last product; that start
        never forms the matrix), both (rank,) (empty at ``rank=0``). ``perturbation="statistics"``:
        one row per released unfolding Gram, (n_grams, rank) and (n_grams,); the other modes: empty.
        A factor whose eigenvalue is below twice the level (in some Gram) starts from noise and
        learns little beyond the offsets: ``fit`` then warns (``UserWarning``) naming it, from these
        released values alone. :meth:`expected_noise` reports the level before a fit.
    component_rms_, component_rms_noise_ : ndarray (n_components,)
        Each released component's root mean square over every position (CP: column ``r``,
        ``prod_m ||factors_[m][:, r]|| / sqrt(n_m)``; Tucker: one, the whole interaction) and
        the level the mode's noise alone reaches there (caller's units; 0 without privacy and for
        ``"statistics"``, judged by its start). ``offsets_rms_``, ``offsets_rms_noise_`` (order,):
        the same for each mode's released row effects, over the observed entries. ``fit`` warns
        naming the components below twice their level and the modes whose offsets are below
        theirs (released values only); user level: empty.
    train_rmse_ : list of float
        Only when ``verbose`` and the fit is not private.

    Examples
    --------
    >>> from dptensor.datasets import make_low_rank_tensor
    >>> data = make_low_rank_tensor(random_state=0)
    >>> model = PrivateTensorCompletion(rank=3, random_state=0).fit(data["indices"], data["values"])
    >>> error = model.predict(data["test_indices"]) - data["test_values"]
    >>> bool(np.sqrt(np.mean(error**2)) < 1e-3)
    True
    """

    #: The search's unit (observed values; users at user level: searched by user), index tuples
    #: into ``shape``, one unit's score bounded by ``value_range``.
    _search_tag = property(lambda self: SearchTag(
        unit="user" if self.privacy_unit == "user" else "observed value",
        score_bound="value_range", indices=True, users=self.privacy_unit == "user"))

    def __init__(self, rank="auto", *, decomposition="cp", perturbation="auto", epsilon=np.inf,
                 delta=None, learning_rate=None, n_iter=None, reg="auto", reg_core=None,
                 clip_norm=None, value_range=None, shape=None, batch_size=None, fit_intercept=True,
                 solver="auto", tol=1e-8, factor_modes="auto", offset_share=None,
                 privacy_unit="value", max_ratings_per_user=None, accountant=None,
                 random_state=None, verbose=0):
        self.rank = rank
        self.decomposition = decomposition
        self.perturbation = perturbation
        self.epsilon = epsilon
        self.delta = delta
        self.learning_rate = learning_rate
        self.n_iter = n_iter
        self.reg = reg
        self.reg_core = reg_core
        self.clip_norm = clip_norm
        self.value_range = value_range
        self.shape = shape
        self.batch_size = batch_size
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.tol = tol
        self.factor_modes = factor_modes
        self.offset_share = offset_share
        self.privacy_unit = privacy_unit
        self.max_ratings_per_user = max_ratings_per_user
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_params(self, sizes=None):
        """The validated parameters; ``sizes=(n_obs, shape)`` (public: see :meth:`_auto`) lets
        ``"auto"`` read the data's sizes, ``None`` (or ``None`` inside) where they are unknown."""
        check_verbose(self.verbose)
        unit, m = self._check_unit()
        if self.decomposition not in ("cp", "tucker"):
            raise ValueError(f'decomposition must be "cp" or "tucker", got {self.decomposition!r}')
        if self.perturbation != "auto" and not is_mode(self.perturbation):
            raise ValueError(f'perturbation must be None, "auto", "input", "gradient", "output", '
                             f'"statistics" or "implicit", got {self.perturbation!r}')
        choice = self._auto(unit, m, sizes)
        if isinstance(self.rank, str) and self.rank == "auto":
            rank = choice["rank"]
        elif unit == "user" and is_zero_int(self.rank):  # np.array(0) too, not False
            rank = 0  # offsets only: the item side without factors
        else:
            rank = check_positive_int(self.rank, "rank")
        perturbation = self._resolved_perturbation(choice)
        mode = MODES[("statistics", "user")] if unit == "user" else MODES[perturbation]
        if mode.cp_only and self.decomposition != "cp":
            raise ValueError(f'perturbation="{perturbation}" fits CP models; use "gradient" for '
                             'Tucker')
        if self.solver not in ("auto", "als", "gd"):
            raise ValueError(f'solver must be "auto", "als" or "gd", got {self.solver!r}')
        if self.batch_size is not None:
            raise ValueError("batch_size must be None: only full-batch gradient descent is "
                             "offered, because Poisson subsampling would need an exactly "
                             "accounted subsampled-Gaussian event")
        solver = (mode.solver or "als") if self.solver == "auto" else self.solver
        if mode.solver is not None and solver != mode.solver:
            raise ValueError(f'perturbation="{perturbation}" needs solver="{mode.solver}" '
                             '(or "auto")')
        gd = solver == "gd"
        lr = check_positive_real(self.learning_rate, "learning_rate", GD_DEFAULTS["learning_rate"],
                                 maximum=MAX_LEARNING_RATE)
        requested = None if self.n_iter is None else check_positive_int(self.n_iter, "n_iter")
        n_iter = mode.n_iter(requested, solver)
        clip = check_positive_real(self.clip_norm, "clip_norm", GD_DEFAULTS["clip_norm"],
                                   scale=True)  # the noise's scale: refused before the spend
        auto = isinstance(self.reg, str) and self.reg == "auto"
        reg = ((AUTO_REG_FLOOR if not gd else GD_DEFAULTS["reg"]) if auto
               else check_nonnegative_real(self.reg, "reg"))
        reg_core = (reg if self.reg_core is None
                    else check_nonnegative_real(self.reg_core, "reg_core"))
        tol = check_nonnegative_real(self.tol, "tol")
        share = real_scalar(self.offset_share)
        if share is not None and not (isinstance(share, numbers.Real) and 0.0 < share < 1.0):
            raise ValueError(f"offset_share must be a number in (0, 1) or None, got {share!r}")
        if share is None and self.perturbation == "auto":
            share = choice["offset_share"]
        share = mode.offset_share if share is None else share
        return dict(offset_share=float(share), perturbation=perturbation, mode=mode, rank=rank,
                    solver=solver, lr=lr, n_iter=n_iter, clip=clip, reg=reg, reg_core=reg_core,
                    tol=tol, prior_var=AUTO_PRIOR_VAR if (auto and not gd) else None,
                    kind=self.decomposition, fit_intercept=self.fit_intercept,
                    factor_modes=self._factor_modes(mode), unit=unit, max_ratings_per_user=m,
                    choose_modes=self._chooses_modes(perturbation, unit), shape=self.shape)

    def _check_values(self, X, y):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, "
                             "but the target y is None")
        # scikit-learn's own checks first (sparse, complex, NaN/inf, empty, n_features_in_), then
        # the index-specific ones.
        X = validate_private_data(self, X, reset=True, dtype=None, ensure_min_features=2)
        X, shape = check_indices(X, self.shape, warn_stray=self.privacy_unit != "user")
        y = check_completion_targets(y, X.shape[0])
        return X, (y if self.value_range is not None else check_data_scale(y)), shape

    def _check_data(self, X, y):
        """The parameters (first: refused before the data is read), the index tuples, values and
        public positions' counts and design: a shape too large for memory fails here, unspent."""
        self._check_params()
        X, y, shape = self._check_values(X, y)
        ratio = self._position_ratio(X, shape)  # public positions, read where "auto" needs them
        p = self._check_params((len(y), shape, ratio))
        p["fixed"] = self._check_factor_modes(len(shape), p["mode"])
        epsilon, delta = self._privacy_target(gaussian=p["mode"].gaussian)
        if p["unit"] == "user" and math.isfinite(epsilon):
            # the unit is one user, and their number (the shape's first side) is public
            self._check_public_shape()
            self._check_delta_for(shape[0], epsilon, delta, unit="user")
        elif p["perturbation"] is not None and math.isfinite(epsilon):
            # the unit is one observed value, and their number is public
            self._check_delta_for(len(y), epsilon, delta, unit="observed value")
        obs = Observations(X, counts_fit(shape))
        p["mode"].prepare(obs, p)
        return FitData(arrays=(X, y), shape=(len(y), *shape), extra=obs,
                       public=dict(position_ratio=ratio))

    def _plan(self, shape, position_ratio=None) -> FitPlan:
        """The plan from ``(n_obs, n_1, ..., n_d)`` and the positions' ratio (public): the mode's
        noise plan and event (:meth:`CompletionMode.plan
        <dptensor.algorithms.completion.modes.base.CompletionMode.plan>`), the memory (all n_m)."""
        n_obs, dims = int(shape[0]), tuple(shape[1:])
        p = self._check_params((n_obs, dims, position_ratio))
        p["fixed"] = self._check_factor_modes(len(dims), p["mode"])
        mode = p["mode"]
        epsilon, delta = self._privacy_target(gaussian=mode.gaussian)  # validated before it is read
        private = math.isfinite(epsilon) and (p["perturbation"] is not None or p["unit"] == "user")
        if p["perturbation"] is None and math.isfinite(epsilon) and p["unit"] == "value":
            raise ValueError(f"epsilon={self.epsilon!r} needs a perturbation (\"auto\", "
                             "\"statistics\", \"implicit\", \"input\", \"gradient\" or "
                             "\"output\"); perturbation=None is the non-private fit "
                             "(epsilon=np.inf)")
        vrange = check_value_range(self.value_range, private, user=p["unit"] == "user")
        noise, event = (mode.plan(p, epsilon, delta, len(dims)) if private
                        else (None, NonPrivateEvent("epsilon=inf")))
        if p["unit"] == "user" and not private:
            noise = mode.noise_free_plan(p, len(dims))
        memory = (self._fit_memory(p, n_obs, dims) if None not in dims else (0.0, ""))
        return FitPlan(event=event, delta=delta, noise_multiplier=noise["z"] if noise else 0.0,
                       n_queries=noise["n_queries"] if noise else 0, calibration="exact",
                       memory=memory, settings=FitSettings(params=p, noise=noise,
                                                            value_range=vrange, private=private),
                       unit="user" if self.privacy_unit == "user" else "observed value")

    # ------------------------------------------------------------------ fit
    def fit(self, X, y):
        """Fit on observed entries: ``X`` (n_obs, order) integer positions, ``y`` their values.

        Records the privacy spend with the accountant before the first noisy release.
        """
        return self._fit_private(X, y)

    def _release(self, data, plan, rng):
        """Scale the values, fit the mode's model, and set the attributes in the caller's units."""
        y, obs, settings = data.arrays[1], data.extra, plan.settings
        p, vrange, private = settings.params, settings.value_range, settings.private
        shape = obs.shape
        # Public affine rescaling: values clipped to the range, centred, divided by its width.
        if vrange is not None:
            (lo, hi), y = vrange, np.clip(y, *vrange)
            center, scale = ((lo + hi) / 2, hi - lo)
        else:  # uncentred (no intercept), values far from 0 lay up to 2^53 widths out: max |y| too
            width = np.ptp(y) if self.fit_intercept else max(np.ptp(y), np.max(np.abs(y)))
            center, scale = float(y.mean()), float(width) or 1.0
        center = center if self.fit_intercept else 0.0
        ys = (y - center) / scale
        if vrange is not None and self.fit_intercept:
            # The offsets' releases rest on values in [-1/2, 1/2] (the total's sensitivity 1 needs
            # them centred); a range a few ulps wide has a midpoint up to half its width off.
            ys = np.clip(ys, -0.5, 0.5)
        # The training loss, an unnoised statistic, is kept (and printed) only without privacy.
        history = [] if self.verbose and not private else None
        # Every product here is skinny (entries x rank) or tiny (rank x rank per row): threaded
        # BLAS only adds synchronisation to them (measured several times slower on a busy machine).
        progress = progress_printer(type(self).__name__, self.verbose, private, scale)
        with blas_controller().limit(limits=1, user_api="blas"):
            model = p["mode"].fit(obs, ys, p, settings.noise, rng, history=history,
                                  private=private, progress=progress)
        if p["unit"] == "user":
            self._set_item_side(model, shape, center, scale)
            self._warn_start(USER_ADVICE)
        else:
            self._set_model(model, shape, center, scale, obs.counts)
            self._warn_start(VALUE_ADVICE)
        self.privacy_unit_ = p["unit"]
        self.n_iter_ = p["n_iter"] if history is None else len(history)
        self.value_range_ = vrange
        self.perturbation_ = p["perturbation"]
        if history is not None:
            self.train_rmse_ = [h * scale for h in history]

    def _set_model(self, model, shape, center, scale, counts):
        """The released attributes: back to the caller's units, ``f`` scaled by ``scale`` (for CP
        spread over the modes with a factor; the others stay ones)."""
        if model.core is None:
            per = abs(scale) ** (1.0 / (len(shape) - len(model.fixed)))
            self.factors_ = [U if m in model.fixed else U * per
                             for m, U in enumerate(model.factors)]
            self.core_ = None
        else:
            self.factors_ = [U.copy() for U in model.factors]
            self.core_ = model.core * scale
        self.intercept_ = float(center + scale * model.intercept)
        self.biases_ = [b * scale for b in model.biases]
        self.shape_ = tuple(shape)
        self.factor_modes_ = tuple(m for m in range(len(shape)) if m not in model.fixed)
        # The spectral start's released Grams (statistics mode): their top eigenvalues and noise
        # levels, in units of the clipping level (post-processing of releases and of the plan).
        values, noise = model.start if model.start is not None else (
            np.zeros((0, model.rank)), np.zeros(0))
        self.start_eigenvalues_ = np.asarray(values, dtype=float)
        self.start_eigenvalues_noise_ = np.asarray(noise, dtype=float)
        # The released components' and offsets' sizes beside their public noise levels.
        vars(self).update(noise_attributes(self.factors_, self.core_, self.biases_, counts,
                                           model.noise, abs(scale)))

    def _warn_start(self, advice):
        """Warn, from released values and their noise levels only, naming every factor that some
        released start matrix puts below twice its level, then every component whose released root
        mean square is below twice its level and every mode whose offsets' is below its level."""
        weakest = weakest_factors(self.start_eigenvalues_, self.start_eigenvalues_noise_)
        if weakest is not None:
            warn_noise_dominated(*weakest, "start_eigenvalues_", "start_eigenvalues_noise_",
                                 advice)
        warn_noise_dominated(self.component_rms_, self.component_rms_noise_, "component_rms_",
                             "component_rms_noise_", COMPONENT_ADVICE)
        warn_noise_dominated(self.offsets_rms_, self.offsets_rms_noise_, "offsets_rms_",
                             "offsets_rms_noise_", OFFSET_ADVICE, what="mode(s)", first=0,
                             times=1, noun="offsets")

    def _set_item_side(self, side: ItemSide, shape, center, scale):
        """The item side of a user-level fit, in the caller's units: no user's offset or factor;
        and its start's released eigenvalues with their public noise level."""
        k = side.V.shape[1]
        self.factors_ = [np.zeros((0, k)), side.V * scale] + [np.ones((n, k)) for n in shape[2:]]
        self.core_ = None
        self.intercept_ = float(center + scale * side.intercept)
        self.biases_ = [np.zeros(0)] + [b * scale for b in side.biases[1:]]
        self.shape_, self.factor_modes_ = tuple(shape), (0, 1)
        # The released item-item matrix's top eigenvalues and the public noise level, in units
        # of the clipping level. Post-processing of a release and of the plan, so it may be set
        # and warned about after the spend.
        values, noise = side.start if side.start is not None else (np.zeros(0), 0.0)
        self.start_eigenvalues_ = np.asarray(values, dtype=float)
        self.start_eigenvalues_noise_ = np.full(len(values), float(noise))
        vars(self).update(noise_attributes(None, None, None, shape, None, 0.0))  # not judged

    def _fit_memory(self, p, n_obs, shape):
        """``(bytes, advice)``: the fit's peak allocation (:func:`fit_floats`, public
        quantities)."""
        mode = p["mode"].memory_mode(p["solver"])
        tucker = self.decomposition == "tucker"
        floats = fit_floats(n_obs, shape, p["rank"], tucker=tucker, mode=mode, fixed=p["fixed"],
                            chooses=p["choose_modes"])
        return floats * FLOAT, fit_advice(tucker)

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` entries of an order-``n_features``
        tensor of the public ``shape`` (set it: the estimate needs every mode's size)."""
        if self.shape is None:
            raise ValueError("the memory estimate needs the tensor's shape: set shape")
        shape = tuple(int(v) for v in self.shape)
        p = self._check_params((int(n_samples), shape))
        p["fixed"] = self._check_factor_modes(int(n_features), p["mode"])
        return self._fit_memory(p, int(n_samples), shape)

    # ------------------------------------------------------------------ predict
    def _model(self):
        return Model(factors=self.factors_, core=self.core_, intercept=self.intercept_,
                     biases=self.biases_)

    def predict(self, X, history=None):
        """Predicted values at the index tuples ``X`` (n, order).

        ``history=(X_hist, y_hist)`` (user-level fits, ``privacy_unit="user"``): each user's
        offset and factor are solved from her own rows of the history against the released item
        side (all of her rows: what she receives may depend on her own data; joint differential
        privacy). A user with no history row, or at or past ``shape_[0]``, gets the item side
        alone (cold start). Indices outside ``shape_`` or values outside ``value_range`` in the
        history raise ``ValueError``. Without ``history`` every prediction is a cold start.

        An index at or past ``shape_[m]`` in mode ``m`` (a row never seen in training, e.g. a new
        user) is a cold start: that mode contributes no bias and no interaction, so the
        prediction is the intercept plus the other modes' biases (offsets only). A mode without a
        factor (left out of ``factor_modes``, e.g. a future day) keeps the interaction of the
        other modes, which does not vary along it: only its own offset is missing.

        With a ``value_range``, predictions are clipped to it: the values lie there, so clipping
        can only bring a prediction closer (and it is post-processing: no privacy cost).
        """
        check_is_fitted(self, "factors_")
        # reset=False checks the number of columns against the fit's (scikit-learn's message).
        X = validate_private_data(self, X, reset=False, dtype=None)
        X, _ = check_indices(X, None)
        if getattr(self, "privacy_unit_", "value") == "user":
            return self._predict_users(X, history)
        if history is not None:
            raise ValueError('history is for user-level fits (privacy_unit="user"): a value-level '
                             'fit released its user factors')
        model = self._model()
        unseen = X >= np.asarray(self.shape_)
        if unseen.any():
            # One appended row per mode stands for every unseen index: zeros (no interaction), or
            # ones for a mode without a factor, whose factor is all ones.
            fixed = () if self.core_ is not None else tuple(
                m for m in range(len(self.shape_)) if m not in self.factor_modes_)
            X = np.where(unseen, np.asarray(self.shape_), X)
            model = Model(factors=[np.vstack([U, np.full((1, U.shape[1]), float(m in fixed))])
                                   for m, U in enumerate(model.factors)],
                          core=model.core, intercept=model.intercept,
                          biases=[np.append(b, 0.0) for b in model.biases])
        out = predict(model, X)
        if self.value_range_ is not None:
            np.clip(out, *self.value_range_, out=out)
        return out

    def _predict_users(self, X, history):
        """User-level predictions
        (:func:`~dptensor.algorithms.completion.user_level.predict_released`)."""
        lo, hi = self.value_range_
        scaling = ((lo + hi) / 2 if self.fit_intercept else 0.0), hi - lo
        return predict_released(X, history, self.intercept_, self.biases_, self.factors_[1],
                                self.shape_, self.value_range_, scaling)

    # ------------------------------------------------------------------ pricing and scoring
    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` observed entries would record.

        ``n_features`` is the tensor's order (the columns of the index array ``X``). Computed from
        the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`. With ``perturbation="auto"`` it previews the rule without
        the positions: a fit that takes the implicit recipe spends the same epsilon with another
        noise plan (``privacy_cost_`` records it).
        """
        self._check_preview_shape(needed=False, order=n_features)
        check_positive_int(n_samples, "n_samples")
        order = check_positive_int(n_features, "n_features")
        if order < 2:
            raise ValueError(f"n_features (the tensor's order) must be >= 2, got {order}")
        return self._preview_plan(self._plan((int(n_samples),) + (None,) * order))

    def expected_noise(self, n_samples, n_features):
        """The noise level a private ``fit`` on ``n_samples`` entries of an order-``n_features``
        tensor of the public ``shape`` would record in ``start_eigenvalues_noise_``, against the
        largest eigenvalue its start's released matrix can have (units of the clipping level):
        a :class:`~dptensor.NoisePreview` from the fit's own plan (no data, no spend). A factor
        needs an eigenvalue above twice ``noise``; near ``signal_bound`` nothing can be learned.
        User level: the item-item matrix, ratio ``z sqrt(n_items) / n_users`` (``rank=0``: none).
        ``perturbation="statistics"``: the weakest Gram, ratio ``2 z sqrt(n_col - 1) sqrt(n_m) /
        n_obs``, ``n_col`` at its cap for evenly spread positions (a fit's level is at most this).
        The other modes: ``component_rms_noise_`` (the caller's units) for a component as large
        as the values' width (``signal_bound``), with balanced columns on evenly spread
        positions (``docs/derivations/completion.rst``). As :meth:`privacy_cost`, without the
        positions: not the implicit recipe's level where ``"auto"`` takes it."""
        self._check_preview_shape(needed=True, order=n_features)
        n_obs = check_positive_int(n_samples, "n_samples")
        shape = tuple(int(v) for v in self.shape)
        if len(shape) != check_positive_int(n_features, "n_features"):
            raise ValueError(f"shape {shape} has {len(shape)} modes, n_features is {n_features}")
        settings = self._plan((n_obs,) + shape).settings
        vrange = settings.value_range
        return NoisePreview(*preview_level(settings.params, settings.noise, shape, n_obs,
                                           1.0 if vrange is None else vrange[1] - vrange[0]))

    def _score_units(self, X, y=None, history=None):
        """Per-entry negative clipped squared error and its public range ``(-1, 0)`` (``None``
        without ``value_range``)."""
        if y is None:
            raise ValueError("score needs y, the observed values at the index tuples X")
        pred = self.predict(X) if history is None else self.predict(X, history=history)
        y = check_completion_targets(y, pred.size)  # NaN, text: a clear error, not a NaN score
        if self.value_range_ is None:
            return -(pred - y) ** 2, None
        lo, hi = self.value_range_
        err = (np.clip(pred, lo, hi) - np.clip(y, lo, hi)) / (hi - lo)
        return -err**2, (-1.0, 0.0)

    def score(self, X, y, history=None):
        """Negative clipped squared error, ``-mean(((clip(y_hat) - clip(y)) / (hi - lo))^2)``.

        Predictions and values are clipped to ``value_range = (lo, hi)``, so each entry's score
        lies in [-1, 0] and a replaced value moves the mean over ``n`` entries by at most ``1/n``.
        Without a value range it is the plain ``-mean((y_hat - y)^2)``, unbounded. This replaces
        the R^2 of ``RegressorMixin``, whose per-entry terms have no bound. The score reads ``y``
        exactly (it is not private). ``history``: as in :meth:`predict` (user-level fits).
        """
        if history is None:
            return self._mean_score(X, y)
        values, _ = self._score_units(X, y, history=history)
        return float(np.mean(values))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        # X holds non-negative integer indices: scikit-learn's checks then round their data to them.
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        tags.target_tags.required = True
        # score is a bounded negative squared error (see score), not R^2: its "good" is not > 0.5.
        tags.regressor_tags.poor_score = True
        return tags
