"""``PrivatePCA(method="auto")``: every choice it makes is previewed by ``privacy_cost`` as the
fit records it (event, unit, queries), and its rule reads public settings only (docs/choosing.rst,
``benchmarks/results/pca_high_d.md``)."""
import math

import numpy as np
import pytest

from dptensor import PrivatePCA
from dptensor.algorithms.pca_methods import (CLIPPED_STEPS, MAX_CLIPPED_FEATURES,
                                             MIN_CLIPPED_FEATURES, resolve)
from dptensor.algorithms.power import MAX_DENSE_FEATURES

LO, HI = MIN_CLIPPED_FEATURES, MAX_CLIPPED_FEATURES

# (d, n, groups, calibration, the method "auto" runs): every branch of the rule
BRANCHES = [
    (40, 300, False, "exact", "analyze_gauss"),
    (LO, 300, False, "exact", "clipped_power"),
    (MAX_DENSE_FEATURES + 1, 60, False, "exact", "clipped_power"),
    (LO, 300, True, "exact", "analyze_gauss"),
    (LO, 300, False, "paper", "analyze_gauss"),
    (MAX_DENSE_FEATURES + 1, 60, False, "paper", "power"),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # noise-dominated components at this size
@pytest.mark.parametrize("d, n, grouped, calibration, expected", BRANCHES)
def test_the_preview_is_the_fits_charge_for_every_auto_choice(d, n, grouped, calibration,
                                                              expected):
    X = np.random.default_rng(d).standard_normal((n, d)) / math.sqrt(d)
    groups = np.arange(n) // 2 if grouped else None
    make = lambda: PrivatePCA(2, epsilon=1.0, delta=1e-6, data_norm=1.0,  # noqa: E731
                              calibration=calibration, random_state=0)
    preview = make().privacy_cost(n // 2 if grouped else n, d, groups=grouped)
    fitted = make().fit(X, groups=groups)
    assert fitted.method_ == expected
    assert preview == fitted.privacy_cost_
    assert preview.event == fitted.privacy_cost_.event
    assert preview.unit == fitted.privacy_cost_.unit
    assert preview.n_queries == fitted.privacy_cost_.n_queries


def test_the_rule_at_its_edges():
    private = dict(private=True)
    assert resolve("auto", LO - 1, False, **private).name == "analyze_gauss"
    assert resolve("auto", LO, False, **private).name == "clipped_power"
    # beyond MAX_DENSE_FEATURES the power method's 7 releases from a random start fail at every
    # cell of the grid (d = 3000): the clipped method's start is a d x d matrix up to HI
    assert resolve("auto", MAX_DENSE_FEATURES + 1, False, **private).name == "clipped_power"
    assert resolve("auto", HI, False, **private).name == "clipped_power"
    assert resolve("auto", HI + 1, False, **private).name == "power"
    assert resolve("auto", HI, False, private=False).name == "power"
    assert resolve("auto", LO, True, **private).name == "power"  # a precomputed matrix
    assert resolve("auto", LO, False, grouped=True, **private).name == "analyze_gauss"
    cost = PrivatePCA(5, epsilon=1.0, data_norm=1.0).privacy_cost(10 ** 5, 3000)
    assert cost.n_queries == 1 + CLIPPED_STEPS
