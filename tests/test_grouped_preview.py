"""``privacy_cost(..., groups=True)`` previews a fit given groups: the same plan as the grouped
fit, so its event and unit are what the fit records (before, a preview could only name the
ungrouped fit, whose unit, and for PrivatePCA at 300 <= d <= 5000 whose method, differ)."""
import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorDecomposition,
                      StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV

RNG = np.random.default_rng(0)
ROWS = RNG.normal(size=(900, 6)) / 6
COUNTS = RNG.poisson(2.0, size=(900, 12)).astype(float)
GROUPS = RNG.integers(0, 300, 900)  # 300 people, about 3 rows each
COMMON = dict(epsilon=1.0, delta=1e-5, random_state=0)

CASES = [
    ("pca", lambda: PrivatePCA(n_components=2, data_norm=1.0, **COMMON), ROWS),
    ("adaptive", lambda: AdaptivePrivatePCA(n_components=2, data_norm=1.0, **COMMON), ROWS),
    ("tensor", lambda: PrivateTensorDecomposition(n_components=2, data_norm=1.0, **COMMON), ROWS),
    ("stream", lambda: StreamingTensorPower(n_components=2, data_norm=1.0, batch_size=50,
                                            n_iter=2, n_restarts=2, **COMMON), ROWS),
    ("mixture", lambda: PrivateGaussianMixture(n_components=2, data_norm=1.0, **COMMON), ROWS),
    ("lda", lambda: PrivateLatentDirichletAllocation(n_components=2, **COMMON), COUNTS),
]


def n_groups(groups):
    return len(np.unique(groups))


@pytest.mark.filterwarnings("ignore::UserWarning")  # noise-dominated components at this size
@pytest.mark.parametrize("make, X", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_grouped_preview_is_the_grouped_fits_charge(make, X):
    preview = make().privacy_cost(n_groups(GROUPS), X.shape[1], groups=True)
    fitted = make().fit(X, groups=GROUPS).privacy_cost_
    assert preview.unit == fitted.unit == "group of rows"
    assert preview.event == fitted.event and preview == fitted


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_pca_previews_the_method_a_fit_given_groups_chooses():
    # at d = 500 "auto" picks the clipped power method for rows; it is refused with groups, so a
    # fit given groups runs Analyze Gauss, and only the grouped preview says so
    X = RNG.normal(size=(400, 500)) / 30
    groups = np.arange(400) // 2
    pca = PrivatePCA(n_components=2, data_norm=1.0, **COMMON)
    fitted = pca.fit(X, groups=groups).privacy_cost_
    assert pca.privacy_cost(200, 500, groups=True) == fitted
    assert pca.privacy_cost(200, 500).event != fitted.event  # the ungrouped plan differs


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_grouped_search_preview_is_its_charge_and_prices_grouped_candidates():
    X = RNG.normal(size=(3000, 500)) / 30
    groups = np.arange(3000) // 2
    search = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), {"n_components": [1, 2]},
                                 epsilon=4.0, delta=1e-6, refit=False, random_state=0)
    preview = search.privacy_cost(1500, 500, groups=True)
    fitted = search.fit(X, groups=groups).privacy_cost_
    assert preview == fitted and fitted.unit == "group of rows"
    # each candidate is priced as a fit given groups (Analyze Gauss), not as a row fit
    assert set(preview.event.candidates) == {
        PrivatePCA(n_components=k, data_norm=1.0, epsilon=search.candidate_epsilon_,
                   delta=1e-6).privacy_cost(1200, 500, groups=True).event for k in (1, 2)}


def test_the_groups_flag_is_a_flag_and_refused_where_a_grouped_fit_is():
    with pytest.raises(TypeError, match="groups is a flag"):
        PrivatePCA(data_norm=1.0, epsilon=1.0).privacy_cost(10, 3, groups=GROUPS)
    with pytest.raises(ValueError, match="with epsilon=inf nothing is bounded"):
        PrivatePCA(data_norm=1.0).privacy_cost(10, 3, groups=True)
    with pytest.raises(ValueError, match="a precomputed matrix has none"):
        PrivatePCA(input="precomputed", epsilon=1.0).privacy_cost(3, 3, groups=True)
