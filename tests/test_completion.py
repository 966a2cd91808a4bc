"""Tests for PrivateTensorCompletion: recovery, private mechanisms and their accounting, input checks."""
import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

from dptensor import BudgetExceededError, PrivacyAccountant, PrivacyWarning
from completion_spies import patch_everywhere
from expected_warnings import COMPLETION_NOISE, NON_PRIVATE, noise_dominated
from dptensor.algorithms.completion.als import als
from dptensor.algorithms.completion.modes.base import OFFSET_SHARE
from dptensor.algorithms.completion.modes.statistics import (GRAM_SHARE, STATS_OFFSET_SHARE,
                                                             offsets_and_scale)
from dptensor.algorithms.completion.offsets import GLOBAL_SHARE
from dptensor.algorithms.completion.spectral import spectral_start
from dptensor.mechanisms import laplace_release
from dptensor.algorithms.completion.offsets import TOTAL_SENSITIVITY, eb_shrinkage, row_offsets, total_statistics
from dptensor.algorithms.completion.model import Model, predict
from dptensor.algorithms.completion.observations import Observations
from dptensor.algorithms.completion.gradient import clipped_gradient
from dptensor.accounting import ComposedEvent, GaussianEvent, LaplaceEvent, epsilon_of, gdp_mu
from dptensor.completion import PrivateTensorCompletion, complete, to_observations
from dptensor.datasets import make_low_rank_tensor


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def _study(seed=0, **kw):
    return make_low_rank_tensor(random_state=seed, **kw)


# Most private fits here are on a few values or the small default study, for their accounting,
# plumbing and messages: their weaker components and offsets are noise, and the fits say so
# (tests/test_completion_noise.py asserts those warnings).
pytestmark = COMPLETION_NOISE


# A private fit on a few values or on the small default study, for what it sets, prints, records
# or keeps in range (not for its accuracy): at that size its spectral start is noise, as it says.
_SMALL_STUDY = noise_dominated("start_eigenvalues_")


# ----------------------------------------------------------------------------- non-private recovery
@NON_PRIVATE
@pytest.mark.parametrize("decomposition", ["cp", "tucker"])
def test_exact_low_rank_recovered_at_defaults(decomposition):
    data = _study(0)  # values in [0, 1]: value range 1
    model = PrivateTensorCompletion(decomposition=decomposition, random_state=0)
    model.fit(data["indices"], data["values"])
    assert rmse(model.predict(data["test_indices"]), data["test_values"]) < 1e-3
    assert model.privacy_cost_.epsilon == math.inf and not model.privacy_cost_.private
    assert model.factors_[0].shape == (20, 3) and len(model.biases_) == 3
    assert (model.core_ is None) == (decomposition == "cp")


@NON_PRIVATE
@pytest.mark.parametrize("shape", [(30, 25), (7, 6, 8, 5)])
def test_order_two_and_four(shape):
    data = make_low_rank_tensor(shape=shape, rank=2, missing_ratio=0.4, random_state=1)
    model = PrivateTensorCompletion(rank=2, random_state=0).fit(data["indices"], data["values"])
    assert model.n_features_in_ == len(shape) and model.shape_ == shape
    assert rmse(model.predict(data["test_indices"]), data["test_values"]) < 1e-3


@NON_PRIVATE
def test_noisy_study_beats_masked_parafac_floor():
    # The seed study (SNR 1, 50% missing): TensorLy's masked parafac reaches 0.0431 averaged
    # over seeds, the observed-mean predictor 0.0705.
    data = _study(3, snr=1.0)
    model = PrivateTensorCompletion(random_state=0).fit(data["indices"], data["values"])
    err = rmse(model.predict(data["test_indices"]), data["test_values"])
    mean_err = rmse(np.full(len(data["test_values"]), data["values"].mean()), data["test_values"])
    assert err < 0.0431 < mean_err


@NON_PRIVATE
def test_scale_invariance_of_defaults():
    # Values are rescaled internally, so a rating-like affine change of units changes nothing.
    data = _study(2, snr=4.0)
    a = PrivateTensorCompletion(random_state=0).fit(data["indices"], data["values"])
    b = PrivateTensorCompletion(random_state=0).fit(data["indices"], 1 + 4 * data["values"])
    np.testing.assert_allclose(1 + 4 * a.predict(data["test_indices"]), b.predict(data["test_indices"]),
                               atol=1e-6)


@NON_PRIVATE
def test_to_observations_and_complete_round_trip():
    data = _study(0)
    dense = np.full(data["shape"], np.nan)
    dense[tuple(data["indices"].T)] = data["values"]
    X, y = to_observations(dense)
    assert X.dtype == np.int64 and len(y) == len(data["values"])
    model = PrivateTensorCompletion(random_state=0).fit(X, y)
    full = complete(model)
    assert full.shape == data["shape"]
    assert rmse(full, data["tensor"]) < 1e-3
    np.testing.assert_allclose(full[tuple(X.T)], model.predict(X))


@NON_PRIVATE
def test_unobserved_rows_predict_offsets_only():
    X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    y = np.array([1.0, 2.0, 3.0, 4.0])
    model = PrivateTensorCompletion(rank=1, shape=(3, 3), random_state=0).fit(X, y)
    # Row 2 of both modes has no entry: its factor row and bias are 0.
    assert np.all(model.factors_[0][2] == 0) and model.biases_[0][2] == 0
    assert model.predict([[2, 2]])[0] == pytest.approx(model.intercept_)


@NON_PRIVATE
def test_verbose_history_decreases():
    data = _study(1)
    model = PrivateTensorCompletion(verbose=1, n_iter=20, random_state=0).fit(data["indices"], data["values"])
    assert len(model.train_rmse_) == model.n_iter_
    assert model.train_rmse_[-1] < 0.01 * model.train_rmse_[0]


@NON_PRIVATE
def test_noise_free_gradient_descent_fits():
    # perturbation="gradient" with epsilon=inf: the same clipped, preconditioned steps, no noise.
    data = _study(0)
    model = PrivateTensorCompletion(perturbation="gradient", n_iter=30, learning_rate=0.35, clip_norm=10.0,
                                    value_range=(0, 1), verbose=1, random_state=0)
    model.fit(data["indices"], data["values"])
    assert model.train_rmse_[-1] < 0.2 * model.train_rmse_[0]


# ----------------------------------------------------------------------------- gradients and clipping
def _loss_grad_numeric(model, X, y, eps=1e-6):
    """Finite-difference gradient of 1/2 sum (y - f)^2 (no offsets) wrt every parameter."""
    def loss():
        return 0.5 * np.sum((y - predict(model, X)) ** 2)
    grads = []
    params = model.factors + ([model.core] if model.core is not None else [])
    for P in params:
        g = np.zeros_like(P)
        for idx in np.ndindex(P.shape):
            old = P[idx]
            P[idx] = old + eps
            up = loss()
            P[idx] = old - eps
            down = loss()
            P[idx] = old
            g[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def _summed_gradient(model, obs, y, clip):
    resid = y - predict(model, obs.X)
    w, K, R = clipped_gradient(model, obs.X, resid, clip)
    grads = [-obs.scatter(m, K[m] * w[:, None]) for m in range(obs.order)]
    if model.core is not None:
        grads.append(-np.einsum("e,ea,eb,ec->abc", w, *R))
    return grads


@pytest.mark.parametrize("kind", ["cp", "tucker"])
def test_unclipped_gradient_matches_finite_differences(kind, rng):
    shape, rank = (4, 3, 5), 2
    X = np.stack(np.unravel_index(rng.choice(60, 25, replace=False), shape), axis=1)
    y = rng.standard_normal(25)
    model = Model(factors=[rng.standard_normal((n, rank)) for n in shape],
                  core=rng.standard_normal((rank,) * 3) if kind == "tucker" else None,
                  biases=[np.zeros(n) for n in shape])
    obs = Observations(X, shape)
    for got, want in zip(_summed_gradient(model, obs, y, None), _loss_grad_numeric(model, X, y)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["cp", "tucker"])
def test_clipping_bounds_each_entry_and_the_replace_one_sensitivity(kind, rng):
    """Brute force: every entry's joint gradient norm <= m, and changing one value moves the summed
    gradient (all parameters stacked) by at most 2m."""
    shape, rank, m = (4, 3, 5), 2, 0.3
    X = np.stack(np.unravel_index(rng.choice(60, 20, replace=False), shape), axis=1)
    y = rng.uniform(-3, 3, 20)
    model = Model(factors=[rng.standard_normal((n, rank)) for n in shape],
                  core=rng.standard_normal((rank,) * 3) if kind == "tucker" else None,
                  biases=[np.zeros(n) for n in shape])
    obs = Observations(X, shape)
    base = np.concatenate([g.ravel() for g in _summed_gradient(model, obs, y, m)])
    worst = 0.0
    for e in range(len(y)):
        single = Observations(X[e:e + 1], shape)
        g = np.concatenate([g.ravel() for g in _summed_gradient(model, single, y[e:e + 1], m)])
        assert np.linalg.norm(g) <= m * (1 + 1e-9)
        for new in (-50.0, 0.0, 50.0):
            y2 = y.copy()
            y2[e] = new
            other = np.concatenate([g.ravel() for g in _summed_gradient(model, obs, y2, m)])
            worst = max(worst, np.linalg.norm(other - base))
    assert worst <= 2 * m * (1 + 1e-9)
    assert worst > 1.5 * m  # the bound is nearly reached: clipping is active, not vacuous


def test_offset_sums_have_sensitivity_one_range_width(rng):
    """Replace-one brute force on the noise-free offset releases (total and every row sum, in order):
    sensitivity 1 in l1 and l2 alike, the total's pair included (TOTAL_SENSITIVITY)."""
    shape = (4, 5, 3)
    X = np.stack(np.unravel_index(rng.choice(60, 30, replace=False), shape), axis=1)
    obs = Observations(X, shape)
    y = rng.uniform(-0.5, 0.5, 30)  # scaled values: range width 1

    def releases(values):
        # the sums each release adds noise to, given the previously released (here exact) offsets
        mu, biases = row_offsets(obs, values, shrink=0.0)
        out = [total_statistics(values) / TOTAL_SENSITIVITY]  # released jointly: scaled to unit bound
        resid = values - mu
        for m in range(3):
            out.append(obs.scatter(m, resid))
            resid = resid - biases[m][X[:, m]]
        return out, (mu, biases)

    base, (mu, biases) = releases(y)
    worst = 0.0
    for e in range(len(y)):
        for new in (-0.5, 0.5):
            y2 = y.copy()
            y2[e] = new
            # the later sums subtract the *released* offsets, which are fixed when conditioning on them
            resid = y2 - mu
            sums = [total_statistics(y2) / TOTAL_SENSITIVITY]
            for m in range(3):
                sums.append(obs.scatter(m, resid))
                resid = resid - biases[m][X[:, m]]
            for a, b in zip(base, sums):  # in l2 (Gaussian offsets) and l1 (Laplace offsets)
                assert np.linalg.norm(a - b) <= 1.0 + 1e-12 and np.abs(a - b).sum() <= 1.0 + 1e-12
            worst = max(worst, np.linalg.norm(base[0] - sums[0]))
    assert worst > 0.95  # the joint bound is nearly reached (a value moved across the range)


def test_eb_shrinkage_is_public_and_shrinks_noise(rng):
    counts = rng.integers(1, 50, 500).astype(float)
    beta = rng.normal(0, 0.1, 500)
    sums = counts * beta + rng.normal(0, 0.2 * np.sqrt(counts)) + rng.normal(0, 5.0, 500)
    kappa = eb_shrinkage(sums, counts, 25.0)
    shrunk = sums / (counts + kappa)
    assert rmse(shrunk, beta) < rmse(sums / counts, beta)
    assert rmse(shrunk, beta) <= np.std(beta) * 1.05  # never much worse than predicting 0


# ----------------------------------------------------------------------------- private modes
def test_input_perturbation_noise_scale_and_cost(monkeypatch):
    data = _study(0)
    seen = {}
    real = laplace_release

    def spy(value, sensitivity, epsilon, rng, dtype=None, **kw):
        seen.update(shape=np.shape(value), sensitivity=sensitivity, epsilon=epsilon, **kw)
        return real(value, sensitivity, epsilon, rng, dtype, **kw)

    patch_everywhere(monkeypatch, "laplace_release", spy)
    acc = PrivacyAccountant(epsilon=10.0)
    lo, hi = -1.0, 3.0
    model = PrivateTensorCompletion(perturbation="input", epsilon=0.7, value_range=(lo, hi), accountant=acc,
                                    random_state=0).fit(data["indices"], data["values"])
    # one Laplace per observed entry, scale (hi - lo)/eps in the caller's units (internal unit = hi - lo)
    assert seen["shape"] == (len(data["values"]),)
    assert seen["rounding"] is None  # each coordinate is one value on its own: no sum to round
    assert seen["sensitivity"] * (hi - lo) / seen["epsilon"] == pytest.approx((hi - lo) / 0.7)
    assert model.privacy_cost_.event == LaplaceEvent(0.7)
    assert model.privacy_cost_.epsilon == pytest.approx(0.7, rel=1e-4)
    assert acc.spent()[0] == pytest.approx(0.7, rel=1e-4)


def test_input_perturbation_empirical_noise_std(monkeypatch):
    """The values the fit sees differ from the clipped truth by Laplace((hi-lo)/eps) noise."""
    data = _study(1)
    captured = {}
    real_als = als

    def spy(obs, ys, model, **kw):
        captured["ys"] = ys
        return real_als(obs, ys, model, **{**kw, "n_iter": 1})

    patch_everywhere(monkeypatch, "als", spy)
    eps = 2.0
    PrivateTensorCompletion(perturbation="input", epsilon=eps, value_range=(0, 1), random_state=0).fit(
        data["indices"], data["values"])
    noise = captured["ys"] - (np.clip(data["values"], 0, 1) - 0.5)
    assert np.std(noise) == pytest.approx(math.sqrt(2) / eps, rel=0.05)
    assert np.median(np.abs(noise)) == pytest.approx(math.log(2) / eps, rel=0.08)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_gradient_perturbation_records_exact_target(fit_intercept):
    data = _study(0)
    acc = PrivacyAccountant(epsilon=5.0, delta=1e-6)
    model = PrivateTensorCompletion(perturbation="gradient", epsilon=1.0, value_range=(0, 1), n_iter=6,
                                    fit_intercept=fit_intercept, accountant=acc, random_state=0)
    model.fit(data["indices"], data["values"])
    cost = model.privacy_cost_
    assert cost.delta == 1e-6
    assert cost.epsilon == pytest.approx(1.0, rel=1e-9)
    assert acc.spent()[0] == pytest.approx(1.0, rel=1e-9)
    leaves = list(cost.event.leaves())
    steps = [e for e in leaves if e.count == 6]
    assert len(steps) == 1 and steps[0].noise_multiplier == cost.noise_multiplier
    mu = gdp_mu(1.0, 1e-6)
    share = OFFSET_SHARE if fit_intercept else 0.0
    assert cost.noise_multiplier == pytest.approx(math.sqrt(6) / (mu * math.sqrt(1 - share)))
    assert len(leaves) == (2 if fit_intercept else 1)


def test_gradient_noise_is_two_z_m_per_coordinate(monkeypatch):
    """Every DP step is ONE release of all its sums (each mode's rows that hold an entry, and the
    core for Tucker) at sensitivity 2 m and the step multiplier; the offsets are order + 1 releases
    at sensitivity 1 (scaled units) and the offsets' multiplier."""
    import dptensor.mechanisms as cm

    steps, offsets = [], []
    real_joint, real_release = cm.joint_gaussian_release, cm.gaussian_release

    def joint(parts, sensitivity, z, rng, **kw):
        steps.append(([np.shape(p) for p in parts], sensitivity, z))
        return real_joint(parts, sensitivity, z, rng, **kw)

    def release(value, sensitivity, z, rng, dtype=None, **kw):
        offsets.append((np.shape(value), sensitivity, z))
        return real_release(value, sensitivity, z, rng, dtype, **kw)

    patch_everywhere(monkeypatch, "joint_gaussian_release", joint)
    patch_everywhere(monkeypatch, "gaussian_release", release)
    data = _study(0)
    for kind in ("cp", "tucker"):
        steps.clear(), offsets.clear()
        model = PrivateTensorCompletion(perturbation="gradient", decomposition=kind, epsilon=2.0,
                                        value_range=(0, 1), clip_norm=0.25, n_iter=5, random_state=0)
        model.fit(data["indices"], data["values"])
        z = model.privacy_cost_.noise_multiplier
        z_off = [e.noise_multiplier for e in model.privacy_cost_.event.leaves() if e.count == 3 + 1][0]
        assert len(steps) == 5
        seen = [int(np.count_nonzero(np.bincount(data["indices"][:, m]))) for m in range(3)]
        for shapes, sens, mult in steps:
            assert sens == pytest.approx(2 * 0.25) and mult == z
            assert [sh[0] for sh in shapes[:3]] == seen and len(shapes) == (3 if kind == "cp" else 4)
        # the offsets' multipliers share mu_o^2 = 4 / z_off^2, in proportion to their public counts
        assert len(offsets) == 3 + 1
        assert sum(m**-2.0 for _, _, m in offsets) == pytest.approx(4 / z_off**2, rel=1e-12)
        # the total and the clipped sum of squares together, then one row sum per mode
        assert offsets[0][:2] == ((2,), TOTAL_SENSITIVITY) and all(s == 1.0 for _, s, _ in offsets[1:])


def test_private_gradient_model_beats_trivial_predictor_on_ratings_like_data(rng):
    # Row effects dominate ratings; the private offsets plus a few DP steps must beat the
    # training-mean predictor at eps=1 (the MovieLens goal, on a small synthetic stand-in).
    shape = (300, 200, 10)
    n = 30000
    X = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    effects = [rng.normal(0, 0.5, s) for s in shape]
    y = np.clip(np.round(3.5 + sum(e[X[:, m]] for m, e in enumerate(effects)) + rng.normal(0, 0.8, n)), 1, 5)
    train, test = slice(0, 27000), slice(27000, None)
    trivial = rmse(np.full(3000, y[train].mean()), y[test])
    errs = [rmse(PrivateTensorCompletion(perturbation="gradient", epsilon=1.0, value_range=(1, 5), random_state=s)
                 .fit(X[train], y[train]).predict(X[test]), y[test]) for s in range(2)]
    assert np.mean(errs) < 0.95 * trivial


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_output_perturbation_costs_infinity(fit_intercept):
    """The paper's bolt-on bound has no guarantee for a non-convex loss: under a finite budget the
    fit is refused before it touches the data; without one it runs, warns and is not private."""
    data = _study(0)
    acc = PrivacyAccountant(epsilon=3.0)
    est = PrivateTensorCompletion(perturbation="output", epsilon=1.0, value_range=(0, 1), accountant=acc,
                                  fit_intercept=fit_intercept, random_state=0)
    with pytest.raises(BudgetExceededError, match="no privacy guarantee.*convex"):
        est.fit(data["indices"], data["values"])
    assert acc.history() == [] and not hasattr(est, "factors_")
    with pytest.warns(PrivacyWarning, match="convex"):
        model = est.set_params(accountant=None).fit(data["indices"], data["values"])
    assert model.privacy_cost_.epsilon == math.inf and not model.privacy_cost_.private
    unlimited = PrivacyAccountant()
    with pytest.warns(PrivacyWarning, match="convex"):
        est.set_params(accountant=unlimited).fit(data["indices"], data["values"])
    assert unlimited.spent()[0] == math.inf and unlimited.history()[0].mechanism == "none"
    assert "convex" in PrivateTensorCompletion.__doc__


def test_budget_refused_before_touching_data():
    data = _study(0)
    acc = PrivacyAccountant(epsilon=1.0)
    PrivateTensorCompletion(perturbation="gradient", epsilon=0.8, value_range=(0, 1), accountant=acc,
                            random_state=0).fit(data["indices"], data["values"])
    before = acc.history()
    with pytest.raises(BudgetExceededError):
        PrivateTensorCompletion(perturbation="input", epsilon=0.5, value_range=(0, 1), accountant=acc,
                                random_state=0).fit(data["indices"], data["values"])
    assert len(acc.history()) == len(before)


def test_verbose_private_fit_keeps_no_training_loss():
    """The training loss is an unnoised statistic: a private fit neither stores nor prints it."""
    data = _study(0)
    model = PrivateTensorCompletion(perturbation="gradient", epsilon=1.0, value_range=(0, 1), verbose=1,
                                    random_state=0).fit(data["indices"], data["values"])
    assert not hasattr(model, "train_rmse_")
    with pytest.warns(PrivacyWarning, match="without a privacy guarantee"):
        public = PrivateTensorCompletion(verbose=1, random_state=0).fit(data["indices"], data["values"])
    assert len(public.train_rmse_) == public.n_iter_


def test_grid_search_over_epsilon_records_every_fit():
    data = _study(0, snr=2.0)
    acc = PrivacyAccountant(epsilon=100.0)
    # shape is public and given: a fold's largest index need not reach it
    est = PrivateTensorCompletion(perturbation="gradient", value_range=(-0.5, 1.5), shape=data["shape"],
                                  accountant=acc, random_state=0)
    grid = GridSearchCV(est, {"epsilon": [0.5, 2.0]}, cv=2, scoring="neg_root_mean_squared_error")
    grid.fit(data["indices"], data["values"])
    entries = acc.history()
    assert len(entries) == 2 * 2 + 1  # every candidate on every fold, plus the refit
    expected = epsilon_of([e.event for e in entries], acc.delta)
    assert acc.spent()[0] == pytest.approx(expected)
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("X, y, kw, err, match", [
    ([[0, 0], [5, 1]], [1.0, 2.0], {"shape": (3, 3)}, ValueError, "out of shape"),
    ([[0, 0], [-1, 1]], [1.0, 2.0], {}, ValueError, "negative"),
    ([[0, 0], [0.5, 1]], [1.0, 2.0], {}, ValueError, "integer"),
    ([[0, 0], [1, 1]], [1.0, np.nan], {}, ValueError, "NaN"),
    ([[0, 0], [1, 1]], [1.0, 2.0, 3.0], {}, ValueError, "3 values but X has 2"),
    ([[0, 0], [1, 1]], [1.0 + 1j, 2.0], {}, TypeError, "real numbers"),  # not cast to its real part
    ([[0, 0], [1, 1]], [1.0, 2.0], {"perturbation": "gradient", "epsilon": 1.0}, ValueError, "value_range"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"epsilon": 1.0, "perturbation": None}, ValueError, "needs a perturbation"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"epsilon": 1.0}, ValueError, "value_range"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"epsilon": 1.0, "perturbation": "statistics", "decomposition": "tucker",
                                    "value_range": (0, 2)}, ValueError, "CP"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"batch_size": 10}, ValueError, "batch_size"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"value_range": (2, 1)}, ValueError, "value_range"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"shape": (3, 3, 3)}, ValueError, "3 modes"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"decomposition": "parafac"}, ValueError, "decomposition"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"perturbation": "laplace"}, ValueError, "perturbation"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"rank": 0}, ValueError, "rank"),
    ([[0, 0], [1, 1]], [1.0, 2.0], {"perturbation": "input", "solver": "gd", "epsilon": 1.0,
                                    "value_range": (0, 2)}, None, None),
])
def test_bad_input_errors(X, y, kw, err, match):
    est = PrivateTensorCompletion(random_state=0, **kw)
    if err is None:
        est.fit(np.array(X), np.array(y))
        return
    with pytest.raises(err, match=match):
        est.fit(np.array(X), np.array(y))


@NON_PRIVATE
def test_predict_checks_indices_and_cold_starts_unseen_rows():
    model = PrivateTensorCompletion(rank=1, random_state=0).fit(np.array([[0, 0], [1, 1], [0, 1]]), [1.0, 2, 3])
    # Row 5 of mode 0 was never seen: offsets only (intercept + the seen mode's bias).
    assert model.predict([[5, 1]])[0] == pytest.approx(model.intercept_ + model.biases_[1][1])
    assert model.predict([[5, 7]])[0] == pytest.approx(model.intercept_)
    with pytest.raises(ValueError, match="features"):
        model.predict([[0, 0, 0]])
    with pytest.raises(ValueError, match="negative"):
        model.predict([[-1, 0]])


@_SMALL_STUDY
def test_cross_val_score_without_shape_is_finite():
    from sklearn.model_selection import cross_val_score

    data = _study(0, snr=2.0)
    scores = cross_val_score(PrivateTensorCompletion(epsilon=4.0, value_range=(-0.5, 1.5), random_state=0),
                             data["indices"], data["values"], cv=3, scoring="neg_root_mean_squared_error")
    assert np.all(np.isfinite(scores))


def test_caller_arrays_not_modified():
    data = _study(0)
    X, y = data["indices"].copy(), data["values"].copy()
    PrivateTensorCompletion(perturbation="input", epsilon=1.0, value_range=(0.2, 0.8), random_state=0).fit(X, y)
    np.testing.assert_array_equal(X, data["indices"])
    np.testing.assert_array_equal(y, data["values"])


# ----------------------------------------------------------------------------- scikit-learn contract
# X holds integer indices: the estimator declares it through its tags (categorical, positive), so
# scikit-learn's checks round their data to non-negative integers and every check runs (numbers
# held as objects included).
@parametrize_with_checks([PrivateTensorCompletion(random_state=0, n_iter=5)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        check(estimator)


def test_sklearn_checks_pass_on_index_data():
    """The substance of the checks refused above, on index-valued X: clone-fit idempotence,
    pickling, no parameter changes, score = negative clipped squared error."""
    import pickle

    from sklearn.base import clone

    data = _study(5)
    X, y = data["indices"], data["values"]
    est = PrivateTensorCompletion(perturbation="gradient", epsilon=2.0, value_range=(0, 1), random_state=7)
    params = est.get_params()
    a = clone(est).fit(X, y).predict(data["test_indices"])
    fitted = est.fit(X, y)
    assert fitted is est and est.get_params() == params
    np.testing.assert_array_equal(a, est.predict(data["test_indices"]))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    # score: negative squared error of values and predictions clipped to value_range (width 1 here)
    assert est.score(X, y) == pytest.approx(-np.mean((np.clip(est.predict(X), 0, 1) - np.clip(y, 0, 1)) ** 2))


# ----------------------------------------------------------------------------- DP-ALS ("statistics")
def _released_model(rng, shape, rank=2):
    return Model(factors=[rng.standard_normal((n, rank)) for n in shape], core=None, intercept=0.1,
                 biases=[rng.normal(0, 0.1, n) for n in shape])


def _rhs_release(model, obs, y, m, clip):
    """What one DP-ALS half-sweep adds noise to: every row's right-hand side, stacked."""
    from dptensor.algorithms.completion.dp_als import _balance, clip_designs
    from dptensor.algorithms.completion.design import _offsets_sorted, mode_design

    L = obs.layout(m)
    _balance(model, m)
    Kt, bound = clip_designs(mode_design(model, L, m), 0.9)
    base = np.clip(y[L.perm] - _offsets_sorted(model, L), -clip, clip)
    return L.normal_equations(Kt, base)[1], bound


@pytest.mark.parametrize("clip", [0.5, 0.1])
def test_dp_als_right_hand_sides_have_sensitivity_d_c(clip, rng):
    """Brute force: replacing any one value (scaled units, range [-1/2, 1/2]) moves the stacked
    right-hand sides of a half-sweep by at most min(1, 2 clip) * C, C the public design bound."""
    shape = (5, 4, 6)
    X = np.stack(np.unravel_index(rng.choice(120, 40, replace=False), shape), axis=1)
    obs = Observations(X, shape)
    y = rng.uniform(-0.5, 0.5, 40)
    model = _released_model(rng, shape)
    for m in range(3):
        base, bound = _rhs_release(model, obs, y, m, clip)
        worst = 0.0
        for e in range(len(y)):
            for new in (-0.5, 0.5):
                y2 = y.copy()
                y2[e] = new
                other, bound2 = _rhs_release(model, obs, y2, m, clip)
                assert bound2 == bound  # the design bound does not depend on the values
                worst = max(worst, np.linalg.norm(other - base))
        assert worst <= min(1.0, 2 * clip) * bound * (1 + 1e-9)
        assert worst > 0.3 * min(1.0, 2 * clip) * bound  # not vacuous


@NON_PRIVATE
def test_an_unseen_index_of_a_mode_without_a_factor_keeps_the_interaction():
    """A future day (past shape_ in the time mode of the ratings recipe) was predicted from the
    offsets alone, dropping the whole user x item interaction, which does not vary with the day:
    on a temporal split the recipe predicted no better than the offsets. Now such an index loses
    only its own offset; an unseen user still gets the offsets only."""
    X, y, Xt, truth = _ratings_like(3)
    model = PrivateTensorCompletion(rank=2, factor_modes=(0, 1), random_state=0).fit(X, y)
    seen = Xt.copy()
    future = Xt.copy()
    future[:, 2] = model.shape_[2] + 5
    np.testing.assert_allclose(model.predict(future),
                               model.predict(seen) - model.biases_[2][seen[:, 2]], atol=1e-12)
    offsets = model.intercept_ + model.biases_[0][Xt[:, 0]] + model.biases_[1][Xt[:, 1]]
    assert rmse(model.predict(future), offsets) > 0.1  # the interaction is kept
    new_user = Xt.copy()
    new_user[:, 0] = model.shape_[0]
    np.testing.assert_allclose(model.predict(new_user),
                               model.intercept_ + model.biases_[1][Xt[:, 1]] + model.biases_[2][Xt[:, 2]])


def test_bad_factor_modes_and_epsilon_are_refused_by_name_before_any_spend():
    """Bools are ints to Python: ``(True, False)`` used to fit as modes ``(1, 0)``. And
    ``privacy_cost`` read ``epsilon`` before validating it: ``epsilon="1"`` gave Python's bare
    "must be real number, not str" instead of the message naming epsilon."""
    X, y, _, _ = _ratings_like(2)
    for bad in [(True, False), (np.bool_(True), 0), (0.0, 1.0)]:
        budget = PrivacyAccountant(epsilon=10.0, delta=1e-6)
        est = PrivateTensorCompletion(factor_modes=bad, epsilon=1.0, value_range=(-3, 3), accountant=budget)
        with pytest.raises(TypeError, match="factor_modes must be \"auto\", None or a sequence of integer"):
            est.fit(X, y)
        with pytest.raises(TypeError, match="factor_modes"):
            est.privacy_cost(len(y), 3)
        assert budget.history() == []
    for bad in ("1", None):
        with pytest.raises(TypeError, match="epsilon must be a real number"):
            PrivateTensorCompletion(epsilon=bad, value_range=(-3, 3)).privacy_cost(len(y), 3)
    # the ratings recipe's modes, as any integer sequence, are accepted
    for good in [(0, 1), [1, 0], np.array([0, 1])]:
        assert PrivateTensorCompletion(factor_modes=good)._check_factor_modes(3) == (2,)


@pytest.mark.parametrize("cap", [None, 3])
def test_spectral_gram_and_residual_scale_sensitivities(cap, rng):
    """Brute force on the warm start's releases: the released (upper, off-diagonal) unfolding Gram
    moves by at most its stated Delta = D clip sqrt(n_col - 1), with and without a column cap; the
    clipped sum of squared residuals moves by at most bound^2."""
    from dptensor.algorithms.completion.model import offsets
    from dptensor.algorithms.completion.spectral import unfolding_gram

    shape, clip = (5, 4, 3), 0.2
    X = np.stack(np.unravel_index(rng.choice(60, 45, replace=False), shape), axis=1)
    obs = Observations(X, shape)
    y = rng.uniform(-0.5, 0.5, 45)
    model = _released_model(rng, shape)

    def released(values, m):
        M, sens = unfolding_gram(obs, values - offsets(model, X), m, clip, cap)
        return M[np.triu_indices(shape[m], 1)], sens

    def sumsq(values, bound=0.5):
        return np.sum(np.minimum((values - offsets(model, X)) ** 2, bound**2))

    for m in (1, 2):
        base, bound = released(y, m)
        worst = 0.0
        for e in range(45):
            for new in (-0.5, 0.5):
                other, bound2 = released(np.where(np.arange(45) == e, new, y), m)
                assert bound2 == bound  # the sensitivity depends on Omega only
                worst = max(worst, np.linalg.norm(other - base))
        assert 0.3 * bound < worst <= bound * (1 + 1e-9)
    worst = max(abs(sumsq(np.where(np.arange(45) == e, new, y)) - sumsq(y)) for e in range(45) for new in (-0.5, 0.5))
    assert worst <= 0.25 * (1 + 1e-12)


def test_wiener_solve_is_least_squares_without_noise_and_zero_under_pure_noise(rng):
    from dptensor.algorithms.completion.dp_als import wiener_solve

    n, r = 200, 3
    K = rng.standard_normal((n, 50, r))
    U = rng.standard_normal((n, r))
    gram = np.einsum("nep,neq->npq", K, K)
    rhs = np.einsum("npq,nq->np", gram, U)
    got = wiener_solve(gram, rhs, 0.0, np.full(n, 50.0), s2=1e-6)
    np.testing.assert_allclose(got, U, rtol=1e-3, atol=1e-3)
    noise = rng.normal(0, 100.0, (n, r))
    plain = np.linalg.solve(gram, noise[:, :, None])[:, :, 0]
    shrunk = wiener_solve(gram, noise, 100.0**2, np.full(n, 50.0), s2=1e-6)
    assert np.linalg.norm(shrunk) < 0.1 * np.linalg.norm(plain)


@_SMALL_STUDY
def test_statistics_mode_records_exact_target_and_release_count(monkeypatch):
    import dptensor.mechanisms as cm

    calls = []
    real = cm.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None, **kw):
        calls.append((float(sensitivity), z))
        return real(value, sensitivity, z, rng, dtype, **kw)

    patch_everywhere(monkeypatch, "gaussian_release", spy)
    data = _study(0)
    acc = PrivacyAccountant(epsilon=5.0, delta=1e-6)
    model = PrivateTensorCompletion(epsilon=1.0, value_range=(0, 1), n_iter=2, accountant=acc, random_state=0)
    model.fit(data["indices"], data["values"])
    assert model.perturbation_ == "statistics"
    cost = model.privacy_cost_
    assert cost.epsilon == pytest.approx(1.0, rel=1e-9) and acc.spent()[0] == pytest.approx(1.0, rel=1e-9)
    # offsets (order + 1) + residual scale (1) at z_o; the spectral Grams (order - 1) at z_g; the
    # projected step (1) and 2 sweeps x order at z
    share, gram, mu = STATS_OFFSET_SHARE, GRAM_SHARE, gdp_mu(1.0, 1e-6)
    z_o = math.sqrt(5) / (mu * math.sqrt(share))
    z_g = math.sqrt(2) / (mu * math.sqrt((1 - share) * gram))
    z = math.sqrt(7) / (mu * math.sqrt((1 - share) * (1 - gram)))
    leaves = list(cost.event.leaves())  # at the default share the offsets are Gaussian releases
    assert [type(leaf) for leaf in leaves] == [GaussianEvent] * 3 and [leaf.count for leaf in leaves] == [5, 2, 7]
    assert [leaf.noise_multiplier for leaf in leaves] == pytest.approx([z_o, z_g, z], rel=1e-12)
    assert cost.noise_multiplier == pytest.approx(z)
    # ... and what was released is exactly that: in order, the offsets (sensitivity 1 in scaled
    # units) and the residual scale (bound^2 = 1/4), whose multipliers share mu_o^2 = 5 / z_o^2
    # (the two sums over every entry GLOBAL_SHARE each, the rows by their public counts), two
    # Grams at z_g, then 7 releases at z.
    offsets_z = np.array([m for _, m in calls[:5]])
    assert np.sum(offsets_z**-2.0) == pytest.approx(5 / z_o**2, rel=1e-12)
    z_global = 1 / math.sqrt(GLOBAL_SHARE * 5 / z_o**2)
    assert offsets_z[[0, 4]] == pytest.approx([z_global] * 2)  # total, residual scale
    assert [m for _, m in calls[5:]] == pytest.approx([z_g] * 2 + [z] * 7)
    assert [s for s, _ in calls[:5]] == [TOTAL_SENSITIVITY] + [1.0] * 3 + [0.25] and all(s > 0 for s, _ in calls[5:])


def test_auto_perturbation_choice_is_public():
    est = PrivateTensorCompletion(epsilon=2.0, value_range=(0, 1))
    assert est._resolved_perturbation() == "statistics"
    assert est.set_params(decomposition="tucker")._resolved_perturbation() == "gradient"
    assert est.set_params(epsilon=np.inf)._resolved_perturbation() is None


def test_dp_als_learns_on_the_100_cubed_study():
    """100^3 rank 3, 10% observed, SNR 1: at epsilon=8 DP-ALS keeps well over half of the
    non-private improvement over the observed-mean predictor (the benchmark gives the curve)."""
    data = make_low_rank_tensor(shape=(100, 100, 100), missing_ratio=0.9, snr=1.0, random_state=0)
    X, y = data["indices"], data["values"]
    Xt, yt = data["test_indices"][:50000], data["test_values"][:50000]
    pad = 3 * data["noise_std"]
    mean = rmse(np.full(len(yt), y.mean()), yt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        best = rmse(PrivateTensorCompletion(n_iter=15, random_state=0).fit(X, y).predict(Xt), yt)
    # 100,000 values: a delta below 1/n (the default 1e-5 is not)
    private = rmse(PrivateTensorCompletion(epsilon=8.0, delta=1e-6, value_range=(-pad, 1 + pad),
                                           random_state=0).fit(X, y).predict(Xt), yt)
    assert (mean - private) / (mean - best) > 0.5


@_SMALL_STUDY
def test_verbose_prints_progress_and_nothing_data_dependent_when_private(capsys):
    data = _study(0)
    PrivateTensorCompletion(epsilon=2.0, value_range=(0, 1), verbose=1, random_state=0).fit(
        data["indices"], data["values"])
    private = capsys.readouterr().out
    assert private.count("done") == 2 and "RMSE" not in private
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        PrivateTensorCompletion(n_iter=3, tol=0, verbose=1, random_state=0).fit(data["indices"], data["values"])
    public = capsys.readouterr().out
    assert public.count("training RMSE") == 3


@pytest.mark.parametrize("bias", [False, True])
def test_mode_sorted_normal_equations_match_per_row_sums(bias, rng):
    """The reduceat normal equations equal the per-row sums computed entry by entry."""
    shape = (6, 5, 4)
    X = np.stack(np.unravel_index(rng.choice(120, 50, replace=False), shape), axis=1)
    obs = Observations(X, shape)
    K = rng.standard_normal((50, 3))
    base = rng.standard_normal(50)
    for m in range(3):
        L = obs.layout(m)
        gram, rhs = L.normal_equations(np.ascontiguousarray(K[L.perm].T), base[L.perm], bias=bias)
        Z = np.hstack([K, np.ones((50, 1))]) if bias else K
        for i in range(shape[m]):
            rows = X[:, m] == i
            np.testing.assert_allclose(gram[i], Z[rows].T @ Z[rows], atol=1e-12)
            np.testing.assert_allclose(rhs[i], Z[rows].T @ base[rows], atol=1e-12)


def test_statistics_mode_without_noise_recovers_exact_low_rank():
    # perturbation="statistics" at epsilon=inf: the DP-ALS path (spectral start + 2 sweeps) without noise.
    # Not exact (residual clipping, design clipping and shrinkage bias it) but it learns.
    data = _study(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        model = PrivateTensorCompletion(perturbation="statistics", value_range=(0, 1), random_state=0)
        model.fit(data["indices"], data["values"])
    mean = rmse(np.full(len(data["test_values"]), data["values"].mean()), data["test_values"])
    assert model.n_iter_ == 2 and rmse(model.predict(data["test_indices"]), data["test_values"]) < 0.5 * mean


@pytest.mark.parametrize("kron", [True, False])
@pytest.mark.parametrize("layout", ["auto", "sparse"])
def test_spectral_projected_step_has_sensitivity_d_c(rng, kron, layout):
    """Brute force on the warm start's mode-0 release: one clipped value moves the stacked
    right-hand sides by at most D C, C the public bound of the designs (Kronecker, or with many
    modes the bases' elementwise products), on the grid and on the sparse layout."""
    from dptensor.algorithms.completion.spectral import projected_statistics

    shape, clip = (5, 4, 6), 0.15
    X = np.stack(np.unravel_index(rng.choice(120, 50, replace=False), shape), axis=1)
    obs = Observations(X, shape, layout=layout)
    t = np.clip(rng.normal(0, 0.2, 50), -clip, clip)
    bases = [None] + [np.linalg.qr(rng.standard_normal((n, 2)))[0] for n in shape[1:]]
    _, base, bound = projected_statistics(obs, t, bases, kron=kron)
    assert base.shape == (5, 4 if kron else 2)
    D = min(1.0, 2 * clip)
    worst = 0.0
    for e in range(50):
        for new in (-clip, clip):
            _, other, bound2 = projected_statistics(obs, np.where(np.arange(50) == e, new, t), bases,
                                                    kron=kron)
            assert bound2 == bound
            worst = max(worst, np.linalg.norm(other - base))
    assert 0.3 * D * bound < worst <= D * bound * (1 + 1e-9)


@_SMALL_STUDY
def test_private_fit_holds_only_released_values_and_public_parameters():
    data = _study(0)
    model = PrivateTensorCompletion(epsilon=2.0, value_range=(0, 1), verbose=0, random_state=0)
    model.fit(data["indices"], data["values"])
    fitted = {k for k in vars(model) if k.endswith("_") and not k.startswith("_")}
    # factor_modes_ is public: a private fit's "auto" is every mode, whatever the data
    assert model.factor_modes_ == tuple(range(len(model.shape_)))
    assert fitted == {"factors_", "core_", "intercept_", "biases_", "shape_", "n_features_in_", "n_iter_",
                      "factor_modes_",
                      "value_range_", "perturbation_", "privacy_cost_", "privacy_unit_",
                      "start_eigenvalues_", "start_eigenvalues_noise_", "component_rms_",
                      "component_rms_noise_", "offsets_rms_", "offsets_rms_noise_"}
    assert not any(isinstance(v, (np.random.Generator, np.random.RandomState)) for v in vars(model).values())


@_SMALL_STUDY
@pytest.mark.parametrize("perturbation", ["statistics", "gradient"])
def test_private_offsets_stay_in_range_with_few_values(perturbation):
    # Three values at epsilon = 0.5: the noisy mean is clamped into the public range (post-processing).
    X, y = np.array([[0, 0], [1, 1], [0, 1]]), np.array([1.0, 2.0, 3.0])
    for seed in range(5):
        model = PrivateTensorCompletion(perturbation=perturbation, epsilon=0.5, value_range=(1, 5),
                                        random_state=seed).fit(X, y)
        assert 1.0 <= model.intercept_ <= 5.0
        assert all(np.all(np.abs(b) <= 4.0 + 1e-9) for b in model.biases_)


@_SMALL_STUDY
def test_private_fit_on_tiny_data_finishes_after_its_spend():
    """Two observed values: the private spectral start's small CP could hit a singular system
    after the budget was spent (about 30% of seeds). A degenerate restart is now skipped, and the
    fit still returns finite predictions."""
    X, y = np.array([[5, 4, 0], [2, 0, 0]]), np.array([-0.468, -0.746])
    for seed in range(20):
        acc = PrivacyAccountant(2.0, delta=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            model = PrivateTensorCompletion(rank=2, epsilon=1.0, value_range=(-3, 3), accountant=acc,
                                            random_state=seed).fit(X, y)
        assert np.all(np.isfinite(model.predict(X))) and len(acc.history()) == 1


# ----------------------------------------------------------------------------- factor_modes, offset_share
def _ratings_like(seed, shape=(60, 80, 6), rank=2, observed=0.3, noise=0.05):
    """A user x item low-rank interaction plus user, item and day offsets: the day has no factor."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(0, 0.5, (shape[0], rank)), rng.normal(0, 0.5, (shape[1], rank))
    b = [rng.normal(0, 0.3, n) for n in shape]
    cells = rng.choice(np.prod(shape), int(observed * np.prod(shape)), replace=False)
    X = np.stack(np.unravel_index(cells, shape), axis=1)
    truth = np.einsum("er,er->e", U[X[:, 0]], V[X[:, 1]]) + sum(b[m][X[:, m]] for m in range(3))
    y = truth + rng.normal(0, noise, len(truth))
    n = len(y) * 4 // 5
    return X[:n], y[:n], X[n:], truth[n:]


@NON_PRIVATE
def test_factor_modes_fits_a_user_item_model_with_day_offsets():
    X, y, Xt, truth = _ratings_like(0)
    model = PrivateTensorCompletion(rank=2, factor_modes=(0, 1), random_state=0).fit(X, y)
    assert np.array_equal(model.factors_[2], np.ones_like(model.factors_[2]))  # no day factor
    err = rmse(model.predict(Xt), truth)
    assert err < 0.2 * np.std(truth), err
    # A day factor cannot help here; offsets alone are far worse than the fitted interaction.
    offsets_only = model.intercept_ + sum(model.biases_[m][Xt[:, m]] for m in range(3))
    assert err < 0.5 * rmse(offsets_only, truth)


@pytest.mark.parametrize("perturbation", ["statistics", "gradient"])
def test_factor_modes_private_fit_releases_only_the_factor_modes(perturbation, monkeypatch):
    """A fixed mode is never queried: DP-ALS makes one right-hand-side release per mode with a
    factor per sweep and one spectral Gram fewer; DP gradient steps leave the fixed factor out of
    their joint release. The recorded event is the plan's, and the fixed factor stays all ones."""
    import dptensor.mechanisms as cm

    shapes = []
    real = cm.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None, **kw):
        shapes.append(np.shape(value))
        return real(value, sensitivity, z, rng, dtype, **kw)

    patch_everywhere(monkeypatch, "gaussian_release", spy)
    X, y, _, _ = _ratings_like(1)
    acc = PrivacyAccountant(epsilon=10.0, delta=1e-6)
    model = PrivateTensorCompletion(rank=2, perturbation=perturbation, factor_modes=(0, 1), epsilon=4.0,
                                    value_range=(-3, 3), n_iter=2, accountant=acc, random_state=0)
    model.fit(X, y)
    assert np.array_equal(model.factors_[2], np.ones((6, 2)))
    full = PrivateTensorCompletion(rank=2, perturbation=perturbation, epsilon=4.0, value_range=(-3, 3),
                                   n_iter=2, random_state=0)
    assert model.privacy_cost_.epsilon == pytest.approx(4.0, rel=1e-9)
    assert model.privacy_cost(len(y), 3).event == model.privacy_cost_.event
    if perturbation == "statistics":
        n_queries = [leaf.count for leaf in model.privacy_cost_.event.leaves()]
        full_queries = [leaf.count for leaf in full.privacy_cost(len(y), 3).event.leaves()]
        assert n_queries == [5, 1, 1 + 2 * 2] and full_queries == [5, 2, 1 + 2 * 3]
        # offsets (total + 3 modes), residual scale, one Gram (item mode: 80 x 79 / 2 upper
        # entries), then user-mode rows on the projected designs and 2 sweeps x 2 modes of rows
        assert len(shapes) == 5 + 1 + 5 and shapes[5] == (80 * 79 // 2,)
        assert all(sh[0] in (60, 80) for sh in shapes[6:])
    else:
        assert len(shapes) == 4  # only the offsets go through the single releases


def test_factor_modes_and_offset_share_are_validated():
    X, y, _, _ = _ratings_like(2)
    for bad in [(0,), (0, 0), (0, 3), (-1, 1), ("a", 1)]:
        with pytest.raises((ValueError, TypeError), match="factor_modes"):
            PrivateTensorCompletion(factor_modes=bad).fit(X, y)
    with pytest.raises(ValueError, match="cp"):
        PrivateTensorCompletion(decomposition="tucker", factor_modes=(0, 1)).fit(X, y)
    for bad in (0.0, 1.0, -0.5, "half"):
        with pytest.raises(ValueError, match="offset_share"):
            PrivateTensorCompletion(offset_share=bad, epsilon=1.0, value_range=(-3, 3)).fit(X, y)
    # the share moves budget between the offsets and the factors, at the same total epsilon
    a = PrivateTensorCompletion(epsilon=1.0, value_range=(-3, 3), offset_share=0.9).privacy_cost(len(y), 3)
    b = PrivateTensorCompletion(epsilon=1.0, value_range=(-3, 3), offset_share=0.1).privacy_cost(len(y), 3)
    assert a.epsilon == pytest.approx(b.epsilon, rel=1e-9)
    z_a, z_b = ([leaf.noise_multiplier for leaf in c.event.leaves()] for c in (a, b))
    # leaves: offsets and residual scale, spectral Grams, right-hand sides
    assert z_a[0] < z_b[0] and z_a[1] > z_b[1] and z_a[2] > z_b[2]


@pytest.mark.parametrize("cap", [None, 3])
def test_spectral_gram_over_factor_modes_keeps_its_sensitivity(cap, rng):
    """With a mode without a factor, the unfolding's columns are indexed by the modes with a factor
    only, so several entries share a cell: the first of each cell is kept and Delta still holds
    (brute force over every replacement by the range's ends)."""
    from dptensor.algorithms.completion.spectral import unfolding_gram

    shape, clip = (5, 4, 3), 0.2
    X = np.stack(np.unravel_index(rng.choice(60, 50, replace=False), shape), axis=1)  # cells repeat over mode 2
    obs = Observations(X, shape)
    y = rng.uniform(-0.5, 0.5, 50)
    assert len(np.unique(X[:, :2], axis=0)) < 50

    def released(values):
        M, sens = unfolding_gram(obs, values, 0, clip, cap, others=[1])
        return M[np.triu_indices(5, 1)], sens

    base, bound = released(y)
    worst = 0.0
    for e in range(50):
        for new in (-0.5, 0.5):
            other, bound2 = released(np.where(np.arange(50) == e, new, y))
            assert bound2 == bound
            worst = max(worst, np.linalg.norm(other - base))
    assert 0.3 * bound < worst <= bound * (1 + 1e-9)


@NON_PRIVATE
def test_statistics_path_with_factor_modes_recovers_the_interaction_without_noise():
    """The DP-ALS path (spectral start over the modes with a factor, then sweeps) with the noise
    switched off (epsilon=inf) learns the user x item interaction, not only the offsets."""
    X, y, Xt, truth = _ratings_like(3, observed=0.5)
    model = PrivateTensorCompletion(rank=2, perturbation="statistics", factor_modes=(0, 1), n_iter=4,
                                    value_range=(-3, 3), random_state=0).fit(X, y)
    assert all(np.all(np.isfinite(U)) for U in model.factors_)
    offsets_only = model.intercept_ + sum(model.biases_[m][Xt[:, m]] for m in range(3))
    assert rmse(model.predict(Xt), truth) < 0.6 * rmse(offsets_only, truth)
    # and with (little) noise, through the private spectral start and sweeps
    private = PrivateTensorCompletion(rank=2, factor_modes=(0, 1), n_iter=4, epsilon=200.0, offset_share=0.5,
                                      value_range=(-3, 3), random_state=0).fit(X, y)
    offsets_only = private.intercept_ + sum(private.biases_[m][Xt[:, m]] for m in range(3))
    assert rmse(private.predict(Xt), truth) < 0.8 * rmse(offsets_only, truth)


def test_spectral_start_with_a_fixed_mode_stays_on_the_scale_of_the_data(rng):
    """A mode without a factor enters the projected step as one public constant direction: the
    released start keeps that factor all ones and is on the data's scale."""
    from dptensor.algorithms.completion.offsets import OffsetNoise, row_offsets
    from dptensor.algorithms.completion.model import init_model
    from dptensor.algorithms.completion.spectral import spectral_start

    X, y, _, _ = _ratings_like(4, observed=0.5)
    ys = np.clip(y, -3, 3) / 6
    obs = Observations(X, (60, 80, 6))
    model = init_model(obs.shape, 3, "cp", rng, fixed=(2,))
    model.intercept, model.biases = row_offsets(obs, ys, noise=OffsetNoise("gaussian", np.ones(4)), rng=rng)
    spectral_start(obs, ys, model, noise_multiplier=1.0, rng=rng, clip=0.3, s2=0.01)
    f = np.einsum("er,er->e", model.factors[0][X[:, 0]], model.factors[1][X[:, 1]])
    assert np.array_equal(model.factors[2], np.ones((6, 3)))
    assert np.all(np.isfinite(f)) and np.std(f) < 1.0  # the values span 1


def test_offsets_group_is_priced_as_its_releases(rng):
    """Gaussian offsets: the releases get different multipliers (public counts) with sum 1/z_k^2 =
    n_o / z_o^2; the recorded GaussianEvent(z_o, n_o) prices exactly the same: Gaussian
    mechanisms compose into one Gaussian mechanism of that mu, under every accounting. Laplace
    offsets: different epsilons summing to the group's (pure-DP composition adds them). Either
    way the noise on a typical row mean is the same fraction of its sampling error in every mode."""
    from dptensor.algorithms.completion.offsets import GLOBAL_SHARE, offset_noise

    X = np.stack([rng.integers(0, 50, 3000), rng.zipf(1.6, 3000) % 400, rng.integers(0, 20, 3000)], axis=1)
    obs = Observations(X, (50, 400, 20))
    typical = np.array([np.median(c[c > 0]) for c in obs.counts])
    z_o = 3.0
    for n_global in (1, 2):  # the total (and the statistics mode's residual scale) first and last
        n_o = 3 + n_global
        gauss = offset_noise(obs, "gaussian", z_o, n_global=n_global)
        zs = gauss.levels
        assert len(zs) == n_o and np.sum(zs**-2.0) == pytest.approx(n_o / z_o**2, rel=1e-12)
        # each sum over every entry gets GLOBAL_SHARE of the group's mu^2
        assert zs[0] ** -2 == pytest.approx(GLOBAL_SHARE * n_o / z_o**2, rel=1e-12)
        assert n_global == 1 or zs[-1] == zs[0]
        for delta in (1e-5, 1e-8):
            listed = epsilon_of(ComposedEvent([GaussianEvent(float(z), 1) for z in zs]), delta)
            assert listed == pytest.approx(epsilon_of(GaussianEvent(z_o, n_o), delta), rel=1e-9)
        laplace = offset_noise(obs, "laplace", 0.7, n_global=n_global)
        eps = laplace.levels
        assert len(eps) == n_o and eps.sum() == pytest.approx(0.7, rel=1e-12)
        assert eps[0] == pytest.approx(GLOBAL_SHARE * 0.7) and (n_global == 1 or eps[-1] == eps[0])
        for noise in (gauss, laplace):
            # noise std on a typical row mean over its sampling error (s / sqrt(c_m)): equal
            ratio = np.sqrt([noise.variance(m + 1) for m in range(3)]) / typical / typical ** -0.5
            assert np.ptp(ratio) == pytest.approx(0.0, abs=1e-9 * ratio.max())
            assert noise.variance(2) == min(noise.variance(m + 1) for m in range(3))  # sparsest: least


def test_offsets_mechanism_is_the_less_noisy_for_the_plan():
    """The offsets are Gaussian when they hold a small share of the budget (Gaussian shares
    compose exactly) and Laplace when they hold most of it (each entry touches one coordinate of
    each release, where Laplace noise is smaller): both at the target exactly, the factors'
    Gaussian releases at (1 - offset_share) of mu^2 either way."""
    for pert in ("gradient", "statistics"):
        costs = {share: PrivateTensorCompletion(perturbation=pert, epsilon=1.0, delta=1e-6, value_range=(1, 5),
                                                offset_share=share).privacy_cost(5000, 3)
                 for share in (0.1, 0.5, 0.99)}
        first = {share: list(c.event.leaves())[0] for share, c in costs.items()}
        assert isinstance(first[0.1], GaussianEvent) and isinstance(first[0.5], GaussianEvent)
        assert isinstance(first[0.99], LaplaceEvent) and 0.8 < first[0.99].epsilon < 1.0
        for share, cost in costs.items():
            assert cost.epsilon == pytest.approx(1.0, rel=1e-9) and cost.epsilon <= 1.0 + 1e-12
            factors = [leaf for leaf in list(cost.event.leaves())[1:]]
            mu_f2 = sum(leaf.count / leaf.noise_multiplier**2 for leaf in factors)
            assert mu_f2 == pytest.approx((1 - share) * gdp_mu(1.0, 1e-6) ** 2, rel=1e-9)
        # the Laplace offsets are less noisy than Gaussian ones with the same factors' budget
        n_o = 4 + (pert == "statistics")
        lap_var = 2 * (n_o / first[0.99].epsilon) ** 2
        assert lap_var < n_o / (0.99 * gdp_mu(1.0, 1e-6) ** 2)


# ----------------------------------------------------------------------------- dense layout
def _sample(rng, shape, share):
    cells = math.prod(shape)
    X = np.stack(np.unravel_index(rng.choice(cells, int(share * cells), replace=False), shape), axis=1)
    return X, rng.uniform(-0.5, 0.5, len(X))


@pytest.mark.parametrize("bias", [False, True])
def test_dense_normal_equations_match_per_row_sums(bias, rng):
    """The grid's normal equations (designs indexed by unfolding column, offsets per column and
    per row) equal the per-row sums computed entry by entry."""
    from dptensor.algorithms.completion.observations import DenseGrid

    shape = (6, 5, 4)
    X, y = _sample(rng, shape, 0.4)
    grid = DenseGrid(X, shape)
    for m in range(3):
        others = [k for k in range(3) if k != m]
        n_cols = math.prod(shape[k] for k in others)
        Z, col_off = rng.standard_normal((n_cols, 3)), rng.standard_normal(n_cols)
        row_off = rng.standard_normal(shape[m])
        col = np.ravel_multi_index(tuple(X[:, k] for k in others), [shape[k] for k in others])
        counts = np.bincount(X[:, m], minlength=shape[m]).astype(float)
        gram, rhs = grid.normal_equations(m, Z, grid.scatter(y), counts, col_off, row_off, bias=bias)
        design = np.hstack([Z[col], np.ones((len(y), 1))]) if bias else Z[col]
        base = y - col_off[col] - row_off[X[:, m]]
        for i in range(shape[m]):
            rows = X[:, m] == i
            np.testing.assert_allclose(gram[i], design[rows].T @ design[rows], atol=1e-12)
            np.testing.assert_allclose(rhs[i], design[rows].T @ base[rows], atol=1e-12)


def test_layout_choice_is_public_and_forced_layouts_check_their_input(rng):
    from dptensor.algorithms.completion.observations import DENSE_RATIO
    from dptensor.algorithms.completion.model import init_model

    shape = (10, 10, 10)
    X, _ = _sample(rng, shape, 0.5)
    assert Observations(X, shape).grid() is not None
    assert Observations(X, shape, layout="sparse").grid() is None
    few = X[: 1000 // (DENSE_RATIO + 1)]
    assert Observations(few, shape).grid() is None  # too few entries for CP ...
    tucker = init_model(shape, 2, "tucker", rng)
    assert Observations(few, shape).grid(tucker) is not None  # ... not for Tucker
    assert Observations(few, shape, layout="dense").grid() is not None
    twice = np.vstack([X, X[:1]])
    assert Observations(twice, shape).grid() is None  # a repeated position: the grid holds one value
    with pytest.raises(ValueError, match="distinct"):
        Observations(twice, shape, layout="dense").grid()
    with pytest.raises(ValueError, match="layout"):
        Observations(X, shape, layout="grid")


@pytest.mark.parametrize("shape", [(8, 7, 6), (5, 4, 3, 4), (9, 11)])
@pytest.mark.parametrize("kind", ["cp", "tucker"])
@pytest.mark.parametrize("fit_biases", [True, False])
def test_dense_and_sparse_als_fit_alike(shape, kind, fit_biases, rng):
    from dptensor.algorithms.completion.als import als
    from dptensor.algorithms.completion.model import init_model

    X, _ = _sample(rng, shape, 0.5)
    truth = [rng.standard_normal((n, 2)) for n in shape]  # a low-rank signal plus noise
    y = np.prod([U[X[:, m]] for m, U in enumerate(truth)], axis=0).sum(axis=1) + 0.1 * rng.standard_normal(len(X))
    fits = []
    for layout in ("sparse", "dense"):
        obs = Observations(X, shape, layout=layout)
        model = init_model(shape, 2, kind, np.random.default_rng(1))
        model.intercept, model.biases = row_offsets(obs, y, shrink=0.1)
        history = []
        als(obs, y, model, reg=0.05, reg_core=0.05, n_iter=6, tol=0, fit_biases=fit_biases, prior_var=0.1,
            warmup=2, history=history)
        fits.append((model, history))
    (a, ha), (b, hb) = fits
    for u, v in zip(a.factors + a.biases, b.factors + b.biases):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-10)
    if kind == "tucker":
        np.testing.assert_allclose(a.core, b.core, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ha, hb, rtol=1e-10)
    assert ha[-1] < 0.5 * np.std(y)  # the interactions were learnt


@pytest.mark.parametrize("kind, perturbation", [("cp", "statistics"), ("cp", "gradient"), ("tucker", "gradient"),
                                                ("cp", "input"), ("tucker", None)])
def test_dense_and_sparse_layouts_release_the_same_values(kind, perturbation, monkeypatch):
    """Same seed, same data: every fitted (released) value agrees whichever layout computed it,
    and so does the recorded spend."""
    import functools

    data = _study(0, shape=(12, 10, 8))
    private = perturbation is not None

    def fit(layout, seed):
        patch_everywhere(monkeypatch, "Observations", functools.partial(Observations, layout=layout))
        est = PrivateTensorCompletion(decomposition=kind, perturbation=perturbation, rank=2, n_iter=4,
                                      epsilon=1e3 if private else np.inf, value_range=(0, 1) if private else None,
                                      random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return est.fit(data["indices"], data["values"])

    # The first seed whose 4-sweep fit is not constant (which seeds are depends on the samplers'
    # path: with numba they draw other values), so that the comparison has content.
    seed = next(s for s in range(20) if np.ptp(fit("sparse", s).predict(data["test_indices"])) > 1e-3)
    a, b = fit("sparse", seed), fit("dense", seed)
    for u, v in zip(a.factors_ + a.biases_, b.factors_ + b.biases_):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-10)
    assert a.intercept_ == pytest.approx(b.intercept_, abs=1e-12)
    if kind == "tucker":
        np.testing.assert_allclose(a.core_, b.core_, rtol=0, atol=1e-10)
    assert a.privacy_cost_ == b.privacy_cost_
    assert np.ptp(a.predict(data["test_indices"])) > 1e-3  # not a constant fit: the comparison has content


@pytest.mark.parametrize("perturbation", [None, "input"])
def test_tucker_sweeps_passes_over_cells_or_entries_release_the_same_values(perturbation,
                                                                            monkeypatch):
    """The order-3 Tucker sweep on the grid gives the same fit (to rounding) whether its passes
    run over the grid's cells or over the observed entries."""
    from dptensor.algorithms.completion import tucker

    data = _study(0, shape=(12, 10, 8))
    private = perturbation is not None

    def fit(ratio, seed):
        monkeypatch.setattr(tucker, "SPARSE_PASS_RATIO", ratio)
        est = PrivateTensorCompletion(decomposition="tucker", perturbation=perturbation, rank=2,
                                      n_iter=8, epsilon=1e3 if private else np.inf,
                                      value_range=(0, 1) if private else None, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return est.fit(data["indices"], data["values"])

    # the first seed whose fit is not constant, so that the comparison has content
    seed = next(s for s in range(20) if np.ptp(fit(0, s).predict(data["test_indices"])) > 1e-3)
    cells, entries = fit(10**9, seed), fit(0, seed)
    for u, v in zip(cells.factors_ + cells.biases_, entries.factors_ + entries.biases_):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-10)
    np.testing.assert_allclose(cells.core_, entries.core_, rtol=0, atol=1e-10)
    assert np.ptp(cells.predict(data["test_indices"])) > 1e-3  # the comparison has content


@_SMALL_STUDY
def test_predictions_are_clipped_to_the_value_range():
    """A noisy fit can predict outside the public range; clipping there is post-processing and can
    only bring a prediction closer to a value, which lies in the range."""
    X, y, Xt, yt = _ratings_like(5)
    model = PrivateTensorCompletion(perturbation="statistics", offset_share=1e-6, epsilon=1.0, value_range=(-3, 3),
                                    random_state=0).fit(X, y)
    raw = predict(model._model(), Xt)
    pred = model.predict(Xt)
    assert np.array_equal(pred, np.clip(raw, -3, 3))
    assert raw.min() < -3 or raw.max() > 3  # the clip was needed
    assert rmse(pred, np.clip(yt, -3, 3)) <= rmse(raw, np.clip(yt, -3, 3))


@pytest.mark.parametrize("fit_biases", [True, False])
def test_dense_tucker_sum_of_squares_from_the_core_equations(fit_biases, rng):
    """The Tucker core step's sum of squared residuals from the normal equations (no pass forming
    the model at every cell) equals the direct sum over the observed cells."""
    from dptensor.algorithms.completion.design import _grid_core_step, _grid_ssr, grid_design, grid_value_sums
    from dptensor.algorithms.completion.model import init_model

    shape = (7, 6, 5)
    X, y = _sample(rng, shape, 0.6)
    obs = Observations(X, shape)
    grid = obs.grid()
    model = init_model(shape, 2, "tucker", rng, scale=0.5)
    model.intercept = 0.1
    model.biases = [rng.normal(0, 0.2, n) if fit_biases else np.zeros(n) for n in shape]
    Yg = grid.scatter(y)
    ssr = _grid_core_step(model, grid, Yg, 0.01, grid_value_sums(grid, Yg, obs.counts[0]))
    assert ssr == pytest.approx(_grid_ssr(grid, Yg, model, grid_design(model, 0)), rel=1e-9)


@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("biases", ["fitted", "fixed", "none"])
@pytest.mark.parametrize("passes", ["cells", "entries"])
def test_order3_tucker_sweep_matches_the_general_dense_equations(rank, biases, passes, rng,
                                                                 monkeypatch):
    """The order-3 Tucker sweep (two updates per pass over the grid, or over the observed entries)
    gives every mode's normal equations, the core's solution and the sum of squared residuals of
    the general dense layout."""
    import copy

    from dptensor.algorithms.completion import tucker
    from dptensor.algorithms.completion.tucker import TuckerSweep3, _kron_index

    monkeypatch.setattr(tucker, "SPARSE_PASS_RATIO", 0 if passes == "entries" else 10**9)
    from dptensor.algorithms.completion.design import _grid_core_step, _grid_offsets, _row_bias, grid_design, grid_value_sums
    from dptensor.algorithms.completion.model import init_model

    shape = (7, 6, 5)
    X, y = _sample(rng, shape, 0.6)
    obs = Observations(X, shape, layout="dense")
    grid = obs.grid()
    Yg = grid.scatter(y)
    model = init_model(shape, rank, "tucker", rng, scale=0.5)
    model.intercept = 0.1
    model.biases = [] if biases == "none" else [rng.normal(0, 0.2, n) for n in shape]
    fit = biases == "fitted"
    sweep = TuckerSweep3(grid, Yg, obs.counts)
    assert (sweep._sparse is not None) == (passes == "entries")
    for m in range(3):
        # each mode's equations at the factors the previous updates left (as in a sweep)
        gram, rhs = sweep.normal_equations(model, m, fit)
        ref_gram, ref_rhs = grid.normal_equations(m, grid_design(model, m), Yg, obs.counts[m],
                                                  _grid_offsets(model, m), None if fit else _row_bias(model, m),
                                                  bias=fit)
        np.testing.assert_allclose(gram, ref_gram, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(rhs, ref_rhs, rtol=1e-10, atol=1e-10)
        model.factors[m] = rng.standard_normal(model.factors[m].shape)
        if fit:
            model.biases[m] = rng.normal(0, 0.2, shape[m])
    ref = copy.deepcopy(model)
    ssr = sweep.core_step(model, 0.01)
    ref_ssr = _grid_core_step(ref, grid, Yg, 0.01, grid_value_sums(grid, Yg, obs.counts[0]))
    np.testing.assert_allclose(model.core, ref.core, rtol=1e-9, atol=1e-10)
    assert ssr == pytest.approx(ref_ssr, rel=1e-9)
    # the cached Kronecker index holds a (rank, rank) map per mode, never rank^6 entries (400 MB at 16)
    assert [i.size for i in _kron_index(rank, 3)] == [rank**2] * 3


def test_tucker_sweeps_sparse_passes_hold_the_grids_unfoldings(rng):
    """The sparse matrices of the order-3 Tucker sweep's passes over the entries are the mask's and
    the values' unfoldings, each row's columns ascending (the order the grid's products sum), and
    the sums it takes from the entries are the grid's."""
    from dptensor.algorithms.completion.tucker import _entry_passes

    shape = (7, 6, 5)
    X, y = _sample(rng, shape, 0.3)
    grid = Observations(X, shape, layout="dense").grid()
    Yg = grid.scatter(y)
    ((m_k, y_k), (m_i, y_i)), pair_counts, row_sums, yy = _entry_passes(grid, Yg)
    for T, by_k, by_i in ((grid.mask, m_k, m_i), (Yg, y_k, y_i)):
        np.testing.assert_array_equal(by_k.toarray(), T.reshape(42, 5))
        np.testing.assert_array_equal(by_i.toarray(), T.reshape(7, 30).T)
        assert by_k.has_sorted_indices and by_i.has_sorted_indices
    for (a, b), counts in pair_counts.items():
        np.testing.assert_array_equal(counts, grid.mask.sum(axis=3 - a - b))
    for m in range(3):
        np.testing.assert_allclose(row_sums[m], Yg.sum(axis=tuple({0, 1, 2} - {m})), rtol=1e-12)
    assert yy == pytest.approx(float(np.vdot(Yg, Yg)), rel=1e-12)


# ----------------------------------------------------------------------------- rounding
def _record_roundings(monkeypatch):
    """Every release of a completion fit, in order: ``(kind, sensitivity, rounding)``; and the
    clipping levels the DP-ALS and implicit paths chose (from their released residual scale)."""
    import dptensor.mechanisms as cm

    log, levels = [], {}
    for module in (cm,):
        for name in ("gaussian_release", "laplace_release"):
            real = getattr(module, name)

            def spy(value, sensitivity, level, rng, dtype=None, *, rounding, _real=real,
                    _name=name):
                log.append((_name, float(sensitivity), rounding))
                return _real(value, sensitivity, level, rng, dtype, rounding=rounding)
            patch_everywhere(monkeypatch, name, spy)
    real_joint = cm.joint_gaussian_release

    def joint(parts, sensitivity, z, rng, *, rounding):
        log.append(("joint", float(sensitivity), rounding))
        return real_joint(parts, sensitivity, z, rng, rounding=rounding)
    patch_everywhere(monkeypatch, "joint_gaussian_release", joint)
    real_scale = offsets_and_scale

    def scale(*args):
        out = real_scale(*args)
        levels["clip"] = out[1]
        return out
    patch_everywhere(monkeypatch, "offsets_and_scale", scale)
    real_start = spectral_start

    def start(*args, **kw):
        levels["gram_clip"] = kw["gram_clip"]
        return real_start(*args, **kw)
    patch_everywhere(monkeypatch, "spectral_start", start)
    return log, levels


def _check_rounding(rounding, total, terms):
    assert rounding is not None and rounding.terms == terms
    assert rounding.total == pytest.approx(total, rel=1e-12)
    # what the mechanism adds to the sensitivity: 2 gamma_terms total, gamma_m = m u / (1 - m u)
    u = 2.0**-53
    assert rounding.allowance() == pytest.approx(2 * terms * u / (1 - terms * u) * total, rel=1e-9)


@_SMALL_STUDY
def test_statistics_releases_name_their_rounding_from_public_counts(monkeypatch):
    """Every DP-ALS release names the rounding of its float sums, counted here from Omega alone:
    n entries, each adding at most R (the values' and residuals' public bounds, the clipped designs
    C times the clipping level), the longest sum a row's count (n for sums over every entry)."""
    data = _study(0)
    X, n = data["indices"], len(data["values"])
    longest = [int(np.bincount(X[:, m]).max()) for m in range(3)]
    log, levels = _record_roundings(monkeypatch)
    PrivateTensorCompletion(epsilon=1.0, value_range=(0, 1), n_iter=2,
                            random_state=0).fit(X, data["values"])
    assert [kind for kind, _, _ in log] == ["gaussian_release"] * (1 + 3 + 1 + 2 + 1 + 2 * 3)
    clip, gram_clip = levels["clip"], levels["gram_clip"]
    (_, _, total), *rows, (_, _, scale) = log[:5]
    _check_rounding(total, 0.75 * n, n)  # (y, min(y^2, 1/4)): 1/2 + 1/4 per value
    for m, (_, _, rounding) in enumerate(rows):  # value, mean and m row effects: 1/2 + 1/2 + m
        _check_rounding(rounding, (1 + m) * n, longest[m])
    _check_rounding(scale, n / 4, n)
    for m, (_, _, rounding) in zip((1, 2), log[5:7]):  # sum_c ||y_c||^2 <= n gram_clip^2
        _check_rounding(rounding, n * gram_clip**2, longest[m])
    for m, (_, sens, rounding) in zip((0, 0, 1, 2, 0, 1, 2), log[7:]):
        design = sens / min(1.0, 2 * clip)  # the public design bound C (sensitivity D C)
        _check_rounding(rounding, n * design * clip, longest[m])


@pytest.mark.parametrize("kind", ["cp", "tucker"])
def test_gradient_steps_name_their_rounding(kind, monkeypatch):
    """A DP step's joint release: n clipped gradients of norm at most clip_norm; the longest sum a
    row's count, or for Tucker the core's n entries and one product per other mode after the
    partial sums over mode 0 (on the dense layout)."""
    data = _study(0)
    X, n = data["indices"], len(data["values"])
    log, _ = _record_roundings(monkeypatch)
    PrivateTensorCompletion(perturbation="gradient", decomposition=kind, epsilon=2.0,
                            value_range=(0, 1), clip_norm=0.25, n_iter=3,
                            random_state=0).fit(X, data["values"])
    steps = [rounding for name, _, rounding in log if name == "joint"]
    assert len(steps) == 3
    terms = n + 2 if kind == "tucker" else max(int(np.bincount(X[:, m]).max()) for m in range(3))
    for rounding in steps:
        _check_rounding(rounding, n * 0.25, terms)


def test_implicit_statistic_names_its_rounding_and_values_on_their_own_none(monkeypatch):
    """The implicit statistic: n clipped residuals times designs of norm at most sqrt(2), summed
    over up to every entry with one product after a partial sum. Input perturbation releases each
    value on its own (no sum), and output perturbation's bound is unproven: neither has one."""
    X, y, _, _ = _ratings_like(0)
    log, levels = _record_roundings(monkeypatch)
    PrivateTensorCompletion(rank=2, perturbation="implicit", factor_modes=(0, 1), epsilon=3.0,
                            value_range=(-3, 3), random_state=0).fit(X, y)
    name, _, rounding = log[-1]
    assert name == "gaussian_release" and len(log) == 1 + 3 + 1 + 1
    _check_rounding(rounding, len(y) * math.sqrt(2) * levels["clip"], len(y) + 1)
    for perturbation in ("input", "output"):
        log.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            PrivateTensorCompletion(rank=2, perturbation=perturbation, epsilon=3.0,
                                    value_range=(-3, 3), fit_intercept=False, n_iter=2,
                                    random_state=0).fit(X, y)
        assert [(name, rounding) for name, _, rounding in log] == [("laplace_release", None)]


def test_residual_scale_float_sum_moves_past_its_sensitivity_within_the_allowance(rng, monkeypatch):
    """Brute force on the residual scale's float sum: replacing one value (its term 0 -> 1/4, the
    sensitivity) moves the computed sum by more than 1/4 for some entries -- rounding, which the
    exact sensitivity does not cover -- and never by more than 1/4 plus the allowance of the
    rounding the release names."""
    import dptensor.mechanisms as cm
    from dptensor.algorithms.completion.offsets import OffsetNoise, residual_scale
    from dptensor.algorithms.completion.model import init_model, offsets

    shape = (6, 5, 4)
    X = np.stack(np.unravel_index(rng.choice(120, 90, replace=False), shape), axis=1)
    obs = Observations(X, shape)
    model = init_model(shape, 2, "cp", rng)
    model.intercept, model.biases = 0.1, [rng.uniform(-0.2, 0.2, k) for k in shape]
    base = offsets(model, X)
    y = base + rng.uniform(-0.5, 0.5, len(X))
    queries = []
    real = cm.gaussian_release

    def spy(value, sensitivity, z, rng, dtype=None, *, rounding):
        queries.append((float(value), sensitivity, rounding))
        return real(value, sensitivity, z, rng, dtype, rounding=rounding)
    patch_everywhere(monkeypatch, "gaussian_release", spy)
    noise = OffsetNoise("gaussian", np.array([1.0]))
    moved = []
    for e in range(len(X)):
        sums = []
        for term in (0.0, 0.6):  # the entry's residual exactly 0, or past the clip at 1/2
            values = np.where(np.arange(len(X)) == e, base + term, y)
            residual_scale(obs, values, model, noise=noise, rng=np.random.default_rng(0), index=0)
            sums.append(queries[-1][0])
        moved.append(abs(sums[1] - sums[0]))
    _, sensitivity, rounding = queries[-1]
    assert sensitivity == 0.25 and rounding.total == len(X) / 4 and rounding.terms == len(X)
    assert max(moved) > sensitivity  # the float sum is not the exact one
    assert max(moved) <= sensitivity + rounding.allowance()


def _fit_recording(data, **kw):
    est = PrivateTensorCompletion(rank=2, value_range=(-3, 3), shape=(30, 30, 30),
                                  random_state=0, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(data["indices"], data["values"])
    return est, [w for w in caught if "start_eigenvalues_noise_" in str(w.message)]


def test_statistics_start_says_when_its_factors_start_from_noise():
    """DP-ALS records each released Gram's top eigenvalues and noise level (units of the
    clipping level) and warns exactly when a factor is below twice the level in some Gram, a
    function of those released values; the preview bounds the level from public quantities,
    and a fit that learns (large epsilon) or is not private does not warn."""
    data = make_low_rank_tensor(shape=(30, 30, 30), rank=2, missing_ratio=0.3, snr=1.0,
                                random_state=0)
    n = len(data["values"])
    seen = set()
    for eps in (0.05, 1e3):
        est, noisy = _fit_recording(data, epsilon=eps)
        assert est.start_eigenvalues_.shape == (2, 2)
        assert est.start_eigenvalues_noise_.shape == (2,)
        weak = est.start_eigenvalues_ < 2 * est.start_eigenvalues_noise_[:, None]
        assert bool(noisy) == bool(weak.any())
        preview = clone(est).expected_noise(n, 3)
        assert 0 < est.start_eigenvalues_noise_.max() <= preview.noise * (1 + 1e-12)  # one rounding
        assert preview.signal_bound == n
        seen.add((eps, bool(noisy)))
    assert seen == {(0.05, True), (1e3, False)}
    free, noisy = _fit_recording(data, epsilon=np.inf, perturbation="statistics")
    assert not noisy and np.all(free.start_eigenvalues_noise_ == 0)
    als, noisy = _fit_recording(data, epsilon=np.inf)
    assert not noisy and als.start_eigenvalues_.size == 0


@NON_PRIVATE
@pytest.mark.parametrize("decomposition", ["cp", "tucker"])
def test_without_an_intercept_values_far_from_0_are_scaled_by_their_size(decomposition):
    """Without fit_intercept or value_range the values were divided by their width alone: values
    near 1e89 (or 1, or 1e10) a few ulps apart lay up to 2^53 widths from 0, a constant tensor
    1e89 widths out, and the fit released all zeros (no warning, no overflow: every prediction
    off by the whole value). Divided by their largest size too, they lie in [-1, 1]."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 6, (200, 3))
    for level in (9.9e89, 1e10, 1.0, -1e30):
        for y in (level * (1 + 2.2e-16 * rng.integers(0, 3, 200)), np.full(200, level)):
            with warnings.catch_warnings(), np.errstate(all="raise"):
                warnings.simplefilter("error")
                warnings.filterwarnings("ignore", category=PrivacyWarning)
                model = PrivateTensorCompletion(2, epsilon=np.inf, fit_intercept=False,
                                                decomposition=decomposition,
                                                random_state=0).fit(X, y)
            assert rmse(model.predict(X), y) < 1e-3 * abs(level)
