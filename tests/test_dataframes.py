"""DataFrame conventions: ``feature_names_in_`` after a fit (or a stream) on a pandas DataFrame,
``set_output(transform="pandas")`` wherever there is ``transform``, the searches included."""
import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorDecomposition,
                      StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV, PrivateRandomizedSearchCV

pd = pytest.importorskip("pandas")

pytestmark = [pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

COLUMNS = ["age", "income", "visits", "spend", "tenure", "score"]


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12_000, 6)) * [3.0, 2.0, 1.0, 0.5, 0.5, 0.2]
    return pd.DataFrame(X, columns=COLUMNS)


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(1)
    return pd.DataFrame(rng.poisson(1.0, (3000, 6)).astype(float), columns=COLUMNS)


def _estimators():
    return [PrivatePCA(2, epsilon=1.0, data_norm=8.0, random_state=0),
            AdaptivePrivatePCA(2, epsilon=1.0, data_norm=8.0, random_state=0),
            PrivateTensorDecomposition(2, n_restarts=3, n_iter=5, random_state=0),
            StreamingTensorPower(2, random_state=0),
            PrivateGaussianMixture(2, n_restarts=3, n_iter=5, random_state=0),
            PrivateLatentDirichletAllocation(2, random_state=0)]


def _data(estimator, rows, counts):
    return counts if isinstance(estimator, PrivateLatentDirichletAllocation) else rows


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_fit_on_a_dataframe_sets_feature_names_in(estimator, rows, counts):
    X = _data(estimator, rows, counts)
    fit = estimator.fit(X)
    assert list(fit.feature_names_in_) == COLUMNS and fit.n_features_in_ == 6
    with pytest.raises(ValueError, match="feature names should match"):
        getattr(fit, "transform", getattr(fit, "predict", None))(
            X.rename(columns={"age": "years"}))


@pytest.mark.parametrize("estimator", [PrivatePCA(2, epsilon=1.0, data_norm=8.0, block_size=2000,
                                                  random_state=0),
                                       StreamingTensorPower(2, epsilon=1.0, data_norm=8.0,
                                                            random_state=0)],
                         ids=lambda e: type(e).__name__)
def test_partial_fit_on_dataframes_sets_feature_names_in(estimator, rows):
    for start in range(0, len(rows), 4000):
        estimator.partial_fit(rows.iloc[start:start + 4000])
    assert list(estimator.feature_names_in_) == COLUMNS


@pytest.mark.parametrize("estimator", [e for e in _estimators() if hasattr(e, "transform")],
                         ids=lambda e: type(e).__name__)
def test_set_output_pandas_wherever_there_is_transform(estimator, rows, counts):
    X = _data(estimator, rows, counts)
    fit = estimator.set_output(transform="pandas").fit(X)
    Z = fit.transform(X)
    name = type(estimator).__name__.lower()
    assert isinstance(Z, pd.DataFrame) and list(Z.columns) == [f"{name}0", f"{name}1"]
    assert Z.index.equals(X.index)
    np.testing.assert_array_equal(Z.to_numpy(), fit.set_output(transform="default").transform(X))


def _search(kind, **kw):
    base = PrivatePCA(n_components=2, data_norm=8.0)
    grid = {"method": ["power", "analyze_gauss"]}
    if kind == "grid":
        return PrivateGridSearchCV(base, grid, epsilon=20.0, random_state=0, **kw)
    return PrivateRandomizedSearchCV(base, grid, n_iter=2, epsilon=20.0, random_state=0, **kw)


@pytest.mark.parametrize("kind", ["grid", "randomized"])
def test_a_search_on_a_dataframe_has_its_feature_names_and_pandas_output(kind, rows):
    search = _search(kind).fit(rows)
    assert list(search.feature_names_in_) == COLUMNS
    assert list(search.get_feature_names_out()) == ["privatepca0", "privatepca1"]
    Z = search.set_output(transform="pandas").transform(rows)
    assert isinstance(Z, pd.DataFrame) and list(Z.columns) == ["privatepca0", "privatepca1"]
    # set before the fit (and kept by clone, as scikit-learn's output config is)
    from sklearn.base import clone
    again = clone(_search(kind).set_output(transform="pandas")).fit(rows)
    assert isinstance(again.transform(rows), pd.DataFrame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fitted on names, given names: nothing to warn about
        search.transform(rows)
