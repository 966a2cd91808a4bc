"""The compiled contraction over a symmetric tensor's distinct entries against the NumPy path."""
import warnings

import numpy as np
import pytest

from dptensor import PrivateTensorDecomposition
from dptensor.algorithms import compiled
from dptensor.algorithms import symmetric_contraction as sc
from dptensor.algorithms.operators import SymmetricTensor, symmetrize_tensor
from dptensor.datasets import make_orthogonal_tensor


def _kernel(lanes=1, dtype=np.float64):
    pytest.importorskip("numba")
    kernel = sc.compiled_kernel(lanes, dtype)
    assert kernel is not None
    return kernel


def _close(a, b, rtol):
    """Within ``rtol`` of the reference's largest entry (a sum with cancellations has no
    relative accuracy entry by entry, on either path)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.max(np.abs(a - b)) <= rtol * np.max(np.abs(b))


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7, 8, 9, 13])
@pytest.mark.parametrize("L", [1, 3, 7, 10, 15, 17])
def test_every_placement_of_every_entry_small_d(d, L):
    """Small d walks every block (full, and the last of each k with columns past k); 17
    restarts run in two passes; 3, 7 and 15 with a zero restart."""
    for width in sc.pass_widths(L):
        _kernel(width)
    rng = np.random.default_rng(d * 31 + L)
    T = symmetrize_tensor(rng.standard_normal((d, d, d)))
    U = rng.standard_normal((d, L))
    out = sc.contract_distinct(sc.pack_distinct(T), U)
    _close(out, np.einsum("abc,bl,cl->al", T, U, U), 1e-13)


def test_the_packing_holds_each_distinct_entry_once_with_its_weight():
    """Brute force: the packed numbers are the weighted distinct entries and zeros."""
    d = 9
    T = np.arange(1.0, d**3 + 1).reshape(d, d, d)  # every entry distinct
    packed = sc.pack_distinct(T)
    expected = {}
    for i in range(d):
        for j in range(i, d):
            for k in range(j, d):
                weight = 1 / 3 if i == j == k else 1.0 if (i == j or j == k) else 2.0
                expected[T[k, j, i] * weight] = expected.get(T[k, j, i] * weight, 0) + 1
    kept = packed[packed != 0]
    assert len(kept) == d * (d + 1) * (d + 2) // 6
    assert sorted(kept.tolist()) == pytest.approx(sorted(expected))


@pytest.mark.parametrize("L, widths", [(1, [1]), (10, [10]), (16, [16]), (17, [9, 8]),
                                       (40, [14, 14, 12])])
def test_restarts_run_in_as_few_passes_as_the_lanes_allow(L, widths):
    assert sc.pass_widths(L) == widths
    assert max(widths) <= sc.MAX_LANES and sum(widths) == L


def test_no_restarts_give_an_empty_block_on_the_compiled_path_too():
    """``U`` of shape (d, 0): the NumPy path's (d, 0); the passes divided by zero passes."""
    _kernel()
    d = sc.KERNEL_MIN_D
    op = SymmetricTensor(np.ones((d, d, d)))
    assert sc.pass_widths(0) == [] and op._kernel(0)
    out = op.apply(np.zeros((d, 0)))
    assert out.shape == (d, 0) and out.dtype == np.float64


def test_a_pass_one_short_of_a_multiple_of_four_runs_with_a_zero_restart():
    _kernel(4)
    assert [sc.pass_lanes(w) for w in range(1, 17)] == [1, 2, 4, 4, 5, 6, 8, 8, 9, 10, 12, 12,
                                                       13, 14, 16, 16]
    assert [kernel for _, kernel in sc._passes(3, np.dtype(np.float64))] == [sc.compiled_kernel(4)]
    rng = np.random.default_rng(6)
    T = symmetrize_tensor(rng.standard_normal((6, 6, 6)))
    U = rng.standard_normal((6, 3))
    out = sc.contract_distinct(sc.pack_distinct(T), U)
    assert out.shape == (6, 3)
    _close(out, np.einsum("abc,bl,cl->al", T, U, U), 1e-13)


@pytest.mark.parametrize("d", [64, 101, 130])
def test_the_compiled_path_agrees_with_the_numpy_path(monkeypatch, d):
    _kernel()
    rng = np.random.default_rng(d)
    T = symmetrize_tensor(rng.standard_normal((d, d, d)))
    U = np.linalg.qr(rng.standard_normal((d, 10)))[0]
    fast = SymmetricTensor(T).apply(U)
    monkeypatch.setattr(SymmetricTensor, "use_kernel", False)
    slow = SymmetricTensor(T).apply(U)
    _close(fast, slow, 1e-12)
    assert not np.array_equal(fast, slow)  # the compiled path really ran


def test_float32_stays_float32():
    _kernel(4, np.float32)
    rng = np.random.default_rng(3)
    T = symmetrize_tensor(rng.standard_normal((97, 97, 97))).astype(np.float32)
    U = rng.standard_normal((97, 4)).astype(np.float32)
    out = sc.contract_distinct(sc.pack_distinct(T), U)
    ref = np.einsum("abc,bl,cl->al", T.astype(float), U.astype(float), U.astype(float))
    _close(out, ref.astype(np.float32), 1e-5)


def test_below_the_threshold_and_without_numba_the_numpy_path_runs(monkeypatch):
    rng = np.random.default_rng(4)
    d = sc.KERNEL_MIN_D
    T = symmetrize_tensor(rng.standard_normal((d, d, d)))
    U = rng.standard_normal((d, 3))
    op = SymmetricTensor(T)
    monkeypatch.setattr(compiled, "ENABLED", False)
    monkeypatch.setattr(compiled, "_KERNELS", {})
    assert not op._kernel()
    slow = op.apply(U)
    assert op._distinct is None  # nothing packed for a path not taken
    _close(slow, np.einsum("abc,bl,cl->al", T, U, U), 1e-12)
    small = SymmetricTensor(T[:d - 1, :d - 1, :d - 1])
    monkeypatch.setattr(compiled, "ENABLED", True)
    assert not small._kernel()


@pytest.mark.parametrize("dtype, d, few, many", [(np.float64, 64, 2, 3), (np.float64, 80, 0, 1),
                                                 (np.float32, 64, 7, 8), (np.float32, 72, 5, 6),
                                                 (np.float32, 80, 3, 4), (np.float32, 100, 1, 2),
                                                 (np.float32, 128, 0, 1)])
def test_few_restarts_take_the_numpy_path_while_its_packing_is_small(dtype, d, few, many):
    """One step, one thread: at d=64 one or two float64 restarts took 0.024-0.027 ms compiled
    against the GEMM's 0.018-0.020, one to six float32 ones 0.025-0.040 against 0.009-0.028;
    the compiled path from ``many``."""
    _kernel()
    rng = np.random.default_rng(d)
    op = SymmetricTensor(symmetrize_tensor(rng.standard_normal((d, d, d))).astype(dtype))
    if few:
        assert not op._kernel(few)
        U = rng.standard_normal((d, few)).astype(dtype)
        _close(op.apply(U), np.einsum("abc,bl,cl->al", op.T, U, U), 1e-5)
        assert op._distinct is None  # nothing packed for the path not taken
    assert op._kernel(many)


def test_the_operation_count_covers_both_paths():
    """The rounding allowance's count: the weight, two products, one sum from zero."""
    for d in (1, 5, 96, 200):
        assert sc.contraction_terms(d) == 3 + (d + 1) * (d + 2) // 2
        assert sc.contraction_terms(d) >= 2 + d * (d + 1) // 2  # the GEMM path's


def test_a_fit_finds_the_same_components_on_both_paths(monkeypatch):
    _kernel()
    T, _, V = make_orthogonal_tensor(sc.KERNEL_MIN_D, 3, noise=0.01, random_state=0)

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = PrivateTensorDecomposition(3, n_restarts=5, n_iter=15, random_state=1).fit(T)
        return est.components_, est.eigenvalues_

    fast = fit()
    monkeypatch.setattr(SymmetricTensor, "use_kernel", False)
    slow = fit()
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_float32_sums_stay_float32():
    """Every scalar of the float32 pass is float32: a ``0.0`` start summed the column sums in
    float64 (its mixed loop ran at half the float64 kernel's speed, below the NumPy path's)."""
    numba = pytest.importorskip("numba")
    kernel = numba.njit(fastmath={"reassoc", "contract"})(sc._pass_function(2))
    sc._warm_up(kernel, np.float32, 2)
    typemap = kernel.overloads[kernel.signatures[0]].fndesc.typemap
    floats = {str(t) for name, t in typemap.items() if str(t).startswith("float")}
    assert floats == {"float32"}


def test_a_wider_U_than_the_tensor_is_contracted_in_its_dtype():
    """float32 T, float64 U: the NumPy path's float64 result; the float32 passes rounded U and
    every sum to float32 (7e-7 of the largest coordinate at d=64, where float64 gives 1e-15)."""
    _kernel()
    rng = np.random.default_rng(5)
    d = sc.KERNEL_MIN_D
    T = symmetrize_tensor(rng.standard_normal((d, d, d))).astype(np.float32)
    U = np.linalg.qr(rng.standard_normal((d, 5)))[0]
    out = SymmetricTensor(T).apply(U)
    ref = np.einsum("abc,bl,cl->al", T.astype(np.float64), U, U)
    _close(out, ref, 1e-13)


def _slp_probe(x):  # pragma: no cover (compiled)
    return x + 1.0


def test_concurrent_first_compilations_restore_numba_slp_setting(monkeypatch):
    """Two threads compiling kernels for the first time: each saved the setting it found, so
    the later one saved the other's SLP=1 and restored it after the first had put back 0,
    leaving SLP on for every numba function compiled afterwards, and so with the warnings
    filter that silences the compilation. (A user's numba compilation in another thread also saw
    the flip; numba's compiler lock, held over it, rules out both.)"""
    pytest.importorskip("numba")
    import threading

    from numba.core import config

    monkeypatch.setattr(config, "SLP_VECTORIZE", 0)
    monkeypatch.setattr(compiled, "_KERNELS", {})
    first_in, second_in, first_done = (threading.Event() for _ in range(3))
    filters = list(warnings.filters)

    def first():
        def warm_up(kernel):
            first_in.set()
            second_in.wait(1.0)  # the race: the second thread enters while this one compiles
        compiled.compiled("probe_first", _slp_probe, warm_up, slp=True)
        first_done.set()

    def second():
        def warm_up(kernel):
            second_in.set()
            first_done.wait(1.0)  # ... and leaves after it
        first_in.wait(1.0)
        compiled.compiled("probe_second", _slp_probe, warm_up, slp=True)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert config.SLP_VECTORIZE == 0
    assert warnings.filters == filters  # nor the warnings silenced while compiling


def test_a_failed_compilation_restores_numba_and_falls_back(monkeypatch):
    """A warm-up that raises: ``None`` (the NumPy path), SLP and the warnings as they were, and
    the next compilation is not blocked."""
    pytest.importorskip("numba")
    from numba.core import config

    monkeypatch.setattr(config, "SLP_VECTORIZE", 0)
    monkeypatch.setattr(compiled, "_KERNELS", {})
    filters = list(warnings.filters)

    def fails(kernel):
        assert config.SLP_VECTORIZE == 1
        raise RuntimeError("no compiler here")

    assert compiled.compiled("probe_fails", _slp_probe, fails, slp=True) is None
    assert config.SLP_VECTORIZE == 0 and warnings.filters == filters
    kernel = compiled.compiled("probe_works", _slp_probe, lambda k: k(1.0), slp=True)
    assert kernel is not None and kernel(2.0) == 3.0


@pytest.mark.parametrize("failure", ["no_locator", "save_fails"])
def test_without_a_writable_cache_the_kernel_compiles_uncached(monkeypatch, failure):
    """A read-only install with no writable cache directory (numba finds no locator and refuses
    ``cache=True``), or a cache whose write fails (a full disk): the kernel still compiles, the
    step is the same, and nothing warns."""
    pytest.importorskip("numba")
    from numba.core import caching

    if failure == "no_locator":
        for locator in caching.CacheImpl._locator_classes:
            monkeypatch.setattr(locator, "from_function", classmethod(lambda cls, *a: None))
    else:
        def full(self, *args, **kwargs):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(caching.IndexDataCacheFile, "save", full)
    monkeypatch.setattr(compiled, "_KERNELS", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = sc.compiled_kernel(2)
    assert kernel is not None
    rng = np.random.default_rng(8)
    T = symmetrize_tensor(rng.standard_normal((6, 6, 6)))
    U = rng.standard_normal((6, 2))
    Ut, out = np.zeros((9, 2)), np.zeros((9, 2))
    Ut[:6] = U
    kernel(sc.pack_distinct(T), Ut, out)
    _close(out[:6], np.einsum("abc,bl,cl->al", T, U, U), 1e-13)


def test_a_numba_variable_set_at_run_time_does_not_undo_the_slp_setting(monkeypatch):
    """numba's compiler reloads its configuration from the environment when a ``NUMBA_``
    variable changed since: set after numba's import (``NUMBA_NUM_THREADS`` before the first
    fit), it reset SLP to 0 inside the flip, and the kernel compiled and cached unvectorised
    (the 8-lane pass at d=150: 1.44 ms against 0.45)."""
    pytest.importorskip("numba")
    from numba.core import config

    monkeypatch.setattr(compiled, "_KERNELS", {})
    monkeypatch.setenv("NUMBA_DPTENSOR_TEST_PROBE", "1")
    seen = []

    def warm_up(kernel):
        config.reload_config()  # as numba's compiler does first
        seen.append(config.SLP_VECTORIZE)

    compiled.compiled("probe_env", _slp_probe, warm_up, slp=True)
    assert seen == [1]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 8, 13, 64])
def test_the_compiled_packing_is_the_index_arrays_bit_for_bit(d, dtype, monkeypatch):
    """The compiled loop writes every number of the layout as the NumPy path's index arrays do
    (each weighted entry one division of the same entry), zeros included; a transposed view
    takes the index arrays (no copy of T) and gives the same."""
    if sc.compiled_packing(dtype) is None:
        pytest.skip("numba is not installed")
    T = symmetrize_tensor(np.random.default_rng(d).standard_normal((d, d, d))).astype(dtype)
    fast = sc.pack_distinct(T)
    assert fast.dtype == dtype and fast.shape == (sc.packed_size(d),)
    monkeypatch.setattr(compiled, "ENABLED", False)
    plain = sc.pack_distinct(T)
    monkeypatch.undo()
    assert np.array_equal(fast, plain)
    assert np.array_equal(sc.pack_distinct(np.asfortranarray(T)), plain)
