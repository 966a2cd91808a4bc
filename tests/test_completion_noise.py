"""A completion fit that learns nothing says so, before and after, in every private mode: each fit
records its released components' and offsets' root mean squares beside the levels its noise
alone reaches (``component_rms_noise_``, ``offsets_rms_noise_``), warns from those released
values only, and ``expected_noise`` previews the level from public quantities
(``docs/derivations/completion.rst``, "Noise levels of the released components and offsets")."""
import pickle
import warnings

import numpy as np
import pytest

from dptensor import PrivateTensorCompletion
from dptensor.algorithms.completion.fit_noise import component_rms, offsets_rms
from dptensor.algorithms.completion.start_noise import VALUE_ADVICE

USERS, ITEMS = 200, 150
#: (perturbation, extra parameters): every private value-level mode but the statistics one,
#: whose factors are judged by its start (tests/test_completion.py).
#: Tucker's gradient fit at its default number of steps learns at epsilon=1e4 from some seeds
#: only (its component's rms ~1.5x the warning's level, or collapsed); with 20 it does from all.
MODES = [("input", {}), ("gradient", {}), ("output", {}), ("implicit", {}),
         ("gradient", {"decomposition": "tucker", "n_iter": 20}),
         ("input", {"decomposition": "tucker"})]
IDS = ["input", "gradient", "output", "implicit", "tucker-gradient", "tucker-input"]


def _ratings(seed=0, per_user=40, rank=2):
    """Ratings with user and item effects and a rank-2 taste that also picks the items each user
    rates (so that the implicit mode has something to learn from)."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(USERS, rank)), rng.normal(size=(ITEMS, rank))
    a, b = rng.normal(0, 0.5, USERS), rng.normal(0, 0.5, ITEMS)
    affinity = U @ V.T / np.sqrt(rank)
    X = []
    for u in range(USERS):
        p = np.exp(affinity[u])
        X += [(u, i) for i in rng.choice(ITEMS, per_user, replace=False, p=p / p.sum())]
    X = np.array(X)
    y = 3 + a[X[:, 0]] + b[X[:, 1]] + 0.6 * affinity[X[:, 0], X[:, 1]]
    return X, np.clip(y + 0.2 * rng.normal(size=len(X)), 1, 5)


def _estimator(perturbation, extra, epsilon):
    return PrivateTensorCompletion(rank=2, perturbation=perturbation, epsilon=epsilon,
                                   value_range=(1, 5), shape=(USERS, ITEMS), random_state=0,
                                   **extra)


def _noise_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)
            and "noise level" in str(w.message)]


def _fit(perturbation, extra, epsilon, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = _estimator(perturbation, extra, epsilon).fit(X, y)
    return est, _noise_warnings(caught)


@pytest.fixture(scope="module")
def ratings():
    return _ratings()


@pytest.mark.parametrize("perturbation, extra", MODES, ids=IDS)
def test_a_fit_that_learns_is_silent_and_a_noise_dominated_one_warns(perturbation, extra,
                                                                      ratings):
    """At epsilon = 1e4 on a low-rank truth with row effects nothing is below its level; at
    epsilon = 0.05 every mode's components are, and the warning names exactly the components
    (and modes' offsets) that the recorded values put below their levels."""
    X, y = ratings
    learns, said = _fit(perturbation, extra, 1e4, X, y)
    assert said == []
    assert np.all(learns.component_rms_ > 2 * learns.component_rms_noise_)
    assert np.all(learns.offsets_rms_ > learns.offsets_rms_noise_)
    assert np.all(learns.offsets_rms_noise_ > 0)
    lost, said = _fit(perturbation, extra, 0.05, X, y)
    weak = np.flatnonzero(lost.component_rms_ < 2 * lost.component_rms_noise_)
    assert weak.size and any(f"component(s) {(weak + 1).tolist()}" in m for m in said)
    bad = np.flatnonzero(lost.offsets_rms_ < lost.offsets_rms_noise_)
    assert bad.size and any(f"mode(s) {bad.tolist()}" in m for m in said)


@pytest.mark.parametrize("perturbation, extra", MODES + [("statistics", {})],
                         ids=IDS + ["statistics"])
def test_the_warning_reads_released_attributes_only(perturbation, extra, ratings):
    """The values it compares are functions of the released factors, core and offsets (and the
    public counts), and a pickled and loaded model warns exactly as the fit did from its
    attributes alone."""
    X, y = ratings
    est, said = _fit(perturbation, extra, 0.05, X, y)
    loaded = pickle.loads(pickle.dumps(est))
    counts = [np.bincount(X[:, m], minlength=n) for m, n in enumerate(loaded.shape_)]
    np.testing.assert_allclose(component_rms(loaded.factors_, loaded.core_, loaded.shape_),
                               loaded.component_rms_, rtol=1e-12)
    np.testing.assert_allclose(offsets_rms(loaded.biases_, counts), loaded.offsets_rms_,
                               rtol=1e-12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded._warn_start(VALUE_ADVICE)
    assert _noise_warnings(caught) == said and said


def test_fits_without_noise_record_no_level(ratings):
    X, y = ratings
    for perturbation in (None, "gradient"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the non-private fits say they cost epsilon = inf
            est = _estimator(perturbation, {}, np.inf).fit(X, y)
        assert np.all(est.component_rms_noise_ == 0) and np.all(est.offsets_rms_noise_ == 0)
        assert est.component_rms_.shape == (2,)


@pytest.mark.parametrize("perturbation, extra", MODES, ids=IDS)
def test_expected_noise_falls_with_epsilon_and_n(perturbation, extra):
    """Before any data: a :class:`~dptensor.NoisePreview` of ``component_rms_noise_`` against the
    values' width, decreasing in epsilon and non-increasing in the number of entries (output
    perturbation's noise does not depend on it: its Laplace scale is set by the steps alone)."""
    est = _estimator(perturbation, extra, 1.0)
    previews = [est.set_params(epsilon=e).expected_noise(8000, 2) for e in (0.1, 1.0, 10.0)]
    assert all(p.attribute == "component_rms_noise_" and p.signal_bound == 4.0 for p in previews)
    assert previews[0].noise > previews[1].noise > previews[2].noise > 0
    by_n = [est.set_params(epsilon=1.0).expected_noise(n, 2).noise for n in (2000, 8000, 20000)]
    if perturbation == "output":
        assert by_n[0] == by_n[1] == by_n[2]
    else:
        assert by_n[0] > by_n[1] > by_n[2]
    assert _estimator(perturbation, extra, np.inf).expected_noise(8000, 2).noise == 0.0


def test_input_perturbation_records_the_level_it_previews(ratings):
    """Input perturbation's level is public before the data (Laplace on every value, the
    components' free parameters): the fit records exactly the preview."""
    X, y = ratings
    est, _ = _fit("input", {}, 1.0, X, y)
    preview = _estimator("input", {}, 1.0).expected_noise(len(y), 2)
    np.testing.assert_allclose(est.component_rms_noise_, preview.noise, rtol=1e-12)
    assert preview.ratio == pytest.approx(np.sqrt(2.0 * (USERS + ITEMS) / len(y)))


def test_the_input_level_is_what_a_fit_to_noise_alone_reaches():
    """The derivation's level, checked: values that are one constant plus the mode's Laplace
    noise have no interaction, and the fit the mode runs on them (ALS with its empirical-Bayes
    ridge) finds components whose root mean square over the observed positions is the level,
    within a factor of 2."""
    rng = np.random.default_rng(1)
    X = np.stack([rng.integers(0, USERS, 8000), rng.integers(0, ITEMS, 8000)], axis=1)
    est = _estimator("input", {}, 1.0)
    level = est.expected_noise(len(X), 2).noise
    noisy = 3.0 + rng.laplace(0.0, 4.0 / 1.0, len(X))  # Lap(width / epsilon): the mode's noise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = PrivateTensorCompletion(rank=2, random_state=0,
                                         shape=(USERS, ITEMS)).fit(X, noisy)
    U, V = fitted.factors_
    found = np.sqrt(np.mean((U[X[:, 0]] * V[X[:, 1]]) ** 2, axis=0))
    assert np.all((level / 2 < found) & (found < 2 * level)), (found, level)


def test_input_perturbation_refuses_an_epsilon_whose_noise_overflows_before_the_spend():
    """``Lap(1/epsilon)`` on every value grows as ``n 2**-30 / epsilon**2`` on the exact
    sampler's grid: at epsilon=1e-60 the fit's row offsets squared values past float64 after the
    spend (an overflow warning, an error under warnings as errors). Refused before it; at the
    floor the fit runs silently under the strictest settings."""
    from dptensor import PrivacyAccountant

    rng = np.random.default_rng(0)
    shape = (20, 18, 16)
    flat = rng.choice(int(np.prod(shape)), 3000, replace=False)
    X, y = np.stack(np.unravel_index(flat, shape), 1), rng.uniform(0, 5, 3000)
    for eps in (1e-60, 1e-13):
        acc = PrivacyAccountant()
        with pytest.raises(ValueError, match="epsilon >= 1e-12"):
            PrivateTensorCompletion(rank=2, shape=shape, perturbation="input", epsilon=eps,
                                    value_range=(0, 5), random_state=0, accountant=acc).fit(X, y)
        assert acc.history() == []
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*noise level")  # released: the fit learns none
        PrivateTensorCompletion(rank=2, shape=shape, perturbation="input", epsilon=1e-12,
                                value_range=(0, 5), n_iter=5, random_state=0).fit(X, y)


@pytest.mark.parametrize("epsilon", [1e-200, 1e-300])
def test_offsets_plan_at_a_vanishing_epsilon_takes_the_gaussian_share(epsilon):
    """Where no pure budget for the offsets can be found (scipy's root search failed to converge
    from about epsilon 1e-200, before the spend, naming no parameter), the plan is the Gaussian
    share, which keeps the whole fit within its target: a private fit then runs."""
    from dptensor.accounting import epsilon_of
    from dptensor.accounting.events import ComposedEvent, GaussianEvent
    from dptensor.accounting.calibration import calibrate_gaussian
    from dptensor.algorithms.completion.offsets import offsets_plan

    delta, n_o = 1e-5, 5
    mu = 1.0 / calibrate_gaussian(epsilon, delta, 1)
    mu_f = 0.95 * mu  # the factors' share of a statistics fit's (the default offset_share)
    offsets, events = offsets_plan(n_o, mu, mu_f, epsilon, delta)
    assert offsets[0] == "gaussian" and len(events) == 1
    total = epsilon_of(ComposedEvent([*events, GaussianEvent(1.0 / mu_f, 1)]), delta)
    assert total <= epsilon * (1 + 1e-6)
