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
