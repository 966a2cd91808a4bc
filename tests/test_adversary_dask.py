"""Adversarial checks of Dask input: a fit never fails after its spend for how X is chunked."""
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import dptensor  # noqa: E402
from dptensor import PrivacyAccountant  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning")


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _filtered(X, keep):
    """``X[keep]`` as a user filters a Dask array: chunk sizes computed, chunks left empty where no
    kept row falls (where the data puts them)."""
    Xd = da.from_array(X, chunks=(300, -1))
    out = Xd[da.from_array(keep, chunks=300)]
    out.compute_chunk_sizes()
    return out


_FITS = {
    "tensor input perturbation": lambda **k: dptensor.PrivateTensorDecomposition(
        2, method="input_perturbation", epsilon=1.0, data_norm=5.0, **k),
    "tensor dense moment": lambda **k: dptensor.PrivateTensorDecomposition(
        2, moment="dense", n_restarts=2, n_iter=3, epsilon=1.0, data_norm=5.0, **k),
    "mixture dense": lambda **k: dptensor.PrivateGaussianMixture(
        2, epsilon=1.0, data_norm=5.0, **k),
    "mixture power": lambda **k: dptensor.PrivateGaussianMixture(
        2, epsilon=1.0, data_norm=5.0, whitening="power", **k),
}


@pytest.mark.parametrize("name", list(_FITS))
def test_an_empty_row_chunk_neither_fails_a_fit_after_its_spend_nor_moves_it(name):
    """A chunk of no rows (a filter left it) added ``0/0``: its dense third moment, the mean of
    no rows times 0, was NaN, and the fit failed after its spend, for where the data put the
    kept rows. Now it adds 0: the fit is the in-memory one."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1200, 6))
    keep = X[:, 0] > 0
    keep[300:600] = False  # no kept row in the second chunk
    Xd = _filtered(X, keep)
    assert 0 in Xd.chunks[0]
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    there = _FITS[name](accountant=budget, random_state=3).fit(Xd)
    assert len(budget.history()) == 1
    here = _FITS[name](accountant=PrivacyAccountant(epsilon=10.0, delta=1e-5),
                       random_state=3).fit(X[keep])
    for attribute in ("components_", "eigenvalues_", "means_", "weights_"):
        if hasattr(here, attribute):
            np.testing.assert_allclose(getattr(there, attribute), getattr(here, attribute),
                                       atol=1e-8)


@pytest.mark.parametrize("name", ["PrivatePCA", "StreamingTensorPower"])
def test_an_empty_row_chunk_mid_stream_is_passed_over(name):
    """``partial_fit`` on a Dask X feeds its chunks in turn: an empty one, mid-stream, was refused
    as a chunk of no sample after the stream's spend. It is passed over now (the cut does not
    change the stream); a Dask X of no rows at all is still refused, before anything is spent."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2400, 4))
    keep = np.ones(len(X), bool)
    keep[600:900] = False
    params = dict(epsilon=1.0, data_norm=3.0, random_state=0,
                  **(dict(block_size=300) if name == "PrivatePCA" else dict(n_iter=4, batch_size=300)))
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        there = getattr(dptensor, name)(accountant=budget, **params).partial_fit(_filtered(X, keep))
        here = getattr(dptensor, name)(accountant=PrivacyAccountant(epsilon=10.0, delta=1e-5),
                                       **params).partial_fit(X[keep])
    assert len(budget.history()) == 1
    assert there.n_samples_seen_ == here.n_samples_seen_
    np.testing.assert_array_equal(there.components_, here.components_)
    empty = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="0 sample"):
        getattr(dptensor, name)(accountant=empty, **params).partial_fit(
            _filtered(X, np.zeros(len(X), bool)))
    assert empty.history() == []


@pytest.mark.parametrize("name", ["PrivatePCA", "PrivateTensorDecomposition",
                                  "StreamingTensorPower", "PrivateGaussianMixture",
                                  "PrivateLatentDirichletAllocation"])
def test_unknown_column_sizes_are_refused_by_the_check_before_any_plan(name):
    """``X[:, dask_mask]`` has columns of unknown number: check_dask_array set
    ``n_features_in_`` to NaN and the fit priced a NaN width, refused only where a later step
    happened to fail on it (the memory check: "cannot convert float NaN to integer")."""
    X = np.random.default_rng(2).poisson(1.0, (600, 5)).astype(float) + 3.0
    Xd = da.from_array(X, chunks=(200, -1))
    Xd = Xd[:, da.from_array(np.ones(5, bool), chunks=5)]
    assert np.isnan(Xd.shape[1])
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    params = dict(epsilon=1.0, accountant=budget)
    if name != "PrivateLatentDirichletAllocation":
        params["data_norm"] = 20.0
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        getattr(dptensor, name)(1, **params).fit(Xd)
    assert budget.history() == []


def _loaded(X, rows=300, dtype=np.float64, short=None):
    """X as a loader's chunks: ``from_delayed`` told ``dtype`` and ``rows`` a chunk, each chunk
    computing to X's own dtype (float32 here), chunk ``short`` one row short."""
    def load(i, n):
        return X[rows * i: rows * i + n]
    parts = [da.from_delayed(dask.delayed(load)(i, rows - (i == short)), (rows, X.shape[1]),
                             dtype=dtype) for i in range(len(X) // rows)]
    return da.concatenate(parts)


_DECLARED = {
    "tensor input perturbation": _FITS["tensor input perturbation"],
    "mixture dense": _FITS["mixture dense"],
    "pca": lambda **k: dptensor.PrivatePCA(2, epsilon=1.0, data_norm=5.0, **k),
}


@pytest.mark.parametrize("name", list(_DECLARED))
def test_chunks_are_read_in_the_dtype_their_array_declares(name):
    """A Dask X declared float64 whose chunks compute to float32 was summed in float32 under
    float64 rounding margins: a dense third moment's release then moved past its sensitivity
    (1.00017 of it, a replay of neighbours at n = 20000). Each chunk is now cast to the declared
    dtype: the fit is the one of the honest float64 array, to the bit."""
    X = (np.random.default_rng(4).standard_normal((1200, 5)) / 2).astype(np.float32)
    fits = [_DECLARED[name](accountant=PrivacyAccountant(epsilon=10.0, delta=1e-5),
                            random_state=1).fit(data)
            for data in (_loaded(X), da.from_array(X.astype(np.float64), chunks=(300, -1)))]
    for attribute in ("components_", "means_"):
        if hasattr(fits[1], attribute):
            np.testing.assert_array_equal(getattr(fits[0], attribute), getattr(fits[1], attribute))


@pytest.mark.parametrize("name", list(_DECLARED))
def test_a_chunk_shorter_than_declared_is_refused_before_the_spend(name):
    X = (np.random.default_rng(4).standard_normal((1200, 5)) / 2).astype(np.float32)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="declares"):
        _DECLARED[name](accountant=budget).fit(_loaded(X, dtype=np.float32, short=2))
    assert budget.history() == []


def test_sparse_chunks_are_refused_by_name_before_the_spend():
    """Chunks that are no NumPy arrays (SciPy sparse) are not read as rows: refused before any
    spend, in words that name their type (the declared-shape check saw a 0-d array)."""
    sparse = pytest.importorskip("scipy.sparse")
    C = np.random.default_rng(0).poisson(1.0, (600, 8)).astype(float) + 3.0
    Xd = da.from_array(C, chunks=(300, -1)).map_blocks(sparse.csr_matrix)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    with pytest.raises(TypeError, match="csr_matrix"):
        dptensor.PrivateLatentDirichletAllocation(2, epsilon=1.0, accountant=budget).fit(Xd)
    assert budget.history() == []
