"""Conventions every estimator shares: signatures, defaults, the data_norm rule, the repr, delta vs n."""
import inspect
import warnings

import numpy as np
import pytest

from dptensor import (AdaptivePrivatePCA, PrivacyAccountant, PrivacyWarning, PrivateGaussianMixture,
                      PrivateLatentDirichletAllocation, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from expected_warnings import COMPLETION_NOISE, noise_dominated

ESTIMATORS = [PrivatePCA, AdaptivePrivatePCA, PrivateTensorDecomposition, StreamingTensorPower,
              PrivateTensorCompletion, PrivateGaussianMixture, PrivateLatentDirichletAllocation]
ROW_LEVEL = [PrivatePCA, AdaptivePrivatePCA, PrivateTensorDecomposition, StreamingTensorPower,
             PrivateGaussianMixture]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_parameters_after_the_first_are_keyword_only_and_all_have_defaults(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), cls
    assert all(p.default is not inspect.Parameter.empty for p in params), cls
    cls()  # constructible with no argument
    with pytest.raises(TypeError):
        cls(2, 0.5)


def test_adaptive_pca_positional_call_from_the_report_is_refused():
    with pytest.raises(TypeError):
        AdaptivePrivatePCA(2, 0.5, 1e-6, 3)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_one_default_epsilon_everywhere(cls):
    assert inspect.signature(cls.__init__).parameters["epsilon"].default == np.inf


@pytest.mark.parametrize("cls", ROW_LEVEL)
def test_a_private_row_level_fit_needs_an_explicit_bound(cls):
    X = np.random.default_rng(0).standard_normal((200, 4))
    assert inspect.signature(cls.__init__).parameters["data_norm"].default is None
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    with pytest.raises(ValueError, match="data_norm is required"):
        cls(1, epsilon=1.0, accountant=budget).fit(X)
    assert budget.spent()[0] == 0.0  # refused before any spend


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_repr_always_shows_epsilon(cls):
    assert "epsilon=inf" in repr(cls())
    assert "epsilon=0.5" in repr(cls(epsilon=0.5))
    assert repr(cls(epsilon=0.5)).count("epsilon=") == 1


@pytest.mark.parametrize("make, X", [
    (lambda: PrivatePCA(1, epsilon=1.0, data_norm=3.0), (300, 4)),
    (lambda: AdaptivePrivatePCA(epsilon=1.0, data_norm=3.0, n_iter=1), (300, 4)),
    (lambda: PrivateTensorDecomposition(1, epsilon=1.0, data_norm=3.0, n_restarts=2, n_iter=2), (300, 4)),
    (lambda: StreamingTensorPower(1, epsilon=1.0, data_norm=3.0, n_restarts=2, n_iter=2, batch_size=100),
     (300, 4)),
    (lambda: PrivateGaussianMixture(1, epsilon=1.0, data_norm=3.0, n_restarts=2, n_iter=2), (300, 4)),
])
@noise_dominated()  # a few hundred rows of noise (small, so 1/n is large): no real component
def test_delta_not_below_one_over_n_warns_naming_n(make, X):
    X = np.random.default_rng(1).standard_normal(X)
    budget = PrivacyAccountant(epsilon=10.0, delta=0.01)  # 0.01 >= 1/300
    with pytest.warns(PrivacyWarning) as caught:
        make().set_params(accountant=budget).fit(X)
    messages = [str(w.message) for w in caught if issubclass(w.category, PrivacyWarning)]
    assert any("delta=0.01" in m and "n=300" in m for m in messages), messages
    with warnings.catch_warnings():  # below 1/n: no such warning
        warnings.simplefilter("error", PrivacyWarning)
        make().set_params(delta=1e-6).fit(X)


def test_delta_check_warns_before_anything_is_spent():
    X = np.random.default_rng(2).standard_normal((50, 3))
    budget = PrivacyAccountant(epsilon=10.0, delta=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        with pytest.raises(PrivacyWarning, match="n=50"):
            PrivatePCA(1, epsilon=1.0, data_norm=3.0, accountant=budget).fit(X)
    assert budget.spent()[0] == 0.0


def test_every_estimator_is_importable_from_the_top_level_package():
    import dptensor
    from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation

    assert dptensor.PrivateGaussianMixture is PrivateGaussianMixture
    assert dptensor.PrivateLatentDirichletAllocation is PrivateLatentDirichletAllocation
    assert {"PrivateGaussianMixture", "PrivateLatentDirichletAllocation"} <= set(dptensor.__all__)


@pytest.mark.parametrize("make, data, n, unit", [
    (lambda: PrivateLatentDirichletAllocation(2, epsilon=1.0, n_restarts=2, n_iter=2), "counts", 300,
     "documents"),
    pytest.param(lambda: PrivateTensorCompletion(2, epsilon=1.0, value_range=(-3.0, 3.0), n_iter=2),
                 "entries", 200, "observed values", marks=COMPLETION_NOISE),
])
@noise_dominated()  # a few hundred rows of noise (small, so 1/n is large): no real component
def test_delta_not_below_one_over_n_warns_naming_the_unit(make, data, n, unit):
    rng = np.random.default_rng(3)
    if data == "counts":
        args = (rng.poisson(1.0, (n, 12)).astype(float) + np.eye(n, 12) * 3 + 3 * (np.arange(12) == 0),)
    else:
        args = (rng.integers(0, 6, (n, 3)), rng.uniform(-1.0, 1.0, n))
    budget = PrivacyAccountant(epsilon=10.0, delta=0.01)  # 0.01 >= 1/n
    with pytest.warns(PrivacyWarning, match=f"n={n} {unit}"):
        make().set_params(accountant=budget).fit(*args)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)])
def test_verbose_is_checked_by_every_estimator_before_any_spend(bad, error):
    """One rule (``check_verbose``) for every estimator; before: PCA, AdaptivePrivatePCA and
    completion accepted any verbose (``verbose=-1`` printed progress)."""
    import dptensor
    from dptensor.datasets import make_low_rank_tensor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4)) / 4
    data = make_low_rank_tensor((6, 6, 6), 2, missing_ratio=0.5, random_state=0)
    for est, args in [(dptensor.PrivatePCA(2), (X,)), (dptensor.AdaptivePrivatePCA(1), (X,)),
                      (dptensor.PrivateTensorDecomposition(2), (X,)),
                      (dptensor.StreamingTensorPower(1, batch_size=100, n_iter=2), (X,)),
                      (dptensor.PrivateTensorCompletion(), (data["indices"], data["values"])),
                      (dptensor.PrivateGaussianMixture(2), (X,))]:
        acc = dptensor.PrivacyAccountant(10.0)
        est.set_params(epsilon=1.0, verbose=bad, accountant=acc,
                       **({"value_range": (0, 1)} if "value_range" in est.get_params() else {"data_norm": 1.0}))
        with pytest.raises(error, match="verbose"):
            est.fit(*args)
        assert acc.history() == [], type(est).__name__


#: Parameters a reader needs explained to know what a fit promises and spends.
PRIVACY_PARAMETERS = ("epsilon", "delta", "accountant", "random_state", "data_norm", "value_range",
                      "calibration", "offset_share", "doc_clip", "refine_iter", "factor_modes")


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_parameter_is_documented_and_the_privacy_ones_are_explained(cls):
    """Before: help(PrivateLatentDirichletAllocation) listed epsilon, delta and accountant with no
    word on what they do, as did completion's epsilon and three estimators' accountant."""
    ClassDoc = pytest.importorskip("numpydoc.docscrape").ClassDoc
    documented = {name.strip(): "".join(p.desc).strip()
                  for p in ClassDoc(cls, config={"show_class_members": False})["Parameters"]
                  for name in p.name.split(",")}
    params = list(inspect.signature(cls.__init__).parameters)[1:]
    assert [p for p in params if p not in documented] == [], cls
    assert [p for p in params if p in PRIVACY_PARAMETERS and not documented[p]] == [], cls
