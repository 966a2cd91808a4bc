"""The non-private default on sparse data: ``reg="auto"`` estimates the noise variance over the
residual degrees of freedom, so rows with a few entries each do not drag the ridge down."""
import math
import warnings

import numpy as np
import pytest

from dptensor.algorithms.completion.als import MIN_RESIDUAL_DOF, noise_variance, ridge_dof
from dptensor.completion import PrivateTensorCompletion


def _sparse_ratings(seed, shape=(100, 3000, 5), n=8000):
    """Users x items x periods, about 2 ratings per item: offsets, a rank-3 user x item taste and
    noise 0.8 on a 1-5 scale (``benchmarks.bench_scaling.ratings`` at a test's size); a fifth held
    out."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(math.prod(shape), n, replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    U, V = rng.standard_normal((shape[0], 3)), rng.standard_normal((shape[1], 3))
    f = (3.5 + 0.4 * rng.standard_normal(shape[0])[X[:, 0]]
         + 0.5 * rng.standard_normal(shape[1])[X[:, 1]]
         + 0.3 * np.einsum("ek,ek->e", U[X[:, 0]], V[X[:, 1]]))
    y = np.clip(np.round(f + 0.8 * rng.standard_normal(n)), 1, 5)
    test = rng.random(n) < 0.2
    return X[~test], y[~test], X[test], y[test]


@pytest.mark.parametrize("seed", [0, 1])
def test_default_on_sparse_ratings_is_no_worse_than_the_training_mean(seed):
    # With the noise variance over every entry the fit overfitted the items' few ratings (test
    # RMSE 1.33 and 1.31 here against the training mean's 1.08 and 1.09): its vanishing
    # residuals shrank the ridge, which let it overfit more.
    X, y, Xt, yt = _sparse_ratings(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # epsilon=inf says it is not private
        model = PrivateTensorCompletion(value_range=(1, 5), shape=(100, 3000, 5),
                                        random_state=0).fit(X, y)
    rmse = np.sqrt(np.mean((model.predict(Xt) - yt) ** 2))
    mean = np.sqrt(np.mean((y.mean() - yt) ** 2))
    assert rmse < 0.96 * mean
    # and it does not collapse onto the training entries
    assert np.sqrt(np.mean((model.predict(X) - y) ** 2)) > 0.6


def test_ridge_dof_is_the_trace_of_the_ridge_fits_hat_matrices(rng):
    reg = 0.3
    designs = [rng.standard_normal((k, 4)) for k in (0, 1, 3, 10)]  # rows with 0 .. 10 entries
    grams = np.stack([K.T @ K + reg * np.eye(4) for K in designs])
    hat = sum(np.trace(K @ np.linalg.solve(K.T @ K + reg * np.eye(4), K.T))
              for K in designs if len(K))
    assert ridge_dof(grams, reg) == pytest.approx(hat, rel=1e-10)
    assert ridge_dof(grams[:1], reg) == pytest.approx(0.0, abs=1e-12)  # no entry: nothing fitted


def test_noise_variance_divides_by_the_residual_dof_at_least_a_share_of_the_entries():
    assert noise_variance(90.0, 100, 10.0) == pytest.approx(1.0)
    assert noise_variance(90.0, 100, 0.0) == pytest.approx(0.9)
    assert noise_variance(5.0, 100, 150.0) == pytest.approx(5.0 / (MIN_RESIDUAL_DOF * 100))



@pytest.mark.parametrize("scale, twin", [(1e20, 1.0), (1e12, 1.0 + 1e-13)])
def test_ridge_dof_falls_back_to_the_pseudo_inverse_where_the_ridge_is_lost(scale, twin, rng):
    # Grams so large that a 1e-4 ridge is lost in their rounding: exactly singular (LU raises) or
    # nearly (LU's inverse gives a row more than p degrees of freedom): the pseudo-inverse's
    # answer, as before the LU.
    reg = 1e-4
    K = rng.standard_normal((5, 3))
    K[:, 2] = K[:, 0] * twin
    grams = np.stack([K.T @ K + reg * np.eye(3), scale * (K.T @ K) + reg * np.eye(3)])
    pinv = np.linalg.pinv(grams, hermitian=True)
    assert ridge_dof(grams, reg) == pytest.approx(np.sum(3 - reg * np.trace(pinv, axis1=1,
                                                                            axis2=2)), rel=1e-9)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_dof_is_counted_only_in_the_sweeps_whose_noise_variance_is_read(compiled, monkeypatch,
                                                                            rng):
    # s2 of sweep k sets the ridge of sweep k + 1 from the warmup on: sweeps warmup - 1 .. n - 2
    # (the order-3 Tucker sweep on the grid counts them in its compiled loops where it can)
    import dptensor.algorithms.completion.als as als_module
    from dptensor.algorithms import compiled as compiled_module
    from dptensor.algorithms.completion import tucker
    from dptensor.algorithms.completion.model import init_model
    from dptensor.algorithms.completion.observations import Observations

    if compiled:
        pytest.importorskip("numba")
    monkeypatch.setattr(compiled_module, "ENABLED", compiled)
    calls = []
    real = als_module.ridge_dof
    monkeypatch.setattr(als_module, "ridge_dof", lambda g, reg: calls.append(1) or real(g, reg))
    real_solve = tucker.TuckerSweep3.solve

    def solve(self, model, m, reg, bias, dof):
        out = real_solve(self, model, m, reg, bias, dof)
        if out is not None and dof:
            calls.append("compiled")
        return out

    monkeypatch.setattr(tucker.TuckerSweep3, "solve", solve)
    X, y, _, _ = _sparse_ratings(0, shape=(20, 30, 4), n=600)
    obs = Observations(X, (20, 30, 4))
    for kind in ("cp", "tucker"):
        calls.clear()
        model = init_model(obs.shape, 2, kind, rng, scale=0.1)
        als_module.als(obs, y - y.mean(), model, reg=1e-4, reg_core=1e-4, n_iter=8, tol=0,
                       prior_var=0.02, warmup=5, dof=True)
        assert len(calls) == 3 * 3  # sweeps 4, 5, 6; three modes each
        assert ("compiled" in calls) == (compiled and kind == "tucker")
