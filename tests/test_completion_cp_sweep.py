"""The order-3 CP sweep on the grid (cp_sweep) against the grid's own normal equations."""
import numpy as np
import pytest

from dptensor.algorithms.completion import als as als_module
from dptensor.algorithms.completion.cp_sweep import CPSweep3
from dptensor.algorithms.completion.design import _grid_offsets, _row_bias, grid_design
from dptensor.algorithms.completion.model import init_model
from dptensor.algorithms.completion.observations import Observations


def _setup(rng, shape, rank, share=0.6, biases=True):
    cells = int(np.prod(shape))
    flat = rng.choice(cells, int(share * cells), replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    y = rng.uniform(-0.5, 0.5, len(X))
    obs = Observations(X, shape, layout="dense")
    grid = obs.grid()
    Yg = grid.scatter(y)
    model = init_model(shape, rank, "cp", rng, scale=0.5)
    model.intercept = 0.1
    model.biases = [rng.normal(0, 0.2, n) for n in shape] if biases else []
    return obs, grid, Yg, model


@pytest.mark.parametrize("shape", [(7, 6, 5), (9, 4, 11), (3, 8, 2)])
@pytest.mark.parametrize("rank", [1, 3, 4])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("share", [0.6, 0.1])
def test_the_cp_sweep_gives_the_grids_normal_equations(shape, rank, bias, share):
    """Every mode's Grams and right-hand sides, with the row bias as an unknown or taken off,
    are those of the grid's Khatri-Rao products, whichever pass serves the mode (over the grid's
    cells or, a tenth observed, over the entries)."""
    rng = np.random.default_rng(rank * 10 + shape[0])
    obs, grid, Yg, model = _setup(rng, shape, rank, share=share)
    sweep = CPSweep3(grid, Yg, obs.counts)
    assert (sweep._sparse is not None) == (share < 0.15)
    for m in (0, 1, 2, 0, 1, 2):
        got = sweep.normal_equations(model, m, bias)
        want = grid.normal_equations(m, grid_design(model, m), Yg, obs.counts[m],
                                     _grid_offsets(model, m),
                                     None if bias else _row_bias(model, m), bias=bias)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        model.factors[m] = model.factors[m] + rng.normal(0, 0.1, model.factors[m].shape)
        model.biases[m] = model.biases[m] + rng.normal(0, 0.1, len(model.biases[m]))
    assert sweep.solve(model, 0, 0.1, bias, False) is None


def test_a_cp_model_without_biases_takes_the_intercept_alone():
    rng = np.random.default_rng(3)
    obs, grid, Yg, model = _setup(rng, (6, 5, 7), 2, biases=False)
    sweep = CPSweep3(grid, Yg, obs.counts)
    got = sweep.normal_equations(model, 1, False)
    want = grid.normal_equations(1, grid_design(model, 1), Yg, obs.counts[1],
                                 _grid_offsets(model, 1), None)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_als_on_the_grid_fits_cp_through_the_sweep_as_through_the_grids_equations(monkeypatch):
    """A whole ALS fit of an order-3 CP model on the grid: through the sweep (every mode's sums
    from its passes) and through the grid's own products, the same model to rounding."""
    rng = np.random.default_rng(8)
    obs, grid, Yg, model = _setup(rng, (16, 15, 14), 3)  # sweep_fits: 16 x 12^2 <= 16 x 15 x 14
    y = Yg[tuple(obs.X.T)]
    calls = []
    real = CPSweep3.normal_equations
    monkeypatch.setattr(CPSweep3, "normal_equations",
                        lambda self, *a: calls.append(a[1]) or real(self, *a))
    kwargs = dict(reg=0.1, reg_core=0.1, n_iter=8, tol=0, prior_var=1.0, warmup=2, dof=True)
    history, plain_history = [], []
    fitted = als_module.als(obs, y, _copy(model), history=history, **kwargs)
    assert calls == [0, 1, 2] * 8
    monkeypatch.setattr(als_module, "CPSweep3", lambda *a: None)
    plain = als_module.als(obs, y, _copy(model), history=plain_history, **kwargs)
    for a, b in zip(fitted.factors + fitted.biases, plain.factors + plain.biases):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    # the residuals from the last mode's equations: the training RMSE of every sweep, and the
    # empirical-Bayes ridges they set
    np.testing.assert_allclose(history, plain_history, rtol=1e-9)
    assert history[-1] < history[0]


@pytest.mark.parametrize("bias", [True, False])
def test_the_residuals_from_mode_2s_equations_are_the_grids(bias):
    """``sum base^2 - 2 x . rhs + x^T G x`` for the solved mode 2, with its bias an unknown or
    taken off: the residuals summed over the grid."""
    from dptensor.algorithms.completion.als import _solve_rows
    from dptensor.algorithms.completion.design import _grid_ssr

    rng = np.random.default_rng(21 + bias)
    obs, grid, Yg, model = _setup(rng, (9, 7, 8), 3)
    sweep = CPSweep3(grid, Yg, obs.counts)
    for m in range(3):
        _solve_rows(model, m, *sweep.normal_equations(model, m, bias), 0.3, bias, False)
    want = _grid_ssr(grid, Yg, model, grid_design(model, 0))
    assert sweep.ssr(model, 0.3) == pytest.approx(want, rel=1e-10)


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_cp_als_of_order_3_takes_the_grid_to_fewer_entries_than_other_cp_fits():
    """The layout is chosen from public counts: at 20 cells an entry a CP model of order 3 fits
    by ALS on the grid (its sweep's passes), gradient steps and order 4 on the sorted layouts."""
    from dptensor.algorithms.completion import observations as ob

    rng = np.random.default_rng(4)
    for shape in ((10, 10, 10), (6, 5, 6, 6)):
        cells = int(np.prod(shape))
        flat = rng.choice(cells, cells // 20, replace=False)
        obs = Observations(np.stack(np.unravel_index(flat, shape), axis=1), shape)
        model = init_model(shape, 2, "cp", rng)
        assert (obs.grid(model, als=True) is not None) == (len(shape) == 3)
        assert obs.grid(model) is None
    assert ob.DENSE_RATIO < 20 <= ob.DENSE_RATIO_CP_ALS3


def test_the_sweep_serves_only_where_its_per_row_sums_fit_the_grids_memory(monkeypatch):
    """Each mode's per-row sums are ``n_m x F x F`` (F = 25 at rank 5): beside two short modes
    a long one took 3x the fit's memory estimate after the spend (test_memory's
    completion-cp-long-mode); there the grid's own products serve, the same fit."""
    from dptensor.algorithms.completion.observations import sweep_fits

    assert sweep_fits((60, 60, 60), 5) and sweep_fits((16, 15, 14), 3)
    assert not sweep_fits((2, 2, 20000), 5) and not sweep_fits((8, 7, 6), 3)
    rng = np.random.default_rng(9)
    obs, grid, Yg, model = _setup(rng, (40, 3, 2), 2)
    y = Yg[tuple(obs.X.T)]
    built = []
    monkeypatch.setattr(als_module, "CPSweep3", lambda *a: built.append(1) or CPSweep3(*a))
    fitted = als_module.als(obs, y, _copy(model), reg=0.1, reg_core=0.1, n_iter=3)
    assert not built and all(np.isfinite(f).all() for f in fitted.factors)
    # nor does CP ALS take the grid to the sweep's 32 cells an entry there: to other CP fits' 8
    shape = (4, 4, 2000)
    flat = rng.choice(32000, 32000 // 20, replace=False)
    obs = Observations(np.stack(np.unravel_index(flat, shape), axis=1), shape)
    assert obs.grid(init_model(shape, 3, "cp", rng), als=True) is None  # 2000 x 12^2 > 32000
    assert obs.grid(init_model(shape, 1, "cp", rng), als=True) is not None  # 2000 x 3^2


@pytest.mark.parametrize("offset, noise", [(1e3, 1e-6), (1e6, 1e-8), (1e8, 0.0)])
def test_residuals_far_below_the_offsets_are_the_grids_not_the_expansions_rounding(
        offset, noise, monkeypatch):
    """``sum base^2 - 2 x . rhs + x^T G x`` cancels where the residuals are far below the
    values: at offsets of 1e6 and residuals of 1e-5 it gave a training RMSE of 0.02 (or 0),
    whose empirical-Bayes ridge then moved the factors by 3.8 from the grid's own fit."""
    rng = np.random.default_rng(0)
    shape = (20, 18, 16)
    flat = rng.choice(int(np.prod(shape)), int(0.7 * np.prod(shape)), replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    u = [rng.normal(size=(n, 2)) for n in shape]
    y = (offset + 1e-3 * np.einsum("ir,ir,ir->i", *(f[X[:, k]] for k, f in enumerate(u)))
         + noise * rng.normal(size=len(X)))
    obs = Observations(X, shape, layout="dense")
    model = init_model(shape, 2, "cp", np.random.default_rng(1), scale=0.5)
    model.intercept, model.biases = float(np.mean(y)), [np.zeros(n) for n in shape]
    kwargs = dict(reg=1e-6, reg_core=0.1, n_iter=30, tol=0, prior_var=1.0, warmup=2, dof=True)
    history, plain_history = [], []
    fitted = als_module.als(obs, y, _copy(model), history=history, **kwargs)
    monkeypatch.setattr(als_module, "CPSweep3", lambda *a: None)
    plain = als_module.als(obs, y, _copy(model), history=plain_history, **kwargs)
    np.testing.assert_allclose(history, plain_history, rtol=1e-3)  # 1e8: either path rounds y
    for a, b in zip(fitted.factors, plain.factors):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6)
