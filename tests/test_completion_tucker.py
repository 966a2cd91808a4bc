"""The order-3 Tucker sweep's small pieces (dptensor.algorithms.completion.tucker)."""
import numpy as np
import pytest

from dptensor.algorithms.completion import tucker


@pytest.mark.parametrize("rank", [1, 3, 8, 9])
def test_the_sandwich_is_every_rows_core_gram(rank):
    """``Gm K_i Gm^T`` per row: the one product with ``Gm (x) Gm`` (ranks <= 8) and the stacked
    products (larger ranks) agree with a plain loop to rounding."""
    rng = np.random.default_rng(rank)
    Gm = rng.standard_normal((rank, rank * rank))
    A = rng.standard_normal((5, rank * rank, rank * rank))
    K = A + A.transpose(0, 2, 1)
    ref = np.stack([Gm @ k @ Gm.T for k in K])
    got = tucker._sandwich(Gm, K)
    assert got.shape == (5, rank, rank)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_the_small_rank_sandwich_is_the_kronecker_product():
    assert 8**4 <= tucker.SANDWICH_MAX < 9**4  # rank 8 takes the Kronecker product, 9 does not


# ----------------------------------------------------------------- compiled rows (tucker_rows)
def _sweep_setup(rng, shape=(7, 6, 5), rank=3, share=0.6, scale=1.0):
    from dptensor.algorithms.completion.model import init_model
    from dptensor.algorithms.completion.observations import Observations

    cells = int(np.prod(shape))
    flat = rng.choice(cells, int(share * cells), replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    y = scale * rng.uniform(-0.5, 0.5, len(X))
    obs = Observations(X, shape, layout="dense")
    grid = obs.grid()
    Yg = grid.scatter(y)
    model = init_model(shape, rank, "tucker", rng, scale=0.5)
    model.intercept = 0.1
    model.biases = [rng.normal(0, 0.2, n) for n in shape]
    return tucker.TuckerSweep3(grid, Yg, obs.counts), model


def _numpy_update(sweep, model, m, reg, dof):
    from dptensor.algorithms.completion.als import _solve_rows

    gram, rhs = sweep.normal_equations(model, m, True)
    return _solve_rows(model, m, gram, rhs, reg, True, dof)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("passes", ["cells", "entries"])
def test_compiled_rows_solve_every_mode_as_the_numpy_equations(rank, passes, monkeypatch):
    """Each mode's compiled solve (systems, LU, inverse traces, features) gives the NumPy path's
    factors, biases and degrees of freedom to rounding, and its features bit for bit; the core's
    compiled step the NumPy step's core and sum of squared residuals."""
    import copy

    pytest.importorskip("numba")
    monkeypatch.setattr(tucker, "SPARSE_PASS_RATIO", 0 if passes == "entries" else 10**9)
    rng = np.random.default_rng(rank)
    sweep, model = _sweep_setup(rng, rank=rank)
    ref_sweep, ref = copy.deepcopy(sweep), copy.deepcopy(model)
    for m in range(3):
        dof = sweep.solve(model, m, 0.01, True, True)
        ref_dof = _numpy_update(ref_sweep, ref, m, 0.01, True)
        assert dof is not None and dof == pytest.approx(ref_dof, rel=1e-10)
        np.testing.assert_allclose(model.factors[m], ref.factors[m], rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(model.biases[m], ref.biases[m], rtol=1e-9, atol=1e-10)
        # the features the kernel wrote are those NumPy forms from the same rows
        assert np.array_equal(sweep._features(model, m), sweep._form_features(model, m))
    ssr = sweep.core_step(model, 0.01)
    ref_ssr = ref_sweep.core_step(ref, 0.01)
    np.testing.assert_allclose(model.core, ref.core, rtol=1e-9, atol=1e-10)
    assert ssr == pytest.approx(ref_ssr, rel=1e-9)
    assert sweep._raw_core is None  # the compiled core ran (and took mode 2's products)


def test_compiled_rows_give_way_to_numpy_at_a_zero_pivot(rng):
    """Without a ridge a row with no entry has a zero Gram: the LU meets an exact zero pivot,
    the compiled solve hands the mode back untouched (``None``), and ``als`` solves it with
    NumPy (whose ``solve`` raises there, and the pseudo-inverse answers)."""
    pytest.importorskip("numba")
    sweep, model = _sweep_setup(rng, share=0.3)
    empty = np.flatnonzero(sweep.counts[0] == 0)
    if not len(empty):
        sweep.counts[0][0] = 0.0  # (counts only size the bias's diagonal here)
    before = model.factors[0]
    sweep.mask[...] = 0.0  # every row without entries: every Gram 0 (the passes' views too)
    assert sweep.solve(model, 0, -1e-12, True, False) is None
    assert model.factors[0] is before


def test_compiled_dof_takes_the_pseudo_inverse_where_the_ridge_is_lost(rng):
    """Values so large that the ridge is lost in the Grams' rounding: the compiled degrees of
    freedom take the pseudo-inverse's trace there, as ``ridge_dof``."""
    import copy

    pytest.importorskip("numba")
    sweep, model = _sweep_setup(rng, scale=1.0)
    for k in range(3):
        model.factors[k] = model.factors[k] * 1e9
    ref_sweep, ref = copy.deepcopy(sweep), copy.deepcopy(model)
    dof = sweep.solve(model, 0, 1e-4, True, True)
    ref_dof = _numpy_update(ref_sweep, ref, 0, 1e-4, True)
    assert dof == pytest.approx(ref_dof, rel=1e-6)


def test_compiled_and_numpy_tucker_fits_agree(monkeypatch):
    """A whole non-private Tucker fit on the grid, with the compiled loops and without (NumPy's
    path, the fallback): the same model to rounding."""
    import warnings

    from dptensor import PrivacyWarning
    from dptensor.algorithms import compiled
    from dptensor.completion import PrivateTensorCompletion
    from dptensor.datasets import make_low_rank_tensor

    pytest.importorskip("numba")
    data = make_low_rank_tensor((12, 10, 8), 3, missing_ratio=0.5, snr=1.0, random_state=0)

    def fit():
        est = PrivateTensorCompletion(decomposition="tucker", n_iter=12, tol=0, random_state=0,
                                      factor_modes=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return est.fit(data["indices"], data["values"])

    fast = fit()
    monkeypatch.setattr(compiled, "ENABLED", False)
    plain = fit()
    for u, v in zip(fast.factors_ + fast.biases_ + [fast.core_],
                    plain.factors_ + plain.biases_ + [plain.core_]):
        np.testing.assert_allclose(u, v, rtol=1e-8, atol=1e-10)
    assert np.ptp(fast.predict(data["test_indices"])) > 1e-3  # the comparison has content


@pytest.mark.parametrize("shape, n", [((60, 50, 8), 4000), ((7, 6, 5), 50), ((30, 4), 40),
                                      ((5, 5, 5, 5), 300)])
def test_compiled_plain_row_offsets_are_numpys_bit_for_bit(shape, n, monkeypatch):
    """The non-private row effects by the compiled loop (plain_offsets) and by NumPy's loop: the
    same intercept and biases bit for bit, rows without entries 0; entries in any order, and
    sorted (a row's entries in runs, summed in a register)."""
    from dptensor.algorithms.completion.observations import Observations

    pytest.importorskip("numba")
    rng = np.random.default_rng(n)
    flat = rng.choice(int(np.prod(shape)), n, replace=False)
    for positions in (flat, np.sort(flat)):
        _plain_offsets_agree(Observations(np.stack(np.unravel_index(positions, shape), axis=1),
                                          shape), rng.normal(size=n), monkeypatch)


def _plain_offsets_agree(obs, y, monkeypatch):
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion import plain_offsets
    from dptensor.algorithms.completion.offsets import row_offsets

    for shrink in (1e-3, 1.0):
        assert plain_offsets.plain_row_offsets(obs, y, shrink) is not None  # the kernel runs
        fast = row_offsets(obs, y, shrink=shrink)
        monkeypatch.setattr(compiled, "ENABLED", False)
        plain = row_offsets(obs, y, shrink=shrink)
        monkeypatch.setattr(compiled, "ENABLED", True)
        assert fast[0] == plain[0]
        assert all(np.array_equal(u, v) for u, v in zip(fast[1], plain[1]))


def _pass_reference(sweep, f, F, U):
    """``F^T M`` and ``U^T Y`` summed over mode ``f``, laid ``(cols, n_a, n_b)``, ``a < b``."""
    others = [k for k in range(3) if k != f]
    return tuple(np.tensordot(W, A.transpose(f, *others), axes=([0], [0]))
                 for W, A in ((F, sweep.mask), (U, sweep._Yg)))


@pytest.mark.parametrize("compiled_loops", [True, False])
def test_every_pass_over_the_grid_is_the_whole_products(compiled_loops, monkeypatch):
    """A pass over each mode of the grid (over modes 2 and 0 in blocks of columns: tiny blocks,
    a short last one; over mode 1 a product per row) gives the whole products' sums, with the
    mask's half by subset sums or by the product."""
    from dptensor.algorithms import compiled

    rng = np.random.default_rng(5)
    sweep, model = _sweep_setup(rng, shape=(7, 6, 5))
    monkeypatch.setattr(compiled, "ENABLED", compiled_loops)
    monkeypatch.setattr(tucker, "PASS_BLOCK_BYTES", 16 * 7 * 4)  # a few columns a block
    for f in (2, 0, 1):
        F, U = sweep._form_features(model, f), model.factors[f]
        for got, want in zip(sweep._pass(f, F, U), _pass_reference(sweep, f, F, U)):
            assert got.flags.c_contiguous and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape, n", [((60, 50, 8), 4000), ((7, 6, 5), 50), ((30, 4), 40)])
def test_compiled_counts_and_grid_positions_are_numpys(shape, n, monkeypatch):
    """The entries' row counts and the grid's flat positions, mask and repeated flag by the
    compiled passes (grid_counts) and by NumPy: the same bit for bit, a repeated position
    included; an index out of the shape takes NumPy's path (and its refusal)."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion import grid_counts
    from dptensor.algorithms.completion.observations import DenseGrid, Observations

    pytest.importorskip("numba")
    rng = np.random.default_rng(n)
    X = np.stack(np.unravel_index(rng.choice(int(np.prod(shape)), n, replace=False), shape), 1)
    for XX in (X, np.concatenate([X, X[:2]])):
        assert grid_counts.entry_counts(np.asfortranarray(XX), shape) is not None
        fast = Observations(XX, shape)
        fast_grid = DenseGrid(fast.X, shape)
        monkeypatch.setattr(compiled, "ENABLED", False)
        plain = Observations(XX, shape)
        plain_grid = DenseGrid(plain.X, shape)
        monkeypatch.setattr(compiled, "ENABLED", True)
        assert all(np.array_equal(u, v) for u, v in zip(fast.counts, plain.counts))
        assert np.array_equal(fast_grid.flat, plain_grid.flat)
        assert np.array_equal(fast_grid.mask, plain_grid.mask)
        assert fast_grid.repeated == plain_grid.repeated == (len(XX) > n)
    bad = X.copy()
    bad[0, 1] = shape[1]  # out of the shape
    assert grid_counts.entry_counts(bad, shape) is None
    assert grid_counts.grid_positions(bad, shape) is None
    with pytest.raises(ValueError):
        DenseGrid(bad, shape)


def test_compiled_rows_leave_larger_ranks_to_numpy(rng):
    """Above ``COMPILED_MAX_RANK`` the compiled loops' rank^6 sums per row cost more than NumPy's
    products: the sweep hands the mode back (``None``), the model untouched."""
    pytest.importorskip("numba")
    sweep, model = _sweep_setup(rng, rank=tucker.COMPILED_MAX_RANK + 1)
    before = model.factors[0]
    assert sweep.solve(model, 0, 0.01, True, True) is None
    assert model.factors[0] is before


# ----------------------------------------------------------------- the mask's pass (mask_pass)
@pytest.mark.parametrize("n, cells, f", [(60, 3600, 12), (7, 30, 3), (8, 5, 7), (9, 11, 18),
                                         (17, 40, 12), (1, 3, 3), (64, 9, 10)])
@pytest.mark.parametrize("layout", ["C", "transposed"])
def test_the_mask_pass_is_the_product_with_the_mask(n, cells, f, layout):
    """Subset sums of the features give ``F^T M`` to rounding for masks of any number of rows
    (a last byte part full, more than 8 bytes), C-ordered or transposed (the grid's two
    sides); the compiled packing is NumPy's ``packbits`` bit for bit."""
    from dptensor.algorithms.completion import mask_pass

    pytest.importorskip("numba")
    rng = np.random.default_rng(n * 7 + cells)
    M = (rng.random((n, cells)) < 0.5).astype(float)
    M = M if layout == "C" else np.ascontiguousarray(M.T).T
    F = rng.standard_normal((n, f))
    passes = mask_pass.MaskPass(M)
    P = passes(F)
    np.testing.assert_allclose(P, F.T @ M, rtol=0, atol=1e-13 * max(1, n))
    assert np.array_equal(passes._bits, mask_pass.pack_mask(M))
    np.testing.assert_allclose(passes(2.0 * F), 2.0 * F.T @ M, rtol=0, atol=1e-13 * max(1, n))


def test_the_mask_pass_leaves_what_it_does_not_cover_to_the_product(monkeypatch):
    """No numba, more features or rows than the compiled loops cover, another dtype: ``None``
    (the caller multiplies), and nothing is packed."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion import mask_pass

    pytest.importorskip("numba")
    M = np.ones((9, 4))
    for F in (np.ones((9, mask_pass.MAX_FEATURES + 1)), np.ones((9, 3), dtype=np.float32),
              np.ones((8, 3))):
        assert mask_pass.MaskPass(M)(F) is None
    big = mask_pass.MaskPass(np.ones((mask_pass.MAX_ROWS + 1, 2)))
    assert big(np.ones((mask_pass.MAX_ROWS + 1, 3))) is None and big._bits is None
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert mask_pass.MaskPass(M)(np.ones((9, 3))) is None


def test_the_sweep_takes_the_mask_pass_on_the_grid(monkeypatch):
    """On the grid, each pass's mask half comes from the subset sums (the product with the mask
    is not taken), over each of the three modes."""
    from dptensor.algorithms.completion import mask_pass

    pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    sweep, model = _sweep_setup(rng, shape=(9, 7, 10))
    calls = []
    real = mask_pass.MaskPass.__call__
    monkeypatch.setattr(mask_pass.MaskPass, "__call__",
                        lambda self, F: calls.append(F.shape) or real(self, F))
    for f in (2, 0, 1):
        F, U = sweep._form_features(model, f), model.factors[f]
        for got, want in zip(sweep._pass(f, F, U), _pass_reference(sweep, f, F, U)):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert len(calls) == 3


def test_three_passes_serve_two_sweeps_on_the_grid(monkeypatch):
    """Each pass serves the next update too (over the mode that does not update next): two
    sweeps read the grid three times, not four; on the observed entries twice a sweep."""
    from dptensor.algorithms.completion.als import als
    from dptensor.algorithms.completion.model import init_model
    from dptensor.algorithms.completion.observations import Observations

    rng = np.random.default_rng(2)
    shape = (9, 8, 7)
    real = tucker.TuckerSweep3._pass
    for ratio, expected in ((10**9, [2, 1, 0]), (0, [2, 0, 2, 0])):
        monkeypatch.setattr(tucker, "SPARSE_PASS_RATIO", ratio)
        flat = rng.choice(int(np.prod(shape)), 300, replace=False)
        X = np.stack(np.unravel_index(flat, shape), axis=1)
        y = rng.uniform(-0.5, 0.5, len(X))
        seen = []
        monkeypatch.setattr(tucker.TuckerSweep3, "_pass",
                            lambda self, f, F, U: seen.append(f) or real(self, f, F, U))
        model = init_model(shape, 2, "tucker", rng, scale=0.5)
        als(Observations(X, shape, layout="dense"), y, model, reg=0.1, reg_core=0.1, n_iter=2,
            tol=0)
        assert seen == expected, ratio


# ------------------------------------------------------------- the values' pass (value_pass)
@pytest.mark.parametrize("shape", [(60, 60, 60), (7, 6, 5), (3, 9, 17), (1, 2, 8), (5, 4, 1)])
@pytest.mark.parametrize("rank", [1, 3, 4])
def test_the_value_pass_is_the_product_over_each_mode(shape, rank):
    """``U^T Y`` summed over each mode by the compiled loops, to rounding, for grids whose last
    mode is shorter than a run of cells, a whole number of runs or runs and a remainder."""
    from dptensor.algorithms.completion.value_pass import value_pass

    pytest.importorskip("numba")
    rng = np.random.default_rng(rank * 100 + shape[2])
    Y = rng.standard_normal(shape)
    for f in range(3):
        U = rng.standard_normal((shape[f], rank))
        others = [k for k in range(3) if k != f]
        want = np.tensordot(U, Y.transpose(f, *others), axes=([0], [0]))
        got = value_pass(Y, U, f)
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * max(shape))


def test_the_value_pass_leaves_what_it_does_not_cover_to_the_product(monkeypatch):
    """A rank above the written-out loops', float32 values or factor, a grid not C-ordered, no
    numba: ``None``, for the caller's product."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion.value_pass import MAX_RANK, value_pass

    pytest.importorskip("numba")
    Y, U = np.ones((4, 5, 6)), np.ones((4, 2))
    assert value_pass(Y, np.ones((4, MAX_RANK + 1)), 0) is None
    assert value_pass(Y.astype(np.float32), U, 0) is None
    assert value_pass(Y, U.astype(np.float32), 0) is None
    assert value_pass(np.asfortranarray(Y), U, 0) is None
    assert value_pass(Y, U, 0) is not None
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert value_pass(Y, U, 0) is None


def test_a_pass_with_the_values_compiled_and_the_mask_multiplied_is_the_whole_products(
        monkeypatch):
    """Where the mask's subset sums do not run (more rows than they cover) the mask's half is
    multiplied in blocks and the values' half still comes from the compiled loops."""
    from dptensor.algorithms.completion import mask_pass, value_pass

    pytest.importorskip("numba")
    rng = np.random.default_rng(12)
    sweep, model = _sweep_setup(rng, shape=(9, 7, 10))
    calls = []
    real = value_pass.value_pass
    monkeypatch.setattr(tucker, "value_pass", lambda *a: calls.append(a[2]) or real(*a))
    monkeypatch.setattr(mask_pass.MaskPass, "__call__", lambda self, F: None)
    monkeypatch.setattr(tucker, "PASS_BLOCK_BYTES", 8 * 9 * 4)  # a few columns a block
    for f in (2, 0, 1):
        F, U = sweep._form_features(model, f), model.factors[f]
        for got, want in zip(sweep._pass(f, F, U), _pass_reference(sweep, f, F, U)):
            assert got.flags.c_contiguous and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert calls == [2, 0, 1]


# ------------------------------------------------- a pass's contraction (pass_contraction)
@pytest.mark.parametrize("shape", [(12, 60, 60), (3, 7, 9), (5, 1, 3), (2, 9, 17)])
@pytest.mark.parametrize("columns", [1, 3, 12, 18])
@pytest.mark.parametrize("compiled_loops", [True, False])
def test_a_pass_contracted_over_either_axis_is_the_product(shape, columns, compiled_loops,
                                                          monkeypatch):
    """Over the last axis (rows of P in runs and a remainder) and the middle one (cells in runs
    and a remainder), by the compiled loops or NumPy's products: the same sums, contiguous."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion.pass_contraction import contract

    pytest.importorskip("numba")
    monkeypatch.setattr(compiled, "ENABLED", compiled_loops)
    rng = np.random.default_rng(columns * 10 + shape[2])
    P = rng.standard_normal(shape)
    for axis, want in ((2, lambda W: np.einsum("fmo,og->fmg", P, W)),
                       (1, lambda W: np.einsum("ag,fab->fgb", W, P))):
        W = rng.standard_normal((shape[axis], columns))
        got = contract(P, W, axis)
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, want(W), rtol=0, atol=1e-13 * shape[axis])


def test_a_pass_contraction_takes_the_compiled_loops_where_they_cover_it(monkeypatch):
    """The compiled loops run for float64 and up to MAX_FEATURES columns; wider features, other
    dtypes and a strided P take NumPy's products."""
    from dptensor.algorithms.completion import pass_contraction as pc
    from dptensor.algorithms.completion.mask_pass import MAX_FEATURES

    pytest.importorskip("numba")
    P, W = np.ones((2, 3, 4)), np.ones((4, 3))
    assert pc._kernel("last", P, W) is not None
    assert pc._kernel("last", P, np.ones((4, MAX_FEATURES + 1))) is None
    assert pc._kernel("last", P.astype(np.float32), W) is None
    assert pc._kernel("middle", P[:, :, ::2], W[:2]) is None


@pytest.mark.parametrize("compiled_loops", [True, False])
def test_tucker_residuals_far_below_the_offsets_are_the_grids(compiled_loops, monkeypatch):
    """The core step's residuals by the normal equations' expansion cancel where they are far
    below the values (offsets of 1e6, residuals of 1e-5: the training RMSE read 0): there the
    sweep sums them over the grid, by the compiled core and by NumPy's."""
    from dptensor.algorithms import compiled
    from dptensor.algorithms.completion.als import als
    from dptensor.algorithms.completion.design import _grid_ssr, grid_design
    from dptensor.algorithms.completion.model import init_model
    from dptensor.algorithms.completion.observations import Observations

    monkeypatch.setattr(compiled, "ENABLED", compiled_loops)
    rng = np.random.default_rng(0)
    shape = (12, 11, 10)
    flat = rng.choice(int(np.prod(shape)), int(np.prod(shape)) // 2, replace=False)
    X = np.stack(np.unravel_index(flat, shape), axis=1)
    y = 1e6 + 1e-5 * rng.normal(size=len(X))
    obs = Observations(X, shape, layout="dense")
    model = init_model(shape, 2, "tucker", rng, scale=0.1)
    model.intercept, model.biases = 1e6, [np.zeros(n) for n in shape]
    history = []
    als(obs, y, model, reg=1e-3, reg_core=1e-3, n_iter=4, tol=0, history=history)
    grid = obs.grid(model, als=True)
    direct = _grid_ssr(grid, grid.scatter(y), model, grid_design(model, 0))
    assert history[-1] == pytest.approx(np.sqrt(direct / len(y)), rel=1e-6)
    assert history[-1] > 0
