"""Adversary review, round 5 (adv4): today's calibration and noise-key changes."""
import dataclasses
import functools
import math

import mpmath
import numpy as np
import pytest

from dptensor.accounting import GaussianEvent, calibrate_gaussian, epsilon_of, gdp_epsilon
from dptensor.mechanisms.randomness import _describe


def _true_delta(eps, mu):
    with mpmath.workdps(60):
        eps, mu = mpmath.mpf(eps), mpmath.mpf(mu)
        return (mpmath.ncdf(-eps / mu + mu / 2)
                - mpmath.e**eps * mpmath.ncdf(-eps / mu - mu / 2))


@pytest.mark.parametrize("eps", [1e-6, 1e-4, 1.0, 1e3])
@pytest.mark.parametrize("delta", [1e-300, 1e-100, 1e-12, 1e-5, 0.999])
@pytest.mark.parametrize("n", [1, 10**7])
def test_calibrated_gaussian_costs_at_most_its_target(eps, delta, n):
    """The noise calibrate_gaussian returns costs, at 60 digits, at most (eps, delta). At
    eps=1e-6, delta=1e-300 the profile's two terms cancel to 1e-5 of their size and the
    float profile lay below the true one by more than the 1e-10 margin (true delta 1.00003x)."""
    z = calibrate_gaussian(eps, delta, n)
    assert _true_delta(eps, math.sqrt(n) / z) <= delta
    # and the accountant's price of that event is no lower than its true cost
    mu = math.sqrt(n) / z
    assert _true_delta(gdp_epsilon(mu, delta), mu) <= delta
    assert epsilon_of(GaussianEvent(z, n), delta) <= eps


class _Slots:
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a


@dataclasses.dataclass(frozen=True, slots=True)
class _Frozen:
    a: int


@pytest.mark.parametrize("a, b", [
    ({1, 2}, {3}), (frozenset({1}), frozenset({2})), (b"a", b"b"), (1j, 2j),
    (np.True_, np.False_), (_Slots(1), _Slots(2)), (_Frozen(1), _Frozen(2)),
    (functools.partial(np.power, 2), functools.partial(np.power, 3)),
    (np.datetime64("2020-01-01"), np.datetime64("2021-01-01")), (range(3), range(4)),
], ids=["set", "frozenset", "bytes", "complex", "np.bool_", "slots", "dataclass-slots",
        "partial", "datetime64", "range"])
def test_different_public_values_are_described_apart(a, b):
    """Two different public values of one type have different descriptions: each was described
    by its class alone, so two seeded fits told apart only by such a parameter (a step's
    functools.partial, a set of columns) shared their noise."""
    assert _describe(a) != _describe(b)
    assert _describe(a) == _describe(a)


def test_a_set_of_strings_is_described_alike_in_every_process():
    """A set's description does not follow its iteration order (hash randomisation of strings
    differs between processes, a joblib worker's included)."""
    import subprocess
    import sys
    code = ("from dptensor.mechanisms.randomness import _describe;"
            "print(_describe({'alpha','beta','gamma','delta','eps'}))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": str(s)},
                           check=True).stdout for s in range(6)}
    assert len(outs) == 1


def test_a_nested_learner_is_described_alike_in_every_process():
    """A learner inside a search is described without its accountant, verbosity or n_jobs
    (as a fit's own parameters are): its accountant's description held a random id and
    the process id, so one seeded search keyed its noise differently in every process."""
    import subprocess
    import sys
    code = ("from dptensor import PrivatePCA, PrivacyAccountant;"
            "from dptensor.mechanisms.randomness import _describe;"
            "acc = PrivacyAccountant(10, 1e-5);"
            "print(_describe({'estimator': PrivatePCA(data_norm=1.0, accountant=acc,"
            " random_state=3, verbose=1)}))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)}
    assert len(outs) == 1


def test_the_accountant_refuses_a_spend_a_hair_over_its_budget():
    """A spend whose composed cost exceeds the budget is refused however little: the check let
    the total run to epsilon * (1 + 1e-9), so a fit at epsilon=1 + 5e-10 was recorded under a
    budget of 1 (the ledger then held more than the promised guarantee)."""
    from dptensor import PrivacyAccountant
    from dptensor.exceptions import BudgetExceededError
    acc = PrivacyAccountant(1.0, 1e-5)
    z = calibrate_gaussian(1.0 + 5e-10, 1e-5, 3)
    with pytest.raises(BudgetExceededError):
        acc.spend(GaussianEvent(z, 3))
    assert acc.history() == []
    acc.spend(GaussianEvent(calibrate_gaussian(1.0, 1e-5, 3), 3))  # the budget itself fits


def test_a_user_level_fit_never_warns_of_a_stray_index():
    """The stray-index warning reads the positions, which a user-level fit keeps private: it
    fired (before the refusal of the inferred shape) and told where the largest user index lay."""
    import warnings

    from dptensor import PrivacyAccountant, PrivateTensorCompletion
    rng = np.random.default_rng(0)
    X = np.stack([rng.integers(0, 50, 300), rng.integers(0, 20, 300)], axis=1)
    X[0, 0] = 5000  # one stray user index
    y = rng.uniform(1, 5, 300)
    acc = PrivacyAccountant(10, 1e-5)
    est = PrivateTensorCompletion(privacy_unit="user", epsilon=1.0, value_range=(1, 5),
                                  max_ratings_per_user=10, accountant=acc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="needs the public shape"):
            est.fit(X, y)
    assert acc.history() == []


def test_the_profile_bound_of_an_underflowed_term_is_zero():
    """A profile term that underflows (log -inf) is an exact 0: its error bound was 0 * inf,
    NaN, so the bound read 1 (and numpy warned) where the profile is 0."""
    import warnings

    from dptensor.accounting.composition import _gdp_delta_above
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _gdp_delta_above(1e308, 1.0) == 0.0


def test_a_huge_int_parameter_does_not_fail_after_the_spend():
    """An int parameter past Python's 4300-digit decimal limit (block_size=10**5000, accepted
    as a size) failed in the seeded noise key, after the spend: the budget was lost."""
    from dptensor import PrivacyAccountant, PrivatePCA
    X = np.random.default_rng(0).normal(size=(50, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    acc = PrivacyAccountant(10, 1e-5)
    PrivatePCA(n_components=2, data_norm=1.0, epsilon=1.0, block_size=10**5000, random_state=0,
               accountant=acc).fit(X)
    assert len(acc.history()) == 1
    assert _describe(10**5000) != _describe(10**5000 + 1)


@pytest.mark.parametrize("name, before, after", [
    ("random_state", 1, True), ("data_norm", 1.0, True), ("n_components", 2, 2.0)])
def test_a_stream_refuses_an_equal_value_of_another_type(name, before, after):
    """A parameter set mid-stream to an equal value of another type is a change: the stream ran
    on, get_params showing random_state=True for a stream seeded 1 (a refit from those
    parameters is another fit, or refused)."""
    from dptensor import PrivatePCA
    X = np.random.default_rng(0).normal(size=(50, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    est = PrivatePCA(n_components=2, data_norm=1.0, epsilon=1.0, random_state=1)
    est.set_params(**{name: before}).partial_fit(X)
    est.set_params(**{name: after})
    with pytest.raises(ValueError, match="parameters changed during a stream"):
        est.partial_fit(X)
