"""Dask input: the reductions over row chunks agree with the in-memory operators, X stays on the workers.

One real ``distributed.LocalCluster`` (2 worker processes, loopback only) serves the whole module.
"""
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from dptensor.algorithms.dask import (DaskGramMatrix, DaskThirdMoment, RowChunks, check_dask_array,  # noqa: E402
                            clip_chunks, dask_gram, dask_moment_tensor,
                            is_dask_array)
from dptensor.algorithms.operators import DeflatedTensor, GramMatrix, ThirdMoment, moment_tensor  # noqa: E402
from dptensor.mechanisms import clip_rows  # noqa: E402
from expected_warnings import NON_PRIVATE  # noqa: E402

TOL = 1e-10


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


class _Holder:
    """A bare object to receive ``n_features_in_`` from check_dask_array."""


def _data(n=1003, d=13, seed=0):
    rng = np.random.default_rng(seed)
    # Skewed rows of varied norms, so clipping bites on some and the third moment is not ~0.
    return (rng.exponential(size=(n, d)) - 1.0) * rng.uniform(0.2, 3.0, size=(n, 1))


def _close(a, b):
    return np.max(np.abs(np.asarray(a) - np.asarray(b))) <= TOL * max(1.0, np.max(np.abs(b)))


# ---------------------------------------------------------------------------------------------
# Detection and the import cost
# ---------------------------------------------------------------------------------------------

def test_is_dask_array_never_imports_dask():
    code = ("import sys, numpy as np, dptensor\n"
            "from dptensor import PrivateTensorDecomposition, StreamingTensorPower\n"
            "from dptensor.algorithms.dask import is_dask_array\n"
            "PrivateTensorDecomposition(1, n_restarts=2, n_iter=2).fit(np.arange(12.0).reshape(4, 3) % 5)\n"
            "assert not is_dask_array(np.zeros((2, 2))) and not is_dask_array([[1.0]])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_is_dask_array():
    X = _data()
    assert is_dask_array(da.from_array(X, chunks=100))
    assert not is_dask_array(X)
    assert not is_dask_array(da.from_array(X, chunks=100).compute())


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

def test_check_dask_array_rechunks_columns_and_casts(client):
    X = np.arange(60).reshape(12, 5)
    holder = _Holder()
    holder.feature_names_in_ = np.array(["a"])
    Xd = check_dask_array(holder, da.from_array(X, chunks=(5, 2)))
    assert Xd.numblocks == (3, 1) and Xd.dtype == np.float64
    assert holder.n_features_in_ == 5 and not hasattr(holder, "feature_names_in_")
    np.testing.assert_array_equal(Xd.compute(), X)
    X32 = da.from_array(X.astype(np.float32), chunks=(5, 5))
    assert check_dask_array(holder, X32, reset=False).dtype == np.float32
    with pytest.raises(ValueError, match="5 features"):
        check_dask_array(holder, da.zeros((4, 3), chunks=2), reset=False)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_dask_array_refuses_non_finite(client, bad):
    X = _data(200, 4)
    X[150, 2] = bad
    with pytest.raises(ValueError, match="NaN or infinity"):
        check_dask_array(_Holder(), da.from_array(X, chunks=(50, 4)))


def test_check_dask_array_refuses_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        check_dask_array(_Holder(), da.zeros(10, chunks=5), check_finite=False)
    unknown = da.zeros((10, 3), chunks=5)
    unknown = unknown[unknown[:, 0] >= 0]  # boolean indexing: row chunk sizes become unknown
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        check_dask_array(_Holder(), unknown, check_finite=False)
    with pytest.raises(TypeError, match="real numbers"):
        check_dask_array(_Holder(), da.zeros((4, 3), dtype=complex, chunks=2), check_finite=False)


# ---------------------------------------------------------------------------------------------
# The operators agree with the in-memory ones
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [(1003, 13), (97, 13), (250, 5)])
def test_third_moment_matches_numpy(client, chunks):
    X = _data()
    U = np.random.default_rng(1).standard_normal((13, 6))
    Xd = check_dask_array(_Holder(), da.from_array(X, chunks=chunks))
    dask_op, numpy_op = DaskThirdMoment(Xd), ThirdMoment(X)
    TU, tu = dask_op.apply_evaluate(U)
    TU_ref, tu_ref = numpy_op.apply_evaluate(U)
    assert TU.shape == (13, 6) and tu.shape == (6,)
    assert _close(TU, TU_ref) and _close(tu, tu_ref)
    assert _close(dask_op.evaluate(U), tu_ref) and _close(dask_op.apply(U), TU_ref)
    # Deflation wraps it unchanged: the correction is applied on the client.
    V = np.linalg.qr(U[:, :2])[0].T
    deflated, reference = DeflatedTensor(dask_op, [2.0, 1.0], V), DeflatedTensor(numpy_op, [2.0, 1.0], V)
    assert all(_close(a, b) for a, b in zip(deflated.apply_evaluate(U), reference.apply_evaluate(U)))


def test_gram_and_dense_moment_match_numpy(client):
    X = _data(600, 7)
    Q = np.random.default_rng(2).standard_normal((7, 3))
    Xd = check_dask_array(_Holder(), da.from_array(X, chunks=(64, 7)))
    assert _close(DaskGramMatrix(Xd).matmat(Q), GramMatrix(X).matmat(Q))
    assert DaskGramMatrix(Xd).shape == (7, 7)
    assert _close(dask_moment_tensor(Xd), moment_tensor(X))
    assert _close(dask_gram(Xd), X.T @ X)


def test_clipping_per_chunk_matches_clip_rows(client):
    X = _data()
    Xd = check_dask_array(_Holder(), da.from_array(X, chunks=(128, 13)))
    clipped = clip_chunks(Xd, 1.5).compute()
    np.testing.assert_array_equal(clipped, clip_rows(X, 1.5))
    assert np.max(np.linalg.norm(clipped, axis=1)) <= 1.5 * (1 + 1e-12)
    assert clip_chunks(Xd, None) is Xd
    U = np.random.default_rng(3).standard_normal((13, 4))
    assert _close(DaskThirdMoment(clip_chunks(Xd, 1.5)).apply(U), ThirdMoment(clip_rows(X, 1.5)).apply(U))


def test_row_chunks_in_order_and_reiterable(client):
    X = _data(300, 4)
    Xd = da.from_array(X, chunks=(70, 4))
    chunks = RowChunks(Xd)
    first = list(chunks)
    assert [c.shape[0] for c in first] == [70, 70, 70, 70, 20]
    assert all(isinstance(c, np.ndarray) for c in first)
    np.testing.assert_array_equal(np.concatenate(first), X)
    np.testing.assert_array_equal(np.concatenate(list(chunks)), X)  # a second pass
    np.testing.assert_array_equal(np.concatenate(list(RowChunks(da.from_array(X, chunks=(100, 3))))), X)
    with pytest.raises(ValueError, match="2-D"):
        RowChunks(da.zeros(5, chunks=2))
    partial = iter(chunks)
    np.testing.assert_array_equal(next(partial), X[:70])
    partial.close()  # stopping early drops the prefetched chunk without error


# ---------------------------------------------------------------------------------------------
# X is never computed on the client
# ---------------------------------------------------------------------------------------------

def _worker_chunk(block_info=None):
    """A chunk of X generated where the task runs; refuses to run outside a worker process."""
    distributed.get_worker()  # raises ValueError when called on the client
    info = block_info[None]
    (start, stop), _ = info["array-location"]
    rng = np.random.default_rng(start)
    return rng.exponential(size=(stop - start, info["chunk-shape"][1])) - 1.0


def _lazy_data(n, d, rows_per_chunk):
    chunks = ((rows_per_chunk,) * (n // rows_per_chunk), (d,))
    return da.map_blocks(_worker_chunk, chunks=chunks, dtype=np.float64, meta=np.empty((0, 0)))


def test_x_is_never_computed_on_the_client(client):
    n, d, rows = 64_000, 32, 4_000
    X = _lazy_data(n, d, rows)
    assert X.nbytes == n * d * 8 > 16e6
    with pytest.raises(ValueError):  # the chunks cannot be produced here
        _worker_chunk({None: {"array-location": [(0, 1), (0, d)], "chunk-shape": (1, d)}})
    Xd = clip_chunks(check_dask_array(_Holder(), X), 3.0)
    operator = DaskThirdMoment(Xd)
    U = np.linalg.qr(np.random.default_rng(4).standard_normal((d, 3)))[0]
    tracemalloc.start()
    try:
        TU, tu = operator.apply_evaluate(U)
        power_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        stream = iter(RowChunks(Xd))
        first, second = next(stream), next(stream)
        stream.close()
        stream_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # X is 16 MB and a chunk 1 MB. A power step moves d x L blocks only, the stream the chunk in
    # hand and the one computed ahead; the rest is the (in-process) scheduler's bookkeeping.
    assert power_peak < X.nbytes / 4, power_peak
    assert stream_peak < X.nbytes / 4, stream_peak
    assert first.shape == second.shape == (rows, d)
    # The same answer as in memory, on the same (regenerated) data.
    Xm = clip_rows(X.compute(), 3.0)
    np.testing.assert_array_equal(np.concatenate([first, second]), Xm[:2 * rows])
    TU_ref, tu_ref = ThirdMoment(Xm).apply_evaluate(U)
    assert _close(TU, TU_ref) and _close(tu, tu_ref)


# ---------------------------------------------------------------------------------------------
# The estimators: the Dask and NumPy paths give the same fit
# ---------------------------------------------------------------------------------------------

def _moment_data(n=3000, d=10, k=2, seed=0):
    from dptensor.datasets import make_orthogonal_moment_data

    X, eigenvalues, components = make_orthogonal_moment_data(n, d, k, eigenvalues=[4.0, 2.0], noise=0.1,
                                                              random_state=seed)
    return X, components


def _same_fit(a, b, *attributes):
    for name in attributes:
        assert _close(getattr(a, name), getattr(b, name)), name


@NON_PRIVATE
@pytest.mark.parametrize("epsilon", [np.inf, 5.0])
def test_tensor_decomposition_dask_matches_numpy(client, epsilon):
    from dptensor import PrivacyAccountant, PrivateTensorDecomposition

    X, components = _moment_data()
    params = dict(n_components=2, n_restarts=3, n_iter=4, epsilon=epsilon, data_norm=3.0, random_state=7)
    budget = 10.0 if np.isfinite(epsilon) else np.inf  # a non-private fit is refused by a finite budget
    accountants = [PrivacyAccountant(budget), PrivacyAccountant(budget)]
    fits = [PrivateTensorDecomposition(accountant=acc, **params).fit(data)
            for acc, data in zip(accountants, (X, da.from_array(X, chunks=(700, 10))))]
    numpy_fit, dask_fit = fits
    _same_fit(numpy_fit, dask_fit, "components_", "eigenvalues_")
    assert dask_fit.moment_ == "implicit" and dask_fit.n_features_in_ == 10
    assert dask_fit.privacy_cost_ == numpy_fit.privacy_cost_
    assert accountants[0].spent() == accountants[1].spent()
    if epsilon == np.inf:  # the fit is a real one: it recovers the planted components
        assert np.all(np.max(np.abs(dask_fit.components_ @ components.T), axis=1) > 0.95)
    projected = dask_fit.transform(da.from_array(X, chunks=(700, 10)))
    assert is_dask_array(projected) and _close(projected.compute(), numpy_fit.transform(X))


@NON_PRIVATE
@pytest.mark.parametrize("epsilon", [np.inf, 5.0])
def test_streaming_tensor_power_dask_matches_numpy(client, epsilon):
    from dptensor import StreamingTensorPower

    X, components = _moment_data(n=3200)
    params = dict(n_components=2, n_restarts=3, n_iter=3, batch_size=500, epsilon=epsilon, data_norm=3.0,
                  random_state=7)
    numpy_fit = StreamingTensorPower(**params).fit(X)
    dask_fit = StreamingTensorPower(**params).fit(da.from_array(X, chunks=(700, 10)))
    _same_fit(numpy_fit, dask_fit, "components_", "eigenvalues_")
    assert dask_fit.n_samples_seen_ == numpy_fit.n_samples_seen_ == 3000  # stopped after the last block
    assert dask_fit.privacy_cost_ == numpy_fit.privacy_cost_
    # partial_fit on Dask pieces (cut anywhere) continues one stream, like NumPy pieces.
    streamed = StreamingTensorPower(**params)
    for piece in (X[:1234], X[1234:]):
        streamed.partial_fit(da.from_array(piece, chunks=(300, 5)))
    _same_fit(numpy_fit, streamed, "components_", "eigenvalues_")
    projected = dask_fit.transform(da.from_array(X, chunks=(700, 10)))
    assert is_dask_array(projected) and _close(projected.compute(), numpy_fit.transform(X))


def test_streaming_tensor_power_dask_refuses_nan_before_the_spend(client):
    """A NaN deep in a Dask X was found by the chunk that held it, mid-stream, after the spend: an
    error that depended on the data, and a budget lost. One pass refuses it before anything."""
    from dptensor import PrivacyAccountant, StreamingTensorPower

    X, _ = _moment_data(n=3200)
    X[2900, 1] = np.nan
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="NaN"):
        StreamingTensorPower(1, epsilon=1.0, data_norm=3.0, batch_size=500, n_iter=3,
                             accountant=budget).fit(da.from_array(X, chunks=(700, 10)))
    assert budget.history() == []


@pytest.mark.parametrize("name", ["PrivatePCA", "StreamingTensorPower"])
def test_private_partial_fit_on_dask_uses_a_non_finite_row_as_a_zero_row(client, name):
    """partial_fit on a Dask X is a stream of its chunks: a NaN in a later chunk used to raise after
    the spend; a private stream now uses the row as a zero row, as for NumPy chunks."""
    import dptensor

    X = _data(1500, 4, seed=5)
    zero = X.copy()
    zero[900] = 0.0
    X[900, 1] = np.nan
    params = dict(epsilon=1.0, data_norm=2.0, random_state=0,
                  **(dict(block_size=300) if name == "PrivatePCA" else dict(n_iter=2, batch_size=400)))
    fits = [getattr(dptensor, name)(**params).partial_fit(da.from_array(rows, chunks=(500, 4)))
            for rows in (X, zero)]
    assert np.array_equal(fits[0].components_, fits[1].components_)
    assert fits[0].n_samples_seen_ == fits[1].n_samples_seen_


@NON_PRIVATE
@pytest.mark.parametrize("method, epsilon", [("power", np.inf), ("power", 5.0),
                                            ("analyze_gauss", 5.0), ("clipped_power", 5.0)])
def test_pca_dask_matches_numpy(client, method, epsilon):
    from dptensor import PrivatePCA
    from dptensor.datasets import make_spiked_covariance

    X, components, _ = make_spiked_covariance(3000, 10, 2, random_state=3)
    X = X + 0.5  # off-centre, so the (private) mean matters
    params = dict(n_components=2, n_iter=5, method=method, epsilon=epsilon, data_norm=6.0, random_state=7)
    numpy_fit = PrivatePCA(**params).fit(X)
    dask_fit = PrivatePCA(**params).fit(da.from_array(X, chunks=(700, 10)))
    _same_fit(numpy_fit, dask_fit, "components_", "explained_variance_", "mean_")
    assert dask_fit.method_ == numpy_fit.method_ == method
    assert dask_fit.privacy_cost_ == numpy_fit.privacy_cost_ and dask_fit.n_samples_ == 3000
    if epsilon == np.inf:
        _same_fit(numpy_fit, dask_fit, "explained_variance_ratio_")
        assert np.min(np.linalg.svd(dask_fit.components_ @ components.T)[1]) > 0.95
    projected = dask_fit.transform(da.from_array(X, chunks=(700, 10)))
    assert is_dask_array(projected) and _close(projected.compute(), numpy_fit.transform(X))


def test_pca_partial_fit_dask_matches_numpy(client):
    from dptensor import PrivatePCA
    from dptensor.datasets import make_spiked_covariance

    X, _, _ = make_spiked_covariance(3000, 10, 2, random_state=4)
    params = dict(n_components=2, block_size=500, epsilon=5.0, data_norm=6.0, random_state=7)
    numpy_fit, dask_fit = PrivatePCA(**params), PrivatePCA(**params)
    for piece in (X[:1234], X[1234:]):
        numpy_fit.partial_fit(piece)
        dask_fit.partial_fit(da.from_array(piece, chunks=(300, 5)))
    _same_fit(numpy_fit, dask_fit, "components_", "explained_variance_", "mean_")
    # 6 blocks of 500 rows: the mean's, then 5 power steps.
    assert dask_fit.n_samples_seen_ == 3000 and dask_fit.n_iter_ == numpy_fit.n_iter_ == 5
    with pytest.raises(TypeError, match="precomputed"):
        PrivatePCA(input="precomputed").fit(da.from_array(np.eye(3), chunks=2))
