"""Every private fit names the unit it protects: in ``privacy_cost_``, in the preview before
any data, and in its ledger label; a search refuses candidates that protect another unit than
the one it splits and scores by (a user-level completion is searched by user)."""
import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivacyAccountant, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor.exceptions import PrivacyWarning
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV

RNG = np.random.default_rng(0)
ROWS = RNG.normal(size=(400, 6)) / 6
COUNTS = RNG.poisson(2.0, size=(400, 12)).astype(float)
SYMMETRIC = np.einsum("i,j,k->ijk", *[np.ones(5) / np.sqrt(5)] * 3)
PAIRS = np.column_stack([RNG.integers(0, 30, 500), RNG.integers(0, 20, 500)])
VALUES = RNG.uniform(1, 5, 500)
COMMON = dict(epsilon=1.0, delta=1e-5, random_state=0)

CASES = [
    ("row", lambda: PrivatePCA(n_components=2, data_norm=1.0, **COMMON), (ROWS,)),
    ("matrix entry", lambda: PrivatePCA(n_components=2, input="precomputed", **COMMON),
     (ROWS.T @ ROWS,)),
    ("row", lambda: AdaptivePrivatePCA(n_components=2, data_norm=1.0, **COMMON), (ROWS,)),
    ("row", lambda: PrivateTensorDecomposition(n_components=2, data_norm=1.0, **COMMON),
     (ROWS,)),
    ("tensor entry", lambda: PrivateTensorDecomposition(n_components=1, **COMMON),
     (SYMMETRIC,)),
    ("row", lambda: StreamingTensorPower(n_components=2, data_norm=1.0, batch_size=100,
                                         n_iter=2, n_restarts=2, **COMMON), (ROWS,)),
    ("row", lambda: PrivateGaussianMixture(n_components=2, data_norm=1.0, **COMMON), (ROWS,)),
    ("document", lambda: PrivateLatentDirichletAllocation(n_components=2, **COMMON), (COUNTS,)),
    ("observed value", lambda: PrivateTensorCompletion(rank=1, value_range=(1, 5),
                                                      shape=(30, 20), **COMMON),
     (PAIRS, VALUES)),
    ("user", lambda: PrivateTensorCompletion(rank=1, value_range=(1, 5), shape=(30, 20),
                                             privacy_unit="user", **COMMON), (PAIRS, VALUES)),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # noise-dominated components at this size
@pytest.mark.parametrize("unit, make, data", CASES,
                         ids=[f"{make().__class__.__name__}-{unit}" for unit, make, _ in CASES])
def test_a_private_fit_names_its_unit_in_the_cost_and_the_ledger(unit, make, data):
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    est = make().set_params(accountant=accountant).fit(*data)
    assert est.privacy_cost_.unit == unit
    assert accountant.history()[-1].label.endswith(f"unit={unit!r})")


@pytest.mark.parametrize("unit, make, data", [CASES[0], CASES[6], CASES[7], CASES[9]])
def test_the_preview_names_the_unit_before_any_data(unit, make, data):
    # (n_samples, n_features): a completion's are its number of entries and the tensor's order
    assert make().privacy_cost(*data[0].shape).unit == unit


def test_a_fit_without_a_guarantee_names_no_unit():
    accountant = PrivacyAccountant(epsilon=np.inf, delta=1e-5)
    with pytest.warns(PrivacyWarning, match="without a privacy guarantee"):
        est = PrivatePCA(n_components=2, epsilon=np.inf, accountant=accountant).fit(ROWS)
    assert est.privacy_cost_.unit is None and "unit=" not in accountant.history()[-1].label


def test_a_search_names_its_unit_and_refuses_a_candidate_of_another_unit():
    search = PrivateGridSearchCV(PrivatePCA(data_norm=1.0, random_state=0),
                                 {"n_components": [1, 2]}, epsilon=1.0, delta=1e-5,
                                 random_state=0)
    assert search.privacy_cost(*ROWS.shape).unit == "row"
    user = PrivateTensorCompletion(rank=1, value_range=(1, 5), shape=(30, 20),
                                   privacy_unit="user", random_state=0)
    search = PrivateGridSearchCV(user, {"rank": [1, 2]}, epsilon=1.0, delta=1e-5, random_state=0)
    assert search.privacy_cost(3000, 2).unit == "user"  # searched by user (test_search_by_user)
    accountant = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    value = PrivateTensorCompletion(rank=1, value_range=(1, 5), shape=(30, 20), random_state=0)
    search = PrivateGridSearchCV(value, {"privacy_unit": ["value", "user"]}, epsilon=1.0,
                                 delta=1e-5, accountant=accountant, random_state=0)
    with pytest.raises(ValueError, match="protects one user, but the search splits and scores "
                                         "by observed value"):
        search.fit(PAIRS, VALUES)
    assert accountant.history() == []
