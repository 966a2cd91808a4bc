"""What a scikit-learn user reads off a private search: ``n_splits_``, the ``cv_results_`` keys
(from released values only, no timing), and a ``refit=False`` search that says it has no model."""
import numpy as np
import pytest

from dptensor import PrivatePCA
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(0)
    return rng.standard_normal((6000, 6)) * [3.0, 2.0, 1.0, 0.5, 0.5, 0.2]


def _search(kind="grid", **kw):
    base = PrivatePCA(n_components=2, data_norm=8.0)
    grid = {"method": ["power", "analyze_gauss"], "n_oversamples": [0, 1]}
    if kind == "grid":
        return PrivateGridSearchCV(base, grid, epsilon=5.0, random_state=0, **kw)
    return PrivateRandomizedSearchCV(base, grid, n_iter=3, epsilon=5.0, random_state=0, **kw)


@pytest.mark.parametrize("kind", ["grid", "randomized"])
def test_cv_results_has_the_keys_a_user_expects_from_released_values_only(kind, X):
    search = _search(kind).fit(X)
    results, best = search.cv_results_, search.best_index_
    m = len(results["params"])
    assert search.n_splits_ == 1
    for key in ("params", "split0_test_score", "mean_test_score", "std_test_score",
                "rank_test_score", "param_method", "param_n_oversamples"):
        assert len(results[key]) == m, key
    # the one released score, on its one split; nothing for the runs not released
    assert results["split0_test_score"][best] == search.best_score_
    assert results["mean_test_score"][best] == search.best_score_
    assert results["std_test_score"][best] == 0.0
    others = np.arange(m) != best
    for key in ("split0_test_score", "mean_test_score", "std_test_score"):
        assert np.isnan(results[key][others]).all(), key
    assert results["rank_test_score"][best] == 1 and (results["rank_test_score"][others] == 2).all()
    # times are unnoised functions of the data (and would count the secret runs)
    assert not [k for k in results if "time" in k]
    assert not hasattr(search, "refit_time_")


@pytest.mark.parametrize("method", ["transform", "inverse_transform", "score", "set_output",
                                    "fit_transform"])
def test_a_search_without_refit_says_it_has_no_model(method, X):
    search = _search(refit=False).fit(X)
    assert search.best_params_ and not hasattr(search, "best_estimator_")
    with pytest.raises(AttributeError) as error:
        if method == "set_output":
            search.set_output(transform="pandas")
        elif method == "fit_transform":
            search.fit_transform(X)
        else:
            getattr(search, method)(X)
    # as scikit-learn's searches: the method is absent (hasattr is False) and the message, on
    # the error or on its cause, says why and what to do
    message = str(error.value) + str(error.value.__cause__ or "")
    assert method in message
    assert "refit=False" in message and "only after refitting on the best parameters" in message
    assert method == "score" or not hasattr(search, method)


def test_a_refitted_search_transforms(X):
    search = _search().fit(X)
    np.testing.assert_array_equal(search.transform(X), search.best_estimator_.transform(X))


def test_the_docs_table_says_what_every_estimators_score_means():
    import pathlib
    import re

    import dptensor
    import dptensor.latent

    text = (pathlib.Path(__file__).parent.parent / "docs" / "model_selection.rst").read_text()
    table = text[text.index(".. list-table::"):]
    table = table[:table.index("\n\n", table.index("* - Estimator"))]
    rows = re.findall(r"^   \* - (.+)$", table, flags=re.M)[1:]  # the header row first
    named = {name for row in rows for name in re.findall(r"``(\w+)``", row)}
    estimators = {name for module in (dptensor, dptensor.latent) for name in module.__all__
                  if hasattr(getattr(module, name), "score")
                  and hasattr(getattr(module, name), "fit")
                  and not name.endswith("SearchCV")}
    assert estimators and estimators <= named, estimators - named
    assert "higher is better" in text[text.index("What each estimator's ``score`` means"):]


def _released(search):
    return (search.best_index_, search.best_score_, search.best_params_,
            search.best_estimator_.components_.tolist(), search.privacy_cost_)


@pytest.mark.parametrize("kind", ["grid", "randomized"])
def test_n_jobs_releases_what_one_job_releases_at_the_same_price_and_ledger(kind, X):
    from dptensor import PrivacyAccountant

    results = {}
    for jobs in (None, 1, 2, -1):
        budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
        search = _search(kind, n_jobs=jobs, accountant=budget, n_runs=6)
        cost = search.privacy_cost(*X.shape)
        search.fit(X)
        history = [(e.label, e.mechanism, e.epsilon, e.delta) for e in budget.history()]
        results[jobs] = (_released(search), cost, history, search.cv_results_["mean_test_score"])
    first = results[None]
    for jobs, other in results.items():
        assert other[0] == first[0] and other[1] == first[1] and other[2] == first[2], jobs
        np.testing.assert_array_equal(other[3], first[3])
    assert len(first[2]) == 1  # one entry, the whole search


def test_parallel_runs_draw_independent_noise(X, monkeypatch):
    """Every run gets its own fit seed and its own score-noise stream, drawn before any run: two
    threads never share (or correlate) a stream, whichever runs which."""
    import copy
    import threading

    from dptensor.model_selection import _search as search_module

    seen = []
    original = search_module._PrivateSearch._one_run

    def spy(self, parts, settings, overrides, index, seed, noise_rng):
        # what this run's score noise is drawn from, read off a copy (the run's own is untouched)
        draws = copy.deepcopy(noise_rng).standard_normal(4000)
        seen.append((threading.get_ident(), seed, draws))
        return original(self, parts, settings, overrides, index, seed, noise_rng)
    monkeypatch.setattr(search_module._PrivateSearch, "_one_run", spy)
    for seed in range(20):  # the number of runs is drawn: a seed whose search runs several
        seen.clear()
        _search(n_jobs=2, n_runs=12).set_params(random_state=seed).fit(X)
        if len(seen) >= 4:
            break
    assert len(seen) >= 4 and len({thread for thread, _, _ in seen}) == 2  # both threads ran
    seeds = [seed for _, seed, _ in seen]
    assert len(set(seeds)) == len(seeds)  # each fit its own seed (its own spend stream)
    corr = np.corrcoef(np.array([draws for _, _, draws in seen]))
    off_diagonal = corr[~np.eye(len(seen), dtype=bool)]
    assert np.abs(off_diagonal).max() < 0.08  # 4000 draws: |r| ~ 0.016 for independent streams


def test_n_jobs_is_checked_before_the_spend(X):
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n_jobs must be None or a nonzero int"):
            _search(n_jobs=bad).fit(X)
