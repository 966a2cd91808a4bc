"""Private hyperparameter search: its price, its guarantee, its interface and its refusals."""
import functools
import dataclasses
import math
import warnings
from collections import Counter

import numpy as np
import pytest
from scipy.stats import beta
from sklearn.base import BaseEstimator
from sklearn.decomposition import PCA
from sklearn.model_selection import GridSearchCV, ParameterGrid
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, Normalizer, PolynomialFeatures, StandardScaler

from chatty_steps import Chatty, Records
from dptensor import (AdaptivePrivatePCA, BudgetExceededError, PrivacyAccountant, PrivacyWarning, PrivatePCA,
                      PrivateTensorCompletion, PrivateTensorDecomposition, StreamingTensorPower)
from dptensor._base import PrivateEstimatorMixin
from dptensor.accounting import GaussianEvent, PrivateSelectionEvent, calibrate_gaussian, epsilon_of
from dptensor.accounting.composition import rdp_curve, rdp_epsilon, repeat_and_select_rdp, selection_rdp
from dptensor.accounting.events import event_from_dict
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV
from dptensor.model_selection._selection import draw_n_runs, tnb_gamma
from expected_warnings import completion_noise, noise_dominated

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc  # noqa: E402

DELTA = 1e-5


# --------------------------------------------------------------------------------------------
# The price: Papernot & Steinke against dp-accounting's independent implementation
# --------------------------------------------------------------------------------------------

#: A short grid of orders: dp-accounting's Python loops are quadratic in their number.
SHORT = np.r_[np.linspace(1.05, 10.0, 60), np.geomspace(10.5, 2000.0, 40)]


def _dp_accounting_epsilon(z, mean, shape, refit):
    acc = rdp_acc.RdpAccountant(list(SHORT))
    acc.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(dp_accounting.dp_event.GaussianDpEvent(z),
                                                              mean, shape))
    if refit:
        acc.compose(dp_accounting.dp_event.GaussianDpEvent(z))
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 3.0, math.inf])
def test_selection_cost_matches_dp_accounting(shape):
    z = 2.5
    for mean, refit in ((5.0, False), (100.0, True)):
        event = PrivateSelectionEvent((GaussianEvent(z),), GaussianEvent(z), mean, shape, refit)
        ours = rdp_epsilon(selection_rdp(event, SHORT), DELTA, SHORT)
        assert ours == pytest.approx(_dp_accounting_epsilon(z, mean, shape, refit), rel=1e-7)
        assert epsilon_of(event, DELTA) <= ours * (1 + 1e-9)  # the full grid can only do better


def test_selection_curve_matches_theorem_where_dp_accounting_applies():
    z, mean = 4.0, 20.0
    base = SHORT / (2 * z * z)
    for shape in (0.0, 1.0, 2.0):
        ours = repeat_and_select_rdp(base, mean, shape, SHORT)
        theirs = rdp_acc._compute_rdp_repeat_and_select(SHORT, base, mean, shape)
        np.testing.assert_allclose(ours, theirs, rtol=1e-7)
    # Poisson: dp-accounting skips the monotone envelope; ours may only be lower, never higher
    ours = repeat_and_select_rdp(base, mean, math.inf, SHORT)
    theirs = np.asarray(rdp_acc._compute_rdp_repeat_and_select(SHORT, base, mean, math.inf))
    assert np.all(ours <= theirs * (1 + 1e-9))
    assert np.min(ours) == pytest.approx(np.min(theirs), rel=1e-9)


def _bernoulli_renyi(p, q, orders):
    """Exact Rényi divergence of distributions ``p`` and ``q`` (arrays over the same outcomes)."""
    from scipy.special import logsumexp

    return np.array([logsumexp(a * np.log(p) + (1 - a) * np.log(q)) / (a - 1) for a in orders])


@pytest.mark.parametrize("shape", [0.0, 1.0, 2.0, math.inf])
def test_selection_bound_holds_by_brute_force_on_randomized_response(shape):
    """A run is randomized response (score 1 w.p. e^eps/(1+e^eps) on D, the reverse on D'); the best
    of K runs is 1 iff some run is. Its exact Rényi divergence, from the law of K, stays below the
    price at every order."""
    from scipy import stats

    eps, mean, orders = 0.8, 6.0, SHORT[SHORT <= 200]
    q = math.exp(eps) / (1 + math.exp(eps))
    run = _bernoulli_renyi(np.array([q, 1 - q]), np.array([1 - q, q]), orders)
    k = np.arange(0, 4000)
    if math.isinf(shape):
        pmf = stats.poisson(mean).pmf(k)
    else:
        gamma = tnb_gamma(shape, mean)
        pmf = stats.logser(1 - gamma).pmf(k) if shape == 0 else stats.nbinom(shape, gamma).pmf(k)
        pmf[0] = 0.0
        pmf /= pmf.sum()

    def outputs(p1):  # P[no run], P[best = 0], P[best = 1]
        none = pmf[0]
        zero = np.sum(pmf[1:] * (1 - p1) ** k[1:])
        return np.array([none, zero, 1 - none - zero])

    P, Q = outputs(q), outputs(1 - q)
    keep = P + Q > 0
    exact = np.maximum(_bernoulli_renyi(P[keep], Q[keep], orders), _bernoulli_renyi(Q[keep], P[keep], orders))
    bound = repeat_and_select_rdp(run, mean, shape, orders)
    assert np.all(exact <= bound + 1e-9)
    assert np.max(exact - run) > 0  # selection does leak more than one run: the bound has work to do


def test_run_costs_the_larger_of_fit_and_score_and_refit_adds_the_largest_candidate():
    small, large = GaussianEvent(8.0), GaussianEvent(2.0)
    one = PrivateSelectionEvent((small,), large, 5.0, 1.0)
    other = PrivateSelectionEvent((large,), small, 5.0, 1.0)
    both = PrivateSelectionEvent((small, large), small, 5.0, 1.0)
    np.testing.assert_allclose(rdp_curve(one), rdp_curve(other))
    np.testing.assert_allclose(rdp_curve(one), rdp_curve(both))
    refit = PrivateSelectionEvent((small, large), small, 5.0, 1.0, refit=True)
    np.testing.assert_allclose(rdp_curve(refit), rdp_curve(both) + rdp_curve(large))


def test_selection_event_round_trips_through_the_ledger(tmp_path):
    event = PrivateSelectionEvent((GaussianEvent(3.0, 2), GaussianEvent(4.0)), GaussianEvent(3.0), 7.5,
                                  math.inf, True)
    assert event_from_dict(event.to_dict()) == event
    acc = PrivacyAccountant(epsilon=50.0, ledger=tmp_path / "ledger.db")
    acc.spend(event, label="search")
    again = PrivacyAccountant(epsilon=50.0, ledger=tmp_path / "ledger.db")
    assert again.history()[0].event == event
    assert again.spent()[0] == pytest.approx(epsilon_of(event, DELTA))


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, math.inf])
def test_number_of_runs_follows_its_law(shape):
    rng = np.random.default_rng(0)
    draws = np.array([draw_n_runs(shape, 6.0, rng) for _ in range(4000)])
    assert draws.mean() == pytest.approx(6.0, rel=0.08)
    if math.isfinite(shape):
        assert draws.min() >= 1
        gamma = tnb_gamma(shape, 6.0)  # P[K=1] ∝ shape (1-gamma) (1 for the logarithmic law)
        p1 = ((shape if shape else 1.0) * (1 - gamma) * gamma**shape / (1 - gamma**shape)
              if shape else (1 - gamma) / math.log(1 / gamma))
        assert np.mean(draws == 1) == pytest.approx(p1, abs=0.025)


# --------------------------------------------------------------------------------------------
# A tiny private estimator, to audit the whole search empirically
# --------------------------------------------------------------------------------------------

@functools.lru_cache
def _calibrated(epsilon, delta):
    return calibrate_gaussian(epsilon, delta, 1)


class _Target(PrivateEstimatorMixin, BaseEstimator):
    """Scalar units in [0, 1]; fit releases a noisy mean; each unit scores ``1 - |x - target|``."""

    def __init__(self, target=0.0, epsilon=1.0, delta=None, accountant=None, random_state=None):
        self.target, self.epsilon, self.delta = target, epsilon, delta
        self.accountant, self.random_state = accountant, random_state

    def _plan_z(self):
        epsilon, delta = self._privacy_target()
        return _calibrated(epsilon, delta), delta

    def privacy_cost(self, n_samples, n_features):
        z, delta = self._plan_z()
        return self._preview(GaussianEvent(z), delta=delta, noise_multiplier=z, n_queries=1)

    def fit(self, X, y=None):
        z, delta = self._plan_z()
        self.privacy_cost_, rng = self._spend(GaussianEvent(z), entropy=self._entropy(), delta=delta,
                                              noise_multiplier=z, n_queries=1, data_shape=X.shape,
                                              memory=(0, ""))
        x = np.clip(X[:, 0], 0.0, 1.0)
        self.mean_ = x.mean() + rng.normal(0.0, z / len(x))
        return self

    def _score_units(self, X, y=None):
        return 1.0 - np.abs(np.clip(X[:, 0], 0, 1) - self.target), (0.0, 1.0)


def _outputs(search, plan, X, trials, offset, resolution):
    """Histogram of (chosen candidate, released score rounded to ``resolution``) over seeded trials."""
    out = Counter()
    for i in range(trials):
        index, score = search._run(X, None, plan, {}, np.random.default_rng(offset + i))
        out[(index, "none" if math.isnan(score) else round(score / resolution))] += 1
    return out


def _epsilon_lower_bound(c1, c2, trials, delta=DELTA, alpha=0.05):
    """The largest epsilon the two output histograms prove (Clopper–Pearson, Bonferroni over outputs)."""
    keys = set(c1) | set(c2)
    a = alpha / (2 * len(keys))
    bound = 0.0
    for key in keys:
        for p, q in ((c1, c2), (c2, c1)):
            lo = beta.ppf(a, p[key], trials - p[key] + 1) if p[key] else 0.0
            hi = beta.ppf(1 - a, q[key] + 1, trials - q[key]) if q[key] < trials else 1.0
            if lo > delta:
                bound = max(bound, math.log((lo - delta) / hi))
    return bound


def test_whole_search_is_as_private_as_claimed_empirically():
    n, epsilon = 200, 1.0
    D = np.zeros((n, 1))
    D2 = D.copy()
    D2[0] = 1.0  # one unit replaced, at the extreme of its range
    search = PrivateGridSearchCV(_Target(), {"target": [0.0, 0.4, 1.0]}, epsilon=epsilon, n_runs=3,
                                 validation_fraction=0.9, refit=False)
    assert search.privacy_cost(n, 1).epsilon <= epsilon
    plan = search._settings(n, 1)
    # Scores rounded to their noise std: fine enough to see a shift, coarse enough to fill bins.
    resolution = plan.event.score.noise_multiplier / plan.n_val
    c1, c2 = (_outputs(search, plan, D, 600, 0, resolution),
              _outputs(search, plan, D2, 600, 10**6, resolution))
    assert _epsilon_lower_bound(c1, c2, 600) <= epsilon
    # The audit has power: released without noise, the same scores break the claim (the replaced
    # unit is in the validation part 90% of the time and then moves the score by 1/n_val).
    loud = dataclasses.replace(plan, event=PrivateSelectionEvent(
        plan.event.candidates, GaussianEvent(1e-9), plan.event.mean, plan.event.shape))
    c1, c2 = (_outputs(search, loud, D, 100, 0, 1e-4), _outputs(search, loud, D2, 100, 10**6, 1e-4))
    assert _epsilon_lower_bound(c1, c2, 100) > 1.5 * epsilon


# --------------------------------------------------------------------------------------------
# The search on real estimators
# --------------------------------------------------------------------------------------------

def _spiked(n=4000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.r_[3.0, 2.5, 2.0, 0.2 * np.ones(d - 3)] / 8


@noise_dominated("explained_variance_")  # 8 runs of 1/8 of the budget, k=3
def test_search_meets_the_budget_in_one_spend_and_finds_the_spikes():
    X = _spiked(2000)
    acc = PrivacyAccountant(epsilon=2.0)
    search = PrivateGridSearchCV(PrivatePCA(data_norm=1.0, centered=True), {"n_components": [1, 3]},
                                 epsilon=1.0, n_runs=8, accountant=acc, random_state=0)
    preview = search.privacy_cost(*X.shape)
    search.fit(X)
    assert len(acc.history()) == 1
    assert acc.spent()[0] == pytest.approx(preview.epsilon, rel=1e-12)
    assert 0.999 < preview.epsilon <= 1.0
    assert search.privacy_cost_.event == preview.event
    assert search.best_estimator_.components_.shape == (search.best_params_["n_components"], 6)
    assert search.transform(X[:5]).shape == (5, search.best_params_["n_components"])
    # only released values: the chosen run's score; the others are not released
    scores = search.cv_results_["mean_test_score"]
    assert np.isnan(scores).sum() == 1 and scores[search.best_index_] == search.best_score_
    # each candidate got a share of the budget: below the whole, above the naive split
    assert 1.0 / 3 < search.candidate_epsilon_ < 1.0
    assert search.best_estimator_.privacy_cost_.epsilon == pytest.approx(search.candidate_epsilon_)
    # Three axes capture ~3x the variance of one: the search picks them unless no run tries them
    # (a random number of runs with random candidates; with 8 expected runs that is rare).
    plan = search._settings(*X.shape)
    picks = [search._run(X, None, plan, {}, np.random.default_rng(seed))[0] for seed in range(15)]
    assert np.mean(np.array(picks) == 1) >= 0.7


def test_same_seed_same_search_and_verbose_prices_first(capsys):
    X = _spiked(1500)
    kw = dict(param_grid={"n_components": [1, 2]}, epsilon=1.0, random_state=3, verbose=1)
    a = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), **kw).fit(X)
    first = capsys.readouterr().out.splitlines()[0]
    assert "costs epsilon=1" in first and "expected runs" in first
    b = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), **kw).fit(X)
    assert a.best_score_ == b.best_score_
    np.testing.assert_array_equal(a.best_estimator_.components_, b.best_estimator_.components_)


def test_search_through_a_stateless_pipeline_and_randomized_candidates():
    X = _spiked(2000)
    pipe = make_pipeline(Normalizer(), PrivatePCA(data_norm=1.0, centered=True))
    search = PrivateRandomizedSearchCV(pipe, {"privatepca__n_components": [1, 2, 3]}, n_iter=3, epsilon=2.0,
                                       random_state=0).fit(X)
    assert search.best_params_["privatepca__n_components"] in (1, 2, 3)
    assert search.privacy_cost_.epsilon <= 2.0
    assert search.transform(X[:3]).shape[0] == 3


def test_completion_search_scores_held_out_entries():
    from dptensor.datasets import make_low_rank_tensor  # noqa: F401  (skip if absent)

    rng = np.random.default_rng(0)
    shape = (30, 25, 8)
    U = [rng.standard_normal((s, 2)) for s in shape]
    T = np.einsum("ir,jr,kr->ijk", *U)
    idx = np.stack(np.unravel_index(rng.choice(T.size, 3000, replace=False), shape), axis=1)
    y = np.clip(T[tuple(idx.T)], -4, 4)
    est = PrivateTensorCompletion(rank=2, perturbation="gradient", value_range=(-4.0, 4.0))
    search = PrivateGridSearchCV(est, {"reg": [0.01, 1.0]}, epsilon=4.0, random_state=0).fit(idx, y)
    assert search.privacy_cost_.epsilon <= 4.0
    assert search.best_estimator_.shape_ == shape
    assert -1.0 <= search.best_estimator_.score(idx, y) <= 0.0
    assert search.predict(idx[:4]).shape == (4,)


# --------------------------------------------------------------------------------------------
# Refusals, all before any spend
# --------------------------------------------------------------------------------------------

def _no_fit(monkeypatch):
    def fail(self, *a, **k):
        raise AssertionError("a candidate was fitted")
    monkeypatch.setattr(PrivatePCA, "fit", fail)


def test_refusals_come_before_any_fit_or_spend(monkeypatch):
    X = _spiked(2000)
    _no_fit(monkeypatch)
    acc = PrivacyAccountant(epsilon=0.5)
    with pytest.raises(BudgetExceededError):
        PrivateGridSearchCV(PrivatePCA(data_norm=1.0), {"n_components": [1, 2]}, epsilon=1.0,
                            accountant=acc).fit(X)
    assert acc.history() == []
    cases = [
        (PCA(), {"n_components": [1]}, {}, TypeError, "not a dptensor estimator"),
        (make_pipeline(StandardScaler(), PrivatePCA(data_norm=1.0)), {"privatepca__n_components": [1]}, {},
         TypeError, "'standardscaler'"),
        (PrivatePCA(data_norm=1.0), {"epsilon": [0.5, 1.0]}, {}, ValueError, "sets 'epsilon'"),
        (PrivatePCA(data_norm=1.0), {"n_components": [1]}, {"epsilon": np.inf}, ValueError, "finite"),
        (PrivatePCA(data_norm=1.0), {"n_components": [1]}, {"validation_fraction": 0.01}, ValueError,
         "too small"),
        (PrivatePCA(data_norm=1.0), [], {}, ValueError, "no candidates"),
        (PrivatePCA(), {"data_norm": [0.5, 1.0]}, {}, ValueError, "scale of the score"),
    ]
    for est, grid, kw, error, message in cases:
        with pytest.raises(error, match=message):
            PrivateGridSearchCV(est, grid, **{"epsilon": 1.0, "accountant": acc, **kw}).fit(X)
    assert acc.history() == []
    idx = np.array([[0, 0], [1, 1], [2, 0]] * 30)
    out = PrivateTensorCompletion(perturbation="output", value_range=(0, 1))
    with pytest.raises(ValueError, match="no finite privacy cost"):
        PrivateGridSearchCV(out, {"rank": [1]}, epsilon=1.0, accountant=acc).fit(idx, np.zeros(len(idx)))
    assert acc.history() == []


def test_every_grid_candidate_is_checked_as_the_template_is(monkeypatch):
    """A grid value may replace a step, the learner or the whole steps list: each candidate is
    built and checked before any fit or spend, so none swaps in a step that learns unnoised."""
    X = _spiked(2000)
    _no_fit(monkeypatch)
    acc = PrivacyAccountant(epsilon=5.0)
    pipe = Pipeline([("scale", Normalizer()), ("pca", PrivatePCA(data_norm=1.0))])
    cases = [
        ({"scale": [Normalizer(), StandardScaler()]}, TypeError, "'scale'.*learns from the data"),
        ({"scale": [FunctionTransformer(np.log1p)]}, TypeError, "FunctionTransformer"),
        ({"steps": [[("scale", StandardScaler()), ("pca", PrivatePCA(data_norm=1.0))]]}, TypeError,
         "learns from the data"),
        ({"pca": [PCA()]}, TypeError, "not a dptensor estimator"),
        ({"pca": [AdaptivePrivatePCA(data_norm=1.0)]}, ValueError, "replaces the learning step"),
        ({"scale": [PrivatePCA(data_norm=1.0)]}, ValueError, "not the last step"),
        ({"pca": [PrivatePCA(data_norm=1.0), PrivatePCA(data_norm=2.0)]}, ValueError,
         "scale of the score"),
        ({"scale": ["passthrough", PolynomialFeatures(2)]}, TypeError, "learns from the data"),
    ]
    for grid, error, message in cases:
        with pytest.raises(error, match=message):
            PrivateGridSearchCV(pipe, grid, epsilon=1.0, accountant=acc).fit(X)
        with pytest.raises(error, match=message):
            PrivateRandomizedSearchCV(pipe, grid, n_iter=len(ParameterGrid(grid)), epsilon=1.0, accountant=acc,
                                      random_state=0).privacy_cost(*X.shape)
    assert acc.history() == []


def test_a_grid_may_swap_stateless_steps():
    X = _spiked(3000, seed=3)
    grid = {"scale": ["passthrough", Normalizer()], "pca__n_components": [1]}
    pipe = Pipeline([("scale", Normalizer()), ("pca", PrivatePCA(data_norm=1.0))])
    search = PrivateGridSearchCV(pipe, grid, epsilon=2.0, random_state=0).fit(X)
    assert search.best_params_ in search.cv_results_["params"]
    assert search.best_estimator_[-1].components_.shape == (1, X.shape[1])


# --------------------------------------------------------------------------------------------
# Every estimator: a preview equal to what fit records, and a bounded score plain sklearn can use
# --------------------------------------------------------------------------------------------

def _estimators():
    return [PrivatePCA(n_components=2, epsilon=1.0, data_norm=1.0, random_state=0),
            AdaptivePrivatePCA(n_components=1, epsilon=1.0, data_norm=1.0, random_state=0),
            PrivateTensorDecomposition(n_components=2, n_restarts=3, n_iter=4, epsilon=1.0, data_norm=1.0,
                                       random_state=0),
            StreamingTensorPower(n_components=1, n_restarts=2, n_iter=2, batch_size=100, epsilon=1.0,
                                 data_norm=1.0, random_state=0)]


@noise_dominated()  # 600 rows at epsilon=1: the weaker components are noise
@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
def test_preview_equals_fit_and_score_is_bounded_per_row(est):
    X = _spiked(600)
    preview = est.privacy_cost(*X.shape)
    est.fit(X)
    assert preview == est.privacy_cost_
    values, (lo, hi) = est._score_units(X)
    rogue = np.r_[X[:5], 50.0 * np.ones((3, X.shape[1])), -50.0 * np.eye(X.shape[1])[:2]]
    rogue_values, _ = est._score_units(rogue)
    assert np.all((lo <= rogue_values) & (rogue_values <= hi)) and np.all((lo <= values) & (values <= hi))
    assert est.score(X) == pytest.approx(values.mean())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        grid = {"n_restarts": [2, 3]} if hasattr(est, "n_restarts") else {"n_components": [1, 2]}
        search = GridSearchCV(est, grid, cv=2).fit(X)  # no scoring=: the estimator's own score
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_pca_score_ranks_the_true_subspace_first():
    X = _spiked(3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        good = PrivatePCA(n_components=3, data_norm=1.0).fit(X)  # non-private: the true axes
        bad = PrivatePCA(n_components=3, data_norm=1.0).fit(X)
    bad.components_ = np.eye(6)[3:]  # the three weak axes
    assert good.score(X) > 10 * bad.score(X) > 0


@completion_noise  # a tiny tensor: its weaker components and offsets are noise
def test_completion_preview_and_score_bound():
    rng = np.random.default_rng(1)
    idx = np.stack([rng.integers(0, 10, 400), rng.integers(0, 8, 400)], axis=1)
    y = rng.uniform(1, 5, 400)
    est = PrivateTensorCompletion(rank=2, perturbation="gradient", epsilon=1.0, value_range=(1, 5),
                                  random_state=0)
    preview = est.privacy_cost(400, 2)
    est.fit(idx, y)
    assert preview == est.privacy_cost_
    values, (lo, hi) = est._score_units(idx, np.r_[y[:-1], 1e6])
    assert (lo, hi) == (-1.0, 0.0) and values.min() >= -1.0 and values.max() <= 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        GridSearchCV(PrivateTensorCompletion(rank=1, value_range=(1, 5)), {"reg": [0.1, 1.0]},
                     cv=2).fit(idx, y)


def test_the_refit_and_a_saved_search_hold_no_seed():
    """Before: the refit's seed, drawn from the search's own stream, stayed on ``best_estimator_``
    (its params and repr) and, with the public description, regenerated the refit's noise; and a
    pickled search kept its int seed, which regenerates the split, the runs and the scores' noise."""
    import pickle

    X = _spiked(1500)
    search = PrivateGridSearchCV(make_pipeline(Normalizer(), PrivatePCA(data_norm=1.0)),
                                 {"privatepca__n_components": [1, 2]}, epsilon=1.0, random_state=3).fit(X)
    assert search.best_estimator_.get_params()["privatepca__random_state"] is None
    assert "random_state" not in repr(search.best_estimator_)
    saved = pickle.loads(pickle.dumps(search))
    assert saved.random_state is None and search.random_state == 3
    np.testing.assert_array_equal(saved.transform(X[:4]), search.transform(X[:4]))


def _bad(kind, X):
    if kind == "1-D":
        return X[:, 0]
    X = X.astype(object) if kind == "string" else X.copy()
    X[5, 2] = {"nan": np.nan, "inf": np.inf, "string": "abc"}[kind]
    return X


@pytest.mark.parametrize("kind, match", [("1-D", "must be 2-D"), ("nan", "NaN"), ("inf", "infinity"),
                                         ("string", "must hold real numbers")])
def test_bad_data_is_refused_before_the_search_spends(kind, match):
    X = np.random.default_rng(0).standard_normal((600, 5)) / 4
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    search = PrivateGridSearchCV(PrivatePCA(data_norm=2.0), {"n_components": [1]}, epsilon=1.0,
                                 accountant=budget)
    with pytest.raises(ValueError, match=match) as error:
        search.fit(_bad(kind, X))
    assert budget.history() == []
    assert "abc" not in str(error.value) and f"{X[0, 0]:.4f}"[:6] not in str(error.value)  # no value quoted


def test_a_pipeline_search_and_targets_are_refused_in_words_that_quote_no_value():
    """Checks made once before the spend: scikit-learn's would print complex data and quote a string
    (an error is released too), for a pipeline's X and for any y."""
    secret = 0.987654321
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 5)) / 4
    pipe = make_pipeline(Normalizer(), PrivatePCA(data_norm=1.0))
    text = X.astype(object)
    text[5, 2] = "the patient's diagnosis"
    Xi, yi = rng.integers(0, 40, (2000, 2)), rng.uniform(0, 1, 2000)
    cases = [(pipe, {"privatepca__n_components": [1]}, X + secret * 1j, None),
             (pipe, {"privatepca__n_components": [1]}, text, None),
             (pipe, {"privatepca__n_components": [1]}, X, np.full(600, secret + 1j)),
             (pipe, {"privatepca__n_components": [1]}, X, np.array(["the patient's diagnosis"] * 600, object)),
             (PrivateTensorCompletion(value_range=(0, 1)), {"rank": [1]}, Xi, yi + secret * 1j)]
    for estimator, grid, data, y in cases:
        budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
        search = PrivateGridSearchCV(estimator, grid, epsilon=1.0, accountant=budget)
        with pytest.raises(ValueError, match="real numbers|finite numbers") as error:
            search.fit(data, y)
        assert "98765" not in str(error.value) and "patient" not in str(error.value), str(error.value)
        assert budget.history() == []


def test_non_finite_completion_values_are_refused_before_the_search_spends():
    rng = np.random.default_rng(1)
    X, y = rng.integers(0, 5, (500, 3)), rng.standard_normal(500)
    y[3] = np.nan
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    search = PrivateGridSearchCV(PrivateTensorCompletion(value_range=(-3, 3)), {"rank": [1, 2]},
                                 epsilon=1.0, accountant=budget)
    with pytest.raises(ValueError, match="y must hold finite numbers"):
        search.fit(X, y)
    assert budget.history() == []


def test_a_latent_model_is_refused_by_name_and_reason_before_any_spend():
    from dptensor import PrivateGaussianMixture

    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    search = PrivateGridSearchCV(PrivateGaussianMixture(data_norm=2.0), {"n_components": [1, 2]},
                                 epsilon=1.0, accountant=budget)
    with pytest.raises(TypeError, match="PrivateGaussianMixture cannot be searched privately: its score"):
        search.fit(np.random.default_rng(0).standard_normal((500, 4)))
    assert budget.history() == []


class _PCAScoringNaN(PrivatePCA):
    """A learner whose per-unit scores hold a NaN for some unit (as a model's score might)."""

    def _score_units(self, X, y=None):
        values, bounds = super()._score_units(X, y)
        values = np.array(values, dtype=float)
        values[::7] = np.nan
        return values, bounds


def test_a_nan_unit_score_counts_as_the_low_end_and_never_stops_the_search():
    """The score release runs after the spend: a NaN among a run's per-unit scores made it refuse a
    non-finite value there (an error that depended on the data). It counts as the low end of the
    bound instead, a per-unit map that keeps the sensitivity."""
    X = np.random.default_rng(4).standard_normal((800, 5)) / 4
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    search = PrivateGridSearchCV(_PCAScoringNaN(data_norm=2.0), {"n_components": [1, 2]}, epsilon=1.0,
                                 accountant=budget, random_state=0)
    search.fit(X)
    assert len(budget.history()) == 1 and search.best_params_["n_components"] in (1, 2)


# --------------------------------------------------------------------------------------------
# The accountant: the search's own, or the one found anywhere in what it searches
# --------------------------------------------------------------------------------------------

class _Holder(BaseEstimator):
    """A stateless step holding an estimator as a parameter (``inner``), as a wrapper would."""

    def __init__(self, inner=None):
        self.inner = inner

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags


def _holding(acc):
    """Where an accountant may sit: (estimator, grid) pairs, each holding ``acc`` once."""
    pca, grid = PrivatePCA(data_norm=1.0), {"privatepca__n_components": [1, 2]}
    return {
        "estimator": (PrivatePCA(data_norm=1.0, accountant=acc), {"n_components": [1, 2]}),
        "last step": (make_pipeline(Normalizer(), PrivatePCA(data_norm=1.0, accountant=acc)), grid),
        "held by a step": (make_pipeline(_Holder(PrivatePCA(accountant=acc)), Normalizer(), pca),
                           grid),
        "held two deep": (make_pipeline(_Holder(_Holder(PrivatePCA(accountant=acc))), pca), grid),
        "a grid value": (make_pipeline(Normalizer(), pca),
                         {"privatepca": [PrivatePCA(1, data_norm=1.0, accountant=acc),
                                         PrivatePCA(2, data_norm=1.0)]}),
    }


@pytest.mark.parametrize("where", list(_holding(None)))
def test_an_accountant_found_in_what_is_searched_is_charged_with_the_whole_search(where):
    """Before: the search set every candidate's accountant to None and spent epsilon 5 on the
    data while the estimator's accountant showed nothing. Now that accountant is charged the
    search's one event (and no run records itself there: their number is secret)."""
    X = _spiked(1500)
    acc = PrivacyAccountant(epsilon=10.0)
    estimator, grid = _holding(acc)[where]
    before = repr(grid)
    search = PrivateGridSearchCV(estimator, grid, epsilon=5.0, random_state=0)
    preview = search.privacy_cost(*X.shape)
    search.fit(X)
    assert [e.event for e in acc.history()] == [preview.event] == [search.privacy_cost_.event]
    assert acc.spent()[0] == pytest.approx(search.privacy_cost_.epsilon)
    assert 4.9 < acc.spent()[0] <= 5.0
    assert repr(grid) == before  # a grid's estimator is cloned, never changed
    # the refitted model keeps the accountants it was given: its next fit is charged too
    found = [a for k, a in search.best_estimator_.get_params().items() if k.endswith("accountant")]
    assert acc in found or (where == "a grid value" and search.best_index_ == 1)


def test_an_accountant_found_refuses_a_search_over_its_budget_before_any_fit(monkeypatch):
    X = _spiked(1500)
    _no_fit(monkeypatch)
    for where in _holding(None):
        acc = PrivacyAccountant(epsilon=1.0)
        estimator, grid = _holding(acc)[where]
        with pytest.raises(BudgetExceededError):
            PrivateGridSearchCV(estimator, grid, epsilon=5.0).fit(X)
        assert acc.history() == [], where


def test_two_accountants_or_one_out_of_reach_are_refused_before_any_spend(monkeypatch):
    X = _spiked(1500)
    _no_fit(monkeypatch)
    a, b = PrivacyAccountant(epsilon=10.0), PrivacyAccountant(epsilon=10.0)
    grid = {"privatepca__n_components": [1, 2]}
    cases = [
        (PrivatePCA(data_norm=1.0, accountant=a), {"n_components": [1]}, b, "accountant and"),
        (make_pipeline(_Holder(PrivatePCA(accountant=a)), PrivatePCA(data_norm=1.0, accountant=b)),
         grid, None, "different accountants"),
        (make_pipeline(Normalizer(), PrivatePCA(data_norm=1.0)), {"privatepca__accountant": [a, b]},
         None, "sets 'privatepca__accountant'"),
        (make_pipeline(_Holder([PrivatePCA(accountant=a)]), PrivatePCA(data_norm=1.0)), grid, None,
         "cannot take off"),
    ]
    for estimator, grid, own, message in cases:
        search = PrivateGridSearchCV(estimator, grid, epsilon=1.0, accountant=own)
        with pytest.raises(ValueError, match=message):
            search.fit(X)
        with pytest.raises(ValueError, match=message):
            search.privacy_cost(*X.shape)
        assert a.history() == [] and b.history() == []
    # the same accountant on the search and in the estimator: one charge
    monkeypatch.undo()
    PrivateGridSearchCV(make_pipeline(_Holder(PrivatePCA(accountant=a)), PrivatePCA(data_norm=1.0)),
                        grid, epsilon=1.0, accountant=a, random_state=0).fit(X)
    assert len(a.history()) == 1 and b.history() == []


# --------------------------------------------------------------------------------------------
# Output: nothing a run (or the refit) does reaches the user, in this process or a worker's
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_jobs", [1, 2])
def test_runs_print_nothing_so_the_output_does_not_count_them(capfd, n_jobs):
    """Before: a Pipeline(verbose=True) printed one block per run, and a chatty step its lines,
    which counted the secret number of runs. Searches in cross_validate, in this process
    (n_jobs=1) or in joblib's worker processes (n_jobs=2): all that shows is each search's two
    data-independent lines (its price, and its choice, a released value)."""
    from joblib.externals.loky import get_reusable_executor
    from sklearn.model_selection import cross_validate
    from sklearn.pipeline import Pipeline

    get_reusable_executor().shutdown(wait=True)  # workers started here write where capfd reads
    Records.records.clear()
    pca = PrivatePCA(data_norm=1.0, method="power", verbose=2)  # its own progress lines too
    pipe = Pipeline([("chatty", Chatty()), ("pca", pca)], verbose=True)
    search = PrivateGridSearchCV(pipe, {"pca__n_components": [1, 2, 3]}, epsilon=1.0, n_runs=4,
                                 verbose=1, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cross_validate(search, _spiked(1500), cv=3, n_jobs=n_jobs, scoring=lambda *a: 0.0)
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert len(lines) == 6 and all(line.startswith("[PrivateGridSearchCV] ") for line in lines), out
    prices = [line for line in lines if "expected runs" in line]  # the same for the same shape
    assert len(prices) == 3 and len(set(prices)) == 1 and err == "", err
    assert not [w for w in caught if "chatty" in str(w.message)] and Records.records == []
