r"""Private tensor completion: CP and Tucker models fitted on observed entries (SPEC §6).

:class:`PrivateTensorCompletion` is a scikit-learn regressor whose samples are index tuples:
``X`` (n_obs, order) integer positions in a tensor, ``y`` the values observed there. It predicts
the value at any position. Five ways to make the fit private, all with one privacy unit, **the
value of one observed entry** (the set of observed positions Omega, the tensor's shape and a
value range ``[lo, hi]`` are public):

* ``"statistics"`` (DP-ALS, the default private mode for CP, chosen by ``perturbation="auto"``):
  private offsets, a released residual scale, a private spectral start, then alternating least
  squares whose per-row right-hand sides are released with Gaussian noise (one release per mode
  and sweep, by parallel composition across rows; the Gram matrices depend only on Omega and
  released factors) and solved with empirical-Bayes shrinkage. Exactly ``(eps, delta)``.

* ``"implicit"`` (CP with two modes with a factor): private offsets and residual scale, then the
  interaction ``f(e) = z_i^T Y q_j + p_i^T W z'_j`` learned through Omega (``z_i``: the unit-norm
  indicator of the partner rows observed with lead row ``i``, ``z'_j`` of the lead rows observed
  with partner row ``j``; ``p``, ``q``: the modes' spectral embeddings; all public), from one
  Gaussian release of its sufficient statistic, solved with an empirical-Bayes (Wiener) filter
  (:mod:`dptensor._implicit`). Exactly ``(eps, delta)``.
* ``"input"``: every observed value is clipped to ``[lo, hi]`` and gets ``Lap((hi - lo)/eps)``
  noise; each entry is touched by one release, so the fit is pure ``eps``-DP by parallel
  composition, and everything after is post-processing.
* ``"gradient"``: private offsets (global mean and per-mode row effects), then full-batch
  DP gradient descent over **all** factors (and the core): per-entry gradients clipped jointly to
  ``clip_norm``, ``N(0, (2 z clip_norm)^2)`` noise on every coordinate of every summed gradient,
  every step accounted; the whole fit is exactly ``(eps, delta)``.
  This replaces the paper's gradient perturbation, whose budget claim does not hold (SPEC §6).
* ``"output"``: the paper's bolt-on Laplace noise on the released last factor, with the paper's
  sensitivity ``2 n_iter L lr``. That bound assumes a convex, Lipschitz, smooth loss, which CP and
  Tucker losses are not: there is **no** formal guarantee, so the fit costs epsilon = infinity
  (refused under a finite budget; otherwise recorded as not private and warned about with
  :class:`~dptensor.PrivacyWarning`). For comparison only.

The offsets are released with Gaussian noise when they hold a small share of the budget and with
Laplace noise when they hold most of it (each entry touches one coordinate of each of their
releases, where Laplace noise is smaller), whichever adds less noise for the plan, decided from
public parameters. The derivations are in ``docs/derivations/completion.rst``; the algorithms (ALS,
DP gradient descent, offsets) are in :mod:`dptensor._completion_models`.
"""
from __future__ import annotations

import functools
import math
import numbers
import operator
import warnings

import numpy as np
from scipy.optimize import brentq
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import ThreadpoolController

from ._base import PrivateEstimatorMixin
from ._implicit import DESIGN_NORM, wiener_fit
from ._memory import FLOAT
from ._completion_models import (Model, Observations, als, dp_als, entry_rounding, fit_floats,
                                 gradient_descent, init_model, predict, OffsetNoise, offset_noise,
                                 residual_scale, row_offsets, spectral_start)
from ._completion_models import offsets as offsets_of
from ._validation import check_positive_int, check_verbose, validate_private_data
from .accounting import ComposedEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent, epsilon_of, gdp_mu
from .mechanisms import gaussian_release, laplace_release

__all__ = ["PrivateTensorCompletion", "to_observations", "complete", "check_indices",
           "OFFSET_SHARE"]

#: Share of the budget spent on the private offsets when ``fit_intercept=True`` (gradient and output
#: perturbation): the gradient steps get ``(1 - OFFSET_SHARE) mu^2`` in Gaussian DP, the offsets
#: the rest; ``OFFSET_SHARE eps`` against the Laplace factor noise for ``"output"``.
OFFSET_SHARE = 0.5

_PERTURBATIONS = (None, "auto", "input", "gradient", "output", "statistics", "implicit")
_DEFAULT_GD = {"learning_rate": 0.35, "n_iter": 5, "clip_norm": 0.1, "reg": 0.01}

#: ``reg="auto"`` with ALS: after ``warmup`` sweeps at the floor ``AUTO_REG_FLOOR``, each sweep uses
#: the empirical-Bayes ridge ``AUTO_REG_FLOOR + mse / AUTO_PRIOR_VAR`` (residual variance over the
#: prior variance of one parameter, in scaled units). Chosen on the synthetic completion study
#: (20x20x20, rank 3, SNR 1) and a synthetic ratings tensor, never on a test set: it is exact on
#: noiseless low-rank data (the ridge vanishes with the residual) and shrinks hard on noisy
#: sparse ratings.
AUTO_REG_FLOOR = 1e-4
DAMPING = 10.0
AUTO_PRIOR_VAR = 0.02

OUTPUT_NOT_PRIVATE = ("perturbation='output' adds the paper's bolt-on noise, whose bound assumes a convex, "
                      "Lipschitz, smooth loss; CP and Tucker losses are not convex and the other factors "
                      "are released unnoised")
_DEFAULT_ALS_ITER = 100

#: ``perturbation="statistics"``: DP-ALS sweeps after the spectral start. Every sweep costs
#: ``order`` releases; on the 100^3 study (rank 3, 1e5 entries, SNR 1) two kept more of the
#: non-private gain than one at epsilon = 4, and the noise-free path gains nothing after two.
DP_ALS_SWEEPS = 2
#: Residuals are clipped to ``CLIP_RMS`` times their released root-mean-square (``residual_scale``)
#: before DP-ALS: the noise scales with the clipping level, and values near the range's ends are
#: rare once the offsets are removed.
CLIP_RMS = 1.5
#: ``perturbation="statistics"``: share of ``mu^2`` (Gaussian DP) spent on the offsets and the
#: residual scale, sums over many entries that need far less of the budget than the factors.
STATS_OFFSET_SHARE = 0.1
#: The spectral start's unfolding Grams: values clipped to ``GRAM_CLIP_RMS`` released rms (their
#: noise grows with the square of the clipping level, so a tighter clip than the sweeps' pays),
#: and at most ``COLUMN_CAP`` times the mean number of entries kept per unfolding column (the
#: noise grows with the fullest column). Both chosen on the 100^3 study: they moved the epsilon at
#: which DP-ALS starts to learn from about 4 down to about 2.
GRAM_CLIP_RMS = 1.0
COLUMN_CAP = 1.2
#: Share of the factor releases' ``mu^2`` spent on the spectral start's ``order - 1`` unfolding
#: Grams (the rest: its projected step and the sweeps). The first release that must align with the
#: truth is the one that decides whether the fit learns at all; on the 100^3 study 0.4 (against
#: 2/9 for equal multipliers) kept about 0.6 of the non-private gain at epsilon = 2 instead of 0.35.
GRAM_SHARE = 0.4
#: ``perturbation="implicit"``: share of the budget spent on the offsets and the residual scale
#: (the rest: one release of the interaction's sufficient statistic). Large enough that the offsets
#: are Laplace releases at epsilon = 1: on synthetic ratings whose positions follow the taste (500 x
#: 300 x 30, 3.2e4 values) test RMSE 0.652 at epsilon = 1 against 0.702 with 0.8 and 0.712 with
#: 0.5, for 0.520 against 0.515 at epsilon = 10. On a validation split of MovieLens-100K's
#: training ratings 0.5 did a little better at both epsilons (0.982 against 0.988 at epsilon = 1:
#: ``benchmarks/results/movielens_choice.md``): ratings data can afford a smaller share.
IMPLICIT_OFFSET_SHARE = 0.97


def to_observations(array):
    """``(X, y)`` from a dense array whose missing entries are NaN.

    Returns the positions of the finite entries as an int64 ``(n_obs, order)`` array (C order)
    and their values.

    >>> X, y = to_observations(np.array([[1.0, np.nan], [np.nan, 4.0]]))
    >>> X.tolist(), y.tolist()
    ([[0, 0], [1, 1]], [1.0, 4.0])
    """
    array = np.asarray(array, dtype=float)
    if array.ndim < 2:
        raise ValueError(f"array must have at least 2 dimensions, got shape {array.shape}")
    if np.any(np.isinf(array)):
        raise ValueError("array contains infinity; mark missing entries with NaN")
    observed = ~np.isnan(array)
    return np.argwhere(observed).astype(np.int64), array[observed]


def complete(estimator, shape=None):
    """The dense completed array of a fitted :class:`PrivateTensorCompletion` (every position predicted).

    Forms the full array, so only for shapes that fit in memory; ``predict`` at chosen positions
    never does. ``shape`` defaults to ``estimator.shape_``.
    """
    check_is_fitted(estimator, "factors_")
    shape = estimator.shape_ if shape is None else tuple(shape)
    X = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
    return estimator.predict(X).reshape(shape)


def check_indices(X, shape=None, name="X"):
    """Validate index tuples: a 2-D integer array (n, order >= 2), non-negative, inside ``shape``.

    Returns ``(X as int64, shape)``; ``shape=None`` infers one past the largest index per mode.
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of index tuples (n_obs, order), got shape {X.shape}")
    if X.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 columns (one index per mode), got "
                         f"n_features={X.shape[1]}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has 0 rows: at least one observed entry is required")
    if X.dtype.kind == "O":  # numbers held as objects are indices as any others (as in sklearn)
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold integer indices, and some entry is no number"
                            ) from None
    if X.dtype == bool or not (np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating)):
        raise TypeError(f"{name} must hold integer indices, got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.floating):
        if not np.all(np.isfinite(X)) or np.any(X != np.round(X)):
            raise ValueError(f"{name} must hold integer indices; got non-integer or non-finite values")
    X = X.astype(np.int64, copy=False)
    if np.any(X < 0):
        raise ValueError(f"Negative values in data: {name} has negative indices; indices must be >= 0")
    if shape is None:
        # column by column: a reduction over axis 0 of an (n, order) array is several times slower
        shape = tuple(int(X[:, m].max()) + 1 for m in range(X.shape[1]))
    else:
        shape = tuple(check_positive_int(n, "shape") for n in shape)
        if len(shape) != X.shape[1]:
            raise ValueError(f"shape has {len(shape)} modes but {name} has {X.shape[1]} columns")
        over = np.flatnonzero(np.any(X >= np.asarray(shape), axis=0))
        if over.size:
            m = int(over[0])
            raise ValueError(f"{name} has indices out of shape {shape}: mode {m} reaches "
                             f"{int(X[:, m].max())} >= {shape[m]}")
    return X, shape


class PrivateTensorCompletion(PrivateEstimatorMixin, RegressorMixin, BaseEstimator):
    r"""CP or Tucker tensor completion, private by noisy statistics, implicit feedback, input, gradient
    or (comparison only) output perturbation.

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
    * ``perturbation="input"``: pure ``epsilon``-DP (Laplace, parallel composition), ``delta`` unused.
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
    rank : int, default=3
        CP rank, or the size of every side of the Tucker core (``"implicit"``: the columns of each
        mode's spectral embedding; the released CP factors have ``2 rank`` columns). With the
        number of entries, the shape and the model it sets the fit's memory
        (:func:`~dptensor._completion_models.fit_floats`): a Tucker core holds ``rank^order``
        numbers and its Gram their square, the spectral start of ``"statistics"`` an
        ``n_m x n_m`` Gram per mode with a factor. A fit whose bound exceeds what the process can
        allocate is refused before its spend (:class:`~dptensor.MemoryRefusedError`).
    decomposition : {"cp", "tucker"}, default="cp"
    perturbation : {"auto", None, "statistics", "implicit", "input", "gradient", "output"}, default="auto"
        ``"auto"``: the non-private fit at ``epsilon=np.inf``, otherwise ``"statistics"`` for CP
        and ``"gradient"`` for Tucker (decided from public parameters only). ``None`` is the
        non-private fit; a finite ``epsilon`` needs one of the others.
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` is the non-private fit, which costs epsilon = infinity.
    delta : float or None, default=None
        ``None`` takes the accountant's delta, else 1e-5. Unused by ``"input"``.
    learning_rate : float or None, default=None
        Gradient-descent step (``None``: 0.35). Each row moves by ``lr`` times its Gauss-Newton step.
    n_iter : int or None, default=None
        Sweeps (ALS, default 100, stops early at ``tol``; DP-ALS, default 2) or gradient steps
        (default 5: every step of DP gradient descent costs budget, and a few well-preconditioned
        steps go furthest). Ignored by ``"implicit"`` (one release, one solve: ``n_iter_`` is 1).
    reg : float, default=0.01
        Ridge penalty on the factors (and the biases during ALS), in scaled units.
    reg_core : float or None, default=None
        Ridge penalty on the Tucker core; ``None`` uses ``reg``.
    clip_norm : float or None, default=None
        Joint l2 bound on each entry's gradient (``None``: 0.5), in scaled units.
    value_range : (lo, hi) or None, default=None
        Public range of the values; required when private. Values are clipped to it.
    shape : tuple of int or None, default=None
        The tensor's shape; ``None`` infers one past the largest index of each mode of ``X``.
    batch_size : None, default=None
        Only full batches are offered: Poisson-subsampled DP gradient descent would need an
        exactly accounted subsampled-Gaussian event, which the accountant does not price, and
        accounting each batch as a full step would waste the subsampling. Any other value raises.
    fit_intercept : bool, default=True
        Fit the global mean and per-mode row effects (released privately when private). Without
        them the values are not centred: data whose mean is far from 0 (ratings on 1..5) is then
        poorly fitted, since the private modes clip residuals to a fraction of the value range.
    solver : {"auto", "als", "gd"}, default="auto"
        ``"auto"``: ALS for ``None``, ``"input"``, ``"statistics"`` and ``"implicit"``, gradient descent for
        ``"gradient"`` and ``"output"`` (which require it).
    tol : float, default=1e-8
        ALS stops when the objective's relative decrease falls below ``tol``.
    factor_modes : tuple of int or None, default=None
        The modes that get factors (CP only; ``None``: every mode). The other modes keep their
        offsets but no factor: the interaction does not vary along them, and a private fit makes
        no release for them (fewer releases, less noise in each). For ratings-like data
        (user, item, time) use ``factor_modes=(0, 1)``: a user x item low-rank model with a time
        effect (on MovieLens-100K a CP time factor made the fit worse; see the completion guide).
        With ``"implicit"`` the order matters: the first mode is the lead (users: each row's factor
        is the normalised sum of learned vectors over the partner rows it was observed with), the
        second the partner (items: a spectral embedding of who rated what).
    offset_share : float in (0, 1) or None, default=None
        The share of the privacy budget spent on the offsets (global mean and row effects) when
        ``fit_intercept``: the factors' Gaussian releases get ``1 - offset_share`` of ``mu^2``
        (Gaussian DP) and the offsets the rest, by Gaussian noise or, when that is less noisy
        (large shares), Laplace noise; for ``"output"``, ``offset_share`` of ``epsilon``;
        for ``"statistics"`` and ``"implicit"`` the share also pays for the released residual
        scale (all of it without ``fit_intercept``). Unused by ``"input"`` (one Laplace release of every value),
        by ``"gradient"`` and ``"output"`` without ``fit_intercept``, and without privacy.
        ``None``: ``STATS_OFFSET_SHARE`` (0.1) for ``"statistics"``, ``IMPLICIT_OFFSET_SHARE``
        (0.97) for ``"implicit"``, ``OFFSET_SHARE`` (0.5) for ``"gradient"`` and ``"output"``.
        Data whose row effects carry most of the signal (ratings: user and item means) want most of the budget there (see the completion guide
        for MovieLens-100K); on a synthetic study without row effects 0.1 keeps 0.6 of the
        non-private gain at epsilon = 2 and 0.5 keeps 0.25.
        Choose it from public knowledge of the data, or with :mod:`dptensor.model_selection`.
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
    n_features_in_ : int
        The order of the tensor (the number of index columns).
    n_iter_ : int
    perturbation_ : str or None
        The mode used (``"auto"`` resolved).
    privacy_cost_ : PrivacyCost
    train_rmse_ : list of float
        Only when ``verbose`` and the fit is not private.

    Examples
    --------
    >>> from dptensor.datasets import make_low_rank_tensor
    >>> data = make_low_rank_tensor(random_state=0)
    >>> model = PrivateTensorCompletion(rank=3, random_state=0).fit(data["indices"], data["values"])
    >>> bool(np.sqrt(np.mean((model.predict(data["test_indices"]) - data["test_values"])**2)) < 1e-3)
    True
    """

    def __init__(self, rank=3, *, decomposition="cp", perturbation="auto", epsilon=np.inf, delta=None,
                 learning_rate=None, n_iter=None, reg="auto", reg_core=None, clip_norm=None,
                 value_range=None, shape=None, batch_size=None, fit_intercept=True, solver="auto",
                 tol=1e-8, factor_modes=None, offset_share=None, accountant=None, random_state=None,
                 verbose=0):
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
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        check_verbose(self.verbose)
        rank = check_positive_int(self.rank, "rank")
        if self.decomposition not in ("cp", "tucker"):
            raise ValueError(f'decomposition must be "cp" or "tucker", got {self.decomposition!r}')
        if self.perturbation not in _PERTURBATIONS:
            raise ValueError(f'perturbation must be None, "auto", "input", "gradient", "output", '
                             f'"statistics" or "implicit", got {self.perturbation!r}')
        perturbation = self._resolved_perturbation()
        if perturbation in ("statistics", "implicit") and self.decomposition != "cp":
            raise ValueError(f'perturbation="{perturbation}" fits CP models; use "gradient" for Tucker')
        if self.solver not in ("auto", "als", "gd"):
            raise ValueError(f'solver must be "auto", "als" or "gd", got {self.solver!r}')
        if self.batch_size is not None:
            raise ValueError("batch_size must be None: only full-batch gradient descent is offered, because "
                             "Poisson subsampling would need an exactly accounted subsampled-Gaussian event")
        solver = self.solver
        if solver == "auto":
            solver = "gd" if perturbation in ("gradient", "output") else "als"
        if perturbation in ("gradient", "output") and solver != "gd":
            raise ValueError(f'perturbation="{perturbation}" needs solver="gd" (or "auto")')
        if perturbation in ("statistics", "implicit") and solver != "als":
            raise ValueError(f'perturbation="{perturbation}" needs solver="als" (or "auto")')
        gd = solver == "gd"
        lr = _positive(self.learning_rate, "learning_rate", _DEFAULT_GD["learning_rate"])
        default_iter = (_DEFAULT_GD["n_iter"] if gd else DP_ALS_SWEEPS if perturbation == "statistics" else
                        1 if perturbation == "implicit" else _DEFAULT_ALS_ITER)
        n_iter = check_positive_int(self.n_iter, "n_iter") if self.n_iter is not None else default_iter
        if perturbation == "implicit":  # one release, one solve: there are no sweeps to set
            n_iter = 1
        clip = _positive(self.clip_norm, "clip_norm", _DEFAULT_GD["clip_norm"])
        auto = isinstance(self.reg, str) and self.reg == "auto"
        reg = (AUTO_REG_FLOOR if not gd else _DEFAULT_GD["reg"]) if auto else _nonnegative(self.reg, "reg")
        reg_core = reg if self.reg_core is None else _nonnegative(self.reg_core, "reg_core")
        tol = _nonnegative(self.tol, "tol")
        share = self.offset_share
        if share is not None and not (isinstance(share, numbers.Real) and 0.0 < share < 1.0):
            raise ValueError(f"offset_share must be a number in (0, 1) or None, got {share!r}")
        if share is None:
            share = {"statistics": STATS_OFFSET_SHARE, "implicit": IMPLICIT_OFFSET_SHARE}.get(perturbation,
                                                                                           OFFSET_SHARE)
        return dict(offset_share=float(share), perturbation=perturbation, rank=rank, solver=solver, lr=lr,
                    n_iter=n_iter, clip=clip, reg=reg, reg_core=reg_core, tol=tol,
                    prior_var=AUTO_PRIOR_VAR if (auto and not gd) else None)

    def _check_factor_modes(self, order):
        """The fixed modes (sorted tuple) from ``factor_modes`` and the tensor's order."""
        fixed = self._fixed_modes(order)
        if self._resolved_perturbation() == "implicit":
            self._check_implicit_modes(order, fixed)
        return fixed

    def _fixed_modes(self, order):
        if self.factor_modes is None:
            return ()
        try:
            modes = [operator.index(m) for m in self.factor_modes]
        except TypeError:
            modes = None
        # a bool is an int to Python, but (True, False) is no list of modes
        if modes is None or any(isinstance(m, (bool, np.bool_)) for m in self.factor_modes):
            raise TypeError(f"factor_modes must be a sequence of integer mode indices, got {self.factor_modes!r}")
        if len(set(modes)) != len(modes) or len(modes) < 2 or not all(0 <= m < order for m in modes):
            raise ValueError(f"factor_modes must hold at least two distinct modes in [0, {order}), "
                             f"got {self.factor_modes!r}")
        if self.decomposition != "cp" and len(modes) < order:
            raise ValueError('factor_modes is for decomposition="cp": '
                             'a Tucker model has a factor on every mode')
        return tuple(m for m in range(order) if m not in modes)

    def _check_implicit_modes(self, order, fixed):
        """``(lead, partner)``: the two modes with a factor of ``perturbation="implicit"``."""
        free = [m for m in range(order) if m not in fixed]
        if len(free) != 2:
            raise ValueError('perturbation="implicit" learns a two-mode interaction: pass factor_modes '
                             'with two modes (e.g. (0, 1) for users and items), or fit a matrix (two '
                             'columns of X)')
        if self.factor_modes is not None:
            free = [int(m) for m in self.factor_modes]
        return free[0], free[1]

    def _resolved_perturbation(self):
        """``perturbation="auto"``: non-private at ``epsilon=inf``, else the best private mode for the
        decomposition (public parameters only): DP-ALS (``"statistics"``) for CP, DP gradient
        descent for Tucker."""
        if self.perturbation != "auto":
            return self.perturbation
        if isinstance(self.epsilon, numbers.Real) and math.isinf(self.epsilon) and self.epsilon > 0:
            return None
        return "statistics" if self.decomposition == "cp" else "gradient"

    def _check_value_range(self, private):
        if self.value_range is None:
            if private:
                raise ValueError("value_range is required when epsilon is finite: values are clipped to "
                                 "this public (lo, hi) and the noise is calibrated to hi - lo. Choose it "
                                 "from public knowledge (e.g. the rating scale), not from the data.")
            return None
        try:
            lo, hi = (float(v) for v in self.value_range)
        except (TypeError, ValueError):
            raise ValueError(f"value_range must be a pair (lo, hi) of numbers, got {self.value_range!r}")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"value_range must be finite with lo < hi, got {self.value_range!r}")
        return lo, hi

    def _check_data(self, X, y):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        # scikit-learn's own checks first (sparse, complex, NaN/inf, empty, n_features_in_), then
        # the index-specific ones.
        X = validate_private_data(self, X, reset=True, dtype=None, ensure_min_features=2)
        X, shape = check_indices(X, self.shape)
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected; it is raveled",
                          DataConversionWarning, stacklevel=3)
            y = y[:, 0]
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D (one value per index tuple), got shape {y.shape}")
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y.shape[0]} values but X has {X.shape[0]} index tuples")
        if y.dtype.kind == "O":  # numbers held as objects are values as any others
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                raise TypeError("y must be real numbers, and some entry is no number") from None
        if y.dtype.kind not in "biuf":  # complex too: casting would drop the imaginary parts
            raise TypeError(f"y must be real numbers, got dtype {y.dtype}")
        y = y.astype(np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinity: pass only the observed entries "
                             "(to_observations turns a NaN-marked array into (X, y))")
        return X, y, shape

    # ------------------------------------------------------------------ fit
    def fit(self, X, y):
        """Fit on observed entries: ``X`` (n_obs, order) integer positions, ``y`` their values.

        Records the privacy spend with the accountant before the first noisy release.
        """
        p = self._check_params()
        X, y, shape = self._check_data(X, y)
        p["fixed"] = self._check_factor_modes(len(shape))
        pert = p["perturbation"]
        gaussian = pert in ("gradient", "statistics", "implicit")
        epsilon, delta = self._privacy_target(gaussian=gaussian)
        private = pert is not None and math.isfinite(epsilon)
        if pert is None and math.isfinite(epsilon):
            raise ValueError(f"epsilon={self.epsilon!r} needs a perturbation (\"auto\", \"statistics\", "
                             "\"implicit\", \"input\", \"gradient\" or \"output\"); perturbation=None is the "
                             "non-private fit (epsilon=np.inf)")
        vrange = self._check_value_range(private)
        if private:  # the unit is one observed value, and their number is public
            self._check_delta_for(len(y), epsilon, delta, unit="observed value")
        entropy = self._entropy()
        plan, event = self._plan_spend(p, epsilon, delta, len(shape), private)
        # What the public positions give (their per-row counts; the implicit design), before the
        # spend: a shape too large for memory fails here, not after the budget is gone.
        obs = Observations(X, shape)
        if pert == "implicit":
            obs.implicit_design(*self._check_implicit_modes(len(shape), p["fixed"]), p["rank"])
        # Recorded before anything is computed from the values: a refused fit touches none of them.
        self.privacy_cost_, rng = self._spend(
            event, entropy=entropy, delta=delta, memory=self._fit_memory(p, len(y), shape),
            noise_multiplier=plan["z"] if plan else 0.0,
            n_queries=plan["n_queries"] if plan else 0, calibration="exact",
            data_shape=(len(y), *shape), data=(X, y))

        # Public affine rescaling: values clipped to the range, centred, divided by its width.
        if vrange is not None:
            lo, hi = vrange
            y = np.clip(y, lo, hi)
            center, scale = ((lo + hi) / 2, hi - lo)
        else:
            center, scale = float(y.mean()), float(np.ptp(y)) or 1.0
        if not self.fit_intercept:
            center = 0.0
        ys = (y - center) / scale
        if vrange is not None and self.fit_intercept:
            # The offsets' releases rest on values in [-1/2, 1/2] (the total's sensitivity 1 needs them
            # centred), but a range a few ulps wide has a midpoint rounded up to half its width off.
            ys = np.clip(ys, -0.5, 0.5)
        # The training loss is an unnoised statistic of the private values: it is kept (and
        # printed) only for a fit that is not private.
        history = [] if self.verbose and not private else None

        # Every product here is skinny (entries x rank) or tiny (rank x rank per row): threaded BLAS
        # only adds synchronisation to them (measured several times slower on a busy machine).
        with _blas_controller().limit(limits=1, user_api="blas"):
            model = self._fit_scaled(obs, ys, p, plan, rng, history, private, scale)

        # Back to the caller's units: f scales by ``scale`` (spread over the factors for CP).
        if model.core is None:  # the scale is spread over the modes with a factor (others stay ones)
            per = abs(scale) ** (1.0 / (len(shape) - len(model.fixed)))
            self.factors_ = [U if m in model.fixed else U * per for m, U in enumerate(model.factors)]
            self.core_ = None
        else:
            self.factors_ = [U.copy() for U in model.factors]
            self.core_ = model.core * scale
        self.intercept_ = float(center + scale * model.intercept)
        self.biases_ = [b * scale for b in model.biases]
        self.shape_ = tuple(shape)
        self.n_iter_ = p["n_iter"] if history is None else len(history)
        self.value_range_ = vrange
        self.perturbation_ = pert
        if history is not None:
            self.train_rmse_ = [h * scale for h in history]
        return self

    def _fit_memory(self, p, n_obs, shape):
        """``(bytes, advice)``: the fit's peak allocation (:func:`fit_floats`, public
        quantities)."""
        mode = p["perturbation"] if p["perturbation"] in ("statistics", "implicit") else p["solver"]
        tucker = self.decomposition == "tucker"
        floats = fit_floats(n_obs, shape, p["rank"], tucker=tucker, mode=mode, fixed=p["fixed"])
        advice = ("Lower rank (a Tucker core holds rank^order numbers, its Gram their square), "
                  "or fit decomposition='cp'" if tucker else
                  "Lower rank, leave modes out of factor_modes, or split the data (a mode with "
                  "many rows costs n_m^2 for the spectral start of perturbation='statistics')")
        return floats * FLOAT, advice

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` entries of an order-``n_features``
        tensor of the public ``shape`` (set it: the estimate needs every mode's size)."""
        if self.shape is None:
            raise ValueError("the memory estimate needs the tensor's shape: set shape")
        p = self._check_params()
        p["fixed"] = self._check_factor_modes(int(n_features))
        return self._fit_memory(p, int(n_samples), tuple(int(v) for v in self.shape))

    def _plan(self, p, epsilon, delta, order):
        """The noise of a private fit: the offsets' mechanism and budget, the Gaussian multipliers of
        the factors' releases and the event recorded with the accountant.

        ``"gradient"``, ``"statistics"`` and ``"implicit"``: the factors' releases get
        ``(1 - offset_share)`` of ``mu^2`` (Gaussian DP); the offsets (and, for the last two, the
        residual scale) the rest of the budget, by the mechanism that adds less noise to them
        (:func:`_offsets_plan`).
        """
        n_free = order - len(p["fixed"])  # modes with a factor: each is one release per sweep
        pert = p["perturbation"]
        if pert == "input":
            return {"event": LaplaceEvent(epsilon), "z": 0.0, "n_queries": 1, "laplace_eps": epsilon}
        if pert == "output":  # the paper's Laplace on the last factor, after Laplace offsets
            eps_o = p["offset_share"] * epsilon if self.fit_intercept else 0.0
            lead = [LaplaceEvent(eps_o)] if eps_o > 0 else []
            return {"event": ComposedEvent(lead + [LaplaceEvent(epsilon - eps_o)]), "z": 0.0, "n_queries": 1,
                    "offsets": ("laplace", eps_o) if eps_o > 0 else None, "laplace_eps": epsilon - eps_o}
        statistics = pert in ("statistics", "implicit")
        n_o = (order + 1 if self.fit_intercept else 0) + statistics  # + the residual scale
        mu = gdp_mu(epsilon, delta)
        mu_f = mu * math.sqrt(1.0 - p["offset_share"]) if n_o else mu
        offsets, lead = _offsets_plan(n_o, mu, mu_f, epsilon, delta)
        if pert == "implicit":  # one release of the interaction's sufficient statistic
            z = 1.0 / mu_f
            return {"event": ComposedEvent(lead + [GaussianEvent(z, 1)]), "z": z, "offsets": offsets,
                    "n_queries": n_o + 1}
        if statistics:
            # GRAM_SHARE of mu_f^2 goes to the spectral start's n_free - 1 Grams (z_g), the rest to
            # its projected step and the sweeps (1 + n_iter n_free releases at z).
            n_g, n_f = n_free - 1, 1 + p["n_iter"] * n_free
            z_g = math.sqrt(n_g) / (mu_f * math.sqrt(GRAM_SHARE))
            z = math.sqrt(n_f) / (mu_f * math.sqrt(1.0 - GRAM_SHARE))
            event = ComposedEvent(lead + [GaussianEvent(z_g, n_g), GaussianEvent(z, n_f)])
            return {"event": event, "z": z, "z_gram": z_g, "offsets": offsets, "n_queries": n_o + n_g + n_f}
        z = math.sqrt(p["n_iter"]) / mu_f
        return {"event": ComposedEvent(lead + [GaussianEvent(z, p["n_iter"])]), "z": z, "offsets": offsets,
                "n_queries": p["n_iter"]}

    def _progress(self, private, scale):
        """Per-sweep/step progress for ``verbose``: the training RMSE only when the fit is not private."""
        if not self.verbose:
            return None
        name = type(self).__name__

        def report(step, rmse=None):
            if private or rmse is None:
                print(f"[{name}] sweep/step {step + 1} done", flush=True)
            else:
                print(f"[{name}] sweep/step {step + 1}: training RMSE {rmse * scale:.6g}", flush=True)
        return report

    def _fit_scaled(self, obs, ys, p, plan, rng, history, private, scale=1.0):
        shape, order = obs.shape, obs.order
        kind = self.decomposition
        pert = p["perturbation"]
        progress = self._progress(private, scale)
        if pert in ("statistics", "implicit"):
            # epsilon=inf runs the same path without noise (for comparison).
            fit = self._fit_dp_als if pert == "statistics" else self._fit_implicit
            return fit(obs, ys, p, plan or {"z": 0.0}, rng, progress)
        if pert == "input" and private:
            # Sensitivity of each value: hi - lo, which is 1 in scaled units.
            # Not clamped back into the range afterwards: that would bias every mean toward the
            # range's centre; the empirical-Bayes ridge of ALS sees the noise and shrinks instead.
            # No sum: each coordinate is one entry's own value, with nothing to round.
            ys = laplace_release(ys, 1.0, plan["laplace_eps"], rng, rounding=None)
        if p["solver"] == "als":
            model = init_model(shape, p["rank"], kind, rng, scale=0.1, fixed=p["fixed"])
            noisy_input = pert == "input" and private
            if self.fit_intercept:
                # After input perturbation every value carries Laplace noise: the row effects are
                # estimated once with empirical-Bayes shrinkage (post-processing) and kept fixed,
                # since a ridge chosen for the factors under-shrinks noisy row means.
                model.intercept, model.biases = row_offsets(obs, ys, shrink=max(p["reg"], 1e-3),
                                                            empirical_bayes=noisy_input)
            return als(obs, ys, model, reg=p["reg"], reg_core=p["reg_core"], n_iter=p["n_iter"],
                       tol=p["tol"], fit_biases=self.fit_intercept and not noisy_input,
                       prior_var=p["prior_var"], warmup=0 if noisy_input else 5, history=history,
                       callback=progress)
        # Gradient descent: data-independent start, private offsets, then (noisy) steps.
        model = init_model(shape, p["rank"], kind, rng, scale=0.1, offset_like=True, fixed=p["fixed"])
        if self.fit_intercept:
            offsets = plan.get("offsets") if plan else None
            noise = offset_noise(obs, *offsets) if offsets else None
            model.intercept, model.biases = row_offsets(obs, ys, shrink=1.0, noise=noise, rng=rng)
        z = plan["z"] if (plan and pert == "gradient") else 0.0
        gradient_descent(obs, ys, model, learning_rate=p["lr"], n_iter=p["n_iter"], reg=p["reg"],
                         reg_core=p["reg_core"], clip_norm=p["clip"], noise_multiplier=z,
                         damping=DAMPING * (2.0 * z * p["clip"])**2, rng=rng, history=history,
                         callback=progress)
        if pert == "output" and private:
            # The paper's bolt-on bound: Delta = 2 * iterations * Lipschitz constant * learning rate.
            # On the last mode with a factor: a mode without one keeps its public all-ones factor.
            sens = 2.0 * p["n_iter"] * p["clip"] * p["lr"]
            last = model.free_modes()[-1]
            # No allowance: the bound is the paper's, with no proof here (the fit is recorded as not
            # private), so there is no proven sensitivity for a rounding allowance to extend.
            model.factors[last] = laplace_release(model.factors[last], sens, plan["laplace_eps"],
                                                  rng, rounding=None)
        return model

    def _offsets_and_scale(self, obs, ys, model, plan, rng):
        """Private offsets (into ``model``) and the released residual scale after them: one budget
        (the two sums over every entry a small share each, the rows the rest by public counts);
        without intercept the scale is all of it. Returns ``(rms, clip, s2)``: the released scale,
        the residuals' clipping level and the per-entry variance that stands for them in the
        empirical-Bayes solves (an upper bound: the scale still holds the interactions)."""
        offsets, noise = plan.get("offsets"), None
        if self.fit_intercept:
            noise = offset_noise(obs, *offsets, n_global=2) if offsets else None
            model.intercept, model.biases = row_offsets(obs, ys, shrink=1.0, rng=rng, noise=noise)
        elif offsets:
            noise = OffsetNoise(offsets[0], np.array([offsets[1]]))
        rms = residual_scale(obs, ys, model, noise=noise, rng=rng)
        clip = min(0.5, max(CLIP_RMS * rms, 1e-3))
        return rms, clip, min(rms, clip) ** 2

    def _fit_dp_als(self, obs, ys, p, plan, rng, progress):
        """DP-ALS: private offsets, a released residual scale, then noisy-statistics sweeps."""
        z = plan["z"]
        model = init_model(obs.shape, p["rank"], "cp", rng, scale=0.1, fixed=p["fixed"])
        rms, clip, s2 = self._offsets_and_scale(obs, ys, model, plan, rng)
        spectral_start(obs, ys, model, noise_multiplier=z, rng=rng, clip=clip, s2=s2,
                       gram_clip=min(0.5, max(GRAM_CLIP_RMS * rms, 1e-3)), column_cap=COLUMN_CAP,
                       gram_noise_multiplier=plan.get("z_gram", z))
        return dp_als(obs, ys, model, n_iter=p["n_iter"], noise_multiplier=z, rng=rng, clip=clip, s2=s2,
                      callback=progress)

    def _fit_implicit(self, obs, ys, p, plan, rng, progress):
        """Implicit-feedback statistics: private offsets, a released residual scale, then one
        Gaussian release of the two-mode interaction's sufficient statistic (:mod:`dptensor._implicit`)."""
        lead, partner = self._check_implicit_modes(obs.order, p["fixed"])
        # The released CP model has 2 rank columns: [Z Y, P] and [Q, Z' W].
        model = init_model(obs.shape, 2 * p["rank"], "cp", rng, scale=0.1, fixed=p["fixed"])
        _, clip, s2 = self._offsets_and_scale(obs, ys, model, plan, rng)
        design = obs.implicit_design(lead, partner, p["rank"])
        # One value moves its clipped residual by at most min(1, 2 clip); each entry's design has
        # norm at most DESIGN_NORM.
        resid = np.clip(ys - offsets_of(model, obs.X), -clip, clip)
        sens = DESIGN_NORM * min(1.0, 2.0 * clip)
        B = design.adjoint(resid)
        if plan["z"] > 0:
            B = gaussian_release(B, sens, plan["z"], rng, rounding=implicit_rounding(len(ys), clip))
        theta = wiener_fit(design, B, s2=s2, noise_var=(plan["z"] * sens) ** 2)
        model.factors[lead], model.factors[partner] = design.factors(theta)
        if progress is not None:
            progress(0)
        return model

    # ------------------------------------------------------------------ predict
    def _model(self):
        return Model(factors=self.factors_, core=self.core_, intercept=self.intercept_, biases=self.biases_)

    def predict(self, X):
        """Predicted values at the index tuples ``X`` (n, order).

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
        model = self._model()
        unseen = X >= np.asarray(self.shape_)
        if unseen.any():
            # One appended row per mode stands for every unseen index: zeros (no interaction), or
            # ones for a mode without a factor, whose factor is all ones.
            fixed = self._check_factor_modes(len(self.shape_)) if self.core_ is None else ()
            X = np.where(unseen, np.asarray(self.shape_), X)
            model = Model(factors=[np.vstack([U, np.full((1, U.shape[1]), float(m in fixed))])
                                   for m, U in enumerate(model.factors)],
                          core=model.core, intercept=model.intercept,
                          biases=[np.append(b, 0.0) for b in model.biases])
        out = predict(model, X)
        if self.value_range_ is not None:
            np.clip(out, *self.value_range_, out=out)
        return out

    # ------------------------------------------------------------------ pricing and scoring
    def _plan_spend(self, p, epsilon, delta, order, private):
        """``(plan, event)`` of a fit: the noise plan (``None`` when not private) and the event recorded."""
        plan = self._plan(p, epsilon, delta, order) if private else None
        if plan is None:
            return None, NonPrivateEvent("epsilon=inf")
        if p["perturbation"] == "output":
            return plan, NonPrivateEvent(OUTPUT_NOT_PRIVATE)
        return plan, plan["event"]

    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` observed entries would record.

        ``n_features`` is the tensor's order (the columns of the index array ``X``). Computed from
        the parameters alone with the fit's own plan: no data, no spend. Returns a
        :class:`~dptensor.PrivacyCost`.
        """
        check_positive_int(n_samples, "n_samples")
        order = check_positive_int(n_features, "n_features")
        if order < 2:
            raise ValueError(f"n_features (the tensor's order) must be >= 2, got {order}")
        p = self._check_params()
        p["fixed"] = self._check_factor_modes(order)
        pert = p["perturbation"]
        gaussian = pert in ("gradient", "statistics", "implicit")
        epsilon, delta = self._privacy_target(gaussian=gaussian)  # validated before it is read
        private = pert is not None and math.isfinite(epsilon)
        self._check_value_range(private)
        plan, event = self._plan_spend(p, epsilon, delta, order, private)
        return self._preview(event, delta=delta, noise_multiplier=plan["z"] if plan else 0.0,
                             n_queries=plan["n_queries"] if plan else 0, calibration="exact")

    def _score_units(self, X, y=None):
        """Per-entry negative clipped squared error and its public range ``(-1, 0)`` (``None``
        without ``value_range``)."""
        if y is None:
            raise ValueError("score needs y, the observed values at the index tuples X")
        pred = self.predict(X)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape != pred.shape:
            raise ValueError(f"y has {y.size} values but X has {pred.size} index tuples")
        if self.value_range_ is None:
            return -(pred - y) ** 2, None
        lo, hi = self.value_range_
        err = (np.clip(pred, lo, hi) - np.clip(y, lo, hi)) / (hi - lo)
        return -err**2, (-1.0, 0.0)

    def score(self, X, y):
        """Negative clipped squared error, ``-mean(((clip(y_hat) - clip(y)) / (hi - lo))^2)``.

        Predictions and values are clipped to ``value_range = (lo, hi)``, so each entry's score
        lies in [-1, 0] and a replaced value moves the mean over ``n`` entries by at most ``1/n``.
        Without a value range it is the plain ``-mean((y_hat - y)^2)``, unbounded. This replaces
        the R^2 of ``RegressorMixin``, whose per-entry terms have no bound. The score reads ``y``
        exactly (it is not private).
        """
        return self._mean_score(X, y)

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


def implicit_rounding(n_obs, clip):
    """The rounding of the implicit statistic ``B = sum_e t~_e x_e``: each entry adds its clipped
    residual (``<= clip``) times its design (norm ``<= DESIGN_NORM``). A coordinate of ``B`` sums
    over the entries of every pair of a lead row observed with its partner row (or the converse):
    at most every entry, added within its pair, times the embedding, summed over the row's pairs,
    then times the normalised incidence: one more product after a partial sum."""
    return entry_rounding(n_obs, DESIGN_NORM * clip, n_obs, later=1)


def _offsets_plan(n_o, mu, mu_f, epsilon, delta):
    """``(offsets, events)`` for the ``n_o`` releases of the offsets when the factors' Gaussian
    releases take ``mu_f`` of a fit's ``(epsilon, delta)`` (``mu`` in Gaussian DP): ``offsets`` is
    ``(mechanism, budget)`` for :func:`offset_noise`, or ``None`` when there are none.

    Gaussian: the rest of ``mu^2``, ``n_o / z_o^2 = mu^2 - mu_f^2``: the whole fit is then exactly
    ``mu``-GDP. Laplace: the largest ``eps_o`` whose pure release composes with ``mu_f`` within
    ``(epsilon, delta)`` by the accountant's own pricing. Each offsets' release touches one
    coordinate per entry, where Laplace noise is smaller than Gaussian noise for the same budget,
    but its budget composes with a Gaussian one less tightly than Gaussian shares do: the mechanism
    is the one with the smaller noise variance per release when the ``n_o`` releases share the
    budget equally (``2 (n_o / eps_o)^2`` against ``z_o^2``), decided from public parameters only.
    """
    if n_o == 0:
        return None, []
    z_o = math.sqrt(n_o / (mu**2 - mu_f**2))
    factors = GaussianEvent(1.0 / mu_f, 1)  # prices as the factors' releases: same mu

    def excess(eps_o):
        return epsilon_of(ComposedEvent([LaplaceEvent(eps_o), factors]), delta) - epsilon

    hi = epsilon
    while excess(hi) <= 0:  # at a large delta Renyi DP prices a pure budget below itself
        hi *= 2.0
    eps_o = brentq(excess, 1e-12 * epsilon, hi, xtol=1e-14 * epsilon)
    while excess(eps_o) > 0:  # brentq may land a hair above the root
        eps_o *= 1.0 - 1e-12
    if 2.0 * (n_o / eps_o) ** 2 < z_o**2:
        return ("laplace", eps_o), [LaplaceEvent(eps_o)]
    return ("gaussian", z_o), [GaussianEvent(z_o, n_o)]


@functools.lru_cache(maxsize=1)
def _blas_controller():
    """One controller of the BLAS thread pools, found once (finding them costs about 1 ms a fit)."""
    return ThreadpoolController()


def _positive(value, name, default):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _nonnegative(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)
