"""Generators produce the ground truth they state; the MovieLens loader and bi-scaling on small files."""
import hashlib
import io
import warnings
import zipfile

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from dptensor import datasets
from dptensor.datasets import (coherence, load_movielens_100k, make_low_rank_tensor,
                               make_orthogonal_moment_data, make_orthogonal_tensor,
                               make_spiked_covariance)
from dptensor.preprocessing import BiScaler, bi_scale


def _outer3_sum(lam, V):
    """sum_i lam_i v_i (x) v_i (x) v_i by explicit outer products (a reference independent of einsum)."""
    return sum(lam_i * np.multiply.outer(np.multiply.outer(v, v), v) for lam_i, v in zip(lam, V))


def _top_eigen_power(T, restarts=100, iters=60, seed=0):
    """Largest |T(u, u, u)| over unit u by restarted tensor power iterations (batched)."""
    with threadpool_limits(1):  # small GEMMs: threads only contend on a busy machine
        return _top_eigen_power_1(T, restarts, iters, seed)


def _top_eigen_power_1(T, restarts, iters, seed):
    d = T.shape[0]
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((d, restarts))
    U /= np.linalg.norm(U, axis=0)
    M = T.reshape(d, d * d)
    for _ in range(iters):
        U = M @ (U[:, None, :] * U[None, :, :]).reshape(d * d, restarts)
        U /= np.linalg.norm(U, axis=0)
    TU = M @ (U[:, None, :] * U[None, :, :]).reshape(d * d, restarts)
    return np.abs(np.einsum("al,al->l", U, TU)).max()


# ---------------------------------------------------------------------------------------------
# Orthogonal tensors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d,k,kind", [(16, 4, "incoherent"), (12, 3, "incoherent"), (10, 3, "random"),
                                      (12, 3, 2), (9, 3, 1)])
def test_orthogonal_tensor_is_exactly_the_stated_sum(d, k, kind):
    lam = np.arange(k, 0, -1, dtype=float)
    T, lam_out, V = make_orthogonal_tensor(d, k, lam, coherence=kind, random_state=3)
    assert T.shape == (d, d, d) and V.shape == (k, d)
    np.testing.assert_allclose(V @ V.T, np.eye(k), atol=1e-12)
    np.testing.assert_array_equal(lam_out, lam)
    np.testing.assert_allclose(T, _outer3_sum(lam, V), atol=1e-12)
    # Each v_i is an eigenvector: T(I, v_i, v_i) = lambda_i v_i.
    np.testing.assert_allclose(np.einsum("abc,ib,ic->ia", T, V, V), lam[:, None] * V, atol=1e-12)


def test_coherence_values_are_as_stated():
    # Hadamard, d a power of 2: every entry is ±1/sqrt(d), so mu0 = 1 exactly.
    _, _, V = make_orthogonal_tensor(32, 5, random_state=0)
    np.testing.assert_allclose(np.abs(V), 1 / np.sqrt(32))
    assert coherence(V) == pytest.approx(1.0)
    # DCT-II for other d: entries at most sqrt(2/d), so mu0 <= 2.
    _, _, V = make_orthogonal_tensor(30, 5, random_state=0)
    assert np.abs(V).max() <= np.sqrt(2 / 30) + 1e-12 and 1.0 <= coherence(V) <= 2.0
    # s-sparse disjoint supports: mu0 = d / (k s) exactly, from d/k (s=1) down to 1 (s = d/k).
    for s in (1, 2, 3, 6):
        _, _, V = make_orthogonal_tensor(30, 5, coherence=s, random_state=0)
        assert np.count_nonzero(V, axis=1).tolist() == [s] * 5
        assert coherence(V) == pytest.approx(30 / (5 * s))
    # Haar: strictly between the two extremes at this size, with a large margin.
    _, _, V = make_orthogonal_tensor(30, 5, coherence="random", random_state=0)
    assert 1.2 < coherence(V) < 4.0


def test_default_eigenvalues_and_reproducibility():
    T1, lam, V1 = make_orthogonal_tensor(8, 3, random_state=5)
    T2, _, V2 = make_orthogonal_tensor(8, 3, random_state=5)
    _, _, V3 = make_orthogonal_tensor(8, 3, random_state=6)
    np.testing.assert_allclose(lam, [1.0, 0.75, 0.5])
    np.testing.assert_array_equal(T1, T2)
    assert not np.allclose(V1, V3)


def test_noise_scale():
    d, noise = 24, 2.0
    T_clean, _, V = make_orthogonal_tensor(d, 2, random_state=11)
    T_noisy, _, V_noisy = make_orthogonal_tensor(d, 2, noise=noise, random_state=11)
    np.testing.assert_array_equal(V, V_noisy)  # the components are drawn first, the noise after
    E = T_noisy - T_clean
    np.testing.assert_allclose(E, E.transpose(1, 0, 2), atol=1e-12)
    np.testing.assert_allclose(E, E.transpose(0, 2, 1), atol=1e-12)
    # Operator norm: about `noise` (restarted power iterations find about 0.9 noise at this d).
    assert 0.8 * noise < _top_eigen_power(E) < 1.1 * noise
    # For a fixed unit u, E(u, u, u) ~ N(0, (noise / (1.657 sqrt(d)))^2): 300 independent draws at d=6.
    u = np.ones(6) / np.sqrt(6)
    draws = [np.einsum("abc,a,b,c->", make_orthogonal_tensor(6, 1, [1.0], noise=1.0, random_state=s)[0]
                       - make_orthogonal_tensor(6, 1, [1.0], random_state=s)[0], u, u, u) for s in range(300)]
    # The sample variance of 300 normals is within 30% of the truth with probability > 0.9999
    # (its relative standard deviation is sqrt(2/299) = 8%).
    assert np.var(draws) == pytest.approx((1 / (1.657 * np.sqrt(6))) ** 2, rel=0.3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(d=3, k=4), "k must be <= d"),
    (dict(d=5, k=2, eigenvalues=[1.0]), "eigenvalues"),
    (dict(d=5, k=2, eigenvalues=[1.0, -1.0]), "eigenvalues"),
    (dict(d=5, k=2, coherence="smooth"), "coherence"),
    (dict(d=5, k=2, coherence=3), "k \\* s <= d"),
    (dict(d=5, k=2, noise=-1.0), "noise"),
])
def test_orthogonal_tensor_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_orthogonal_tensor(**kwargs)


# ---------------------------------------------------------------------------------------------
# Data with an orthogonal third moment
# ---------------------------------------------------------------------------------------------

def test_two_point_variables_have_the_stated_moments_exactly():
    """The latent h has mean 0, variance 1 and third moment lambda: exact, from its two values."""
    for lam in (0.1, 0.5, 1.0, 3.0, 20.0):
        pq = 1 / (lam**2 + 4)
        p = 0.5 * (1 - np.sqrt(1 - 4 * pq))
        hi, lo = np.sqrt((1 - p) / p), -np.sqrt(p / (1 - p))
        moments = [p * hi**m + (1 - p) * lo**m for m in (1, 2, 3)]
        np.testing.assert_allclose(moments, [0.0, 1.0, lam], atol=1e-12)
    # and the sampler draws those two values with those probabilities
    h = datasets._two_point_skewed((200000, 1), np.array([2.0]), np.random.default_rng(0))
    p = 0.5 * (1 - np.sqrt(1 - 4 / 8))
    assert set(np.unique(h.round(12))) == {round(np.sqrt((1 - p) / p), 12), round(-np.sqrt(p / (1 - p)), 12)}
    assert np.mean(h > 0) == pytest.approx(p, abs=5 * np.sqrt(p * (1 - p) / 200000))


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_moment_data_third_moment_monte_carlo(noise):
    """Empirical E[x (x) x (x) x] against sum lambda_i v_i^(x)3, entry by entry, in standard errors.

    Each entry of the empirical moment is a mean of n iid terms, so (estimate - truth) / (sample
    std / sqrt(n)) is close to N(0, 1); over 64 entries, a bound of 5 is crossed by chance with
    probability below 64 * 6e-7 (and the test is seeded).
    """
    n, d, k = 200000, 4, 2
    lam = np.array([2.0, 1.0])
    X, lam_out, V = make_orthogonal_moment_data(n, d, k, eigenvalues=lam, coherence="random", noise=noise,
                                                random_state=7)
    assert X.shape == (n, d)
    np.testing.assert_allclose(V @ V.T, np.eye(k), atol=1e-12)
    total, total_sq = np.zeros((d, d, d)), np.zeros((d, d, d))
    for chunk in np.array_split(X, 10):
        terms = np.einsum("na,nb,nc->nabc", chunk, chunk, chunk)
        total += terms.sum(axis=0)
        total_sq += (terms**2).sum(axis=0)
    mean = total / n
    se = np.sqrt((total_sq / n - mean**2) / n)
    z = (mean - _outer3_sum(lam, V)) / se
    assert np.abs(z).max() < 5
    # The second moment: sum v_i v_i^T + noise^2 I.
    second = X.T @ X / n
    np.testing.assert_allclose(second, V.T @ V + noise**2 * np.eye(d), atol=0.03)
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.02)


def test_moment_data_rows_are_bounded_without_noise():
    X, lam, V = make_orthogonal_moment_data(5000, 16, 3, eigenvalues=[3.0, 2.0, 1.0], random_state=0)
    p = 0.5 * (1 - np.sqrt(1 - 4 / (lam**2 + 4)))
    bound = np.sqrt(np.sum((1 - p) / p))  # every |h_i| <= sqrt(q_i / p_i)
    assert np.linalg.norm(X, axis=1).max() <= bound + 1e-9
    X2, _, _ = make_orthogonal_moment_data(5000, 16, 3, eigenvalues=[3.0, 2.0, 1.0], random_state=0)
    np.testing.assert_array_equal(X, X2)


# ---------------------------------------------------------------------------------------------
# Spiked covariance
# ---------------------------------------------------------------------------------------------

def test_spiked_covariance_population_and_sample():
    n, d, k = 40000, 10, 2
    X, V, ev = make_spiked_covariance(n, d, k, spike=[8.0, 3.0], random_state=0)
    np.testing.assert_allclose(ev, [9.0, 4.0])
    np.testing.assert_allclose(V @ V.T, np.eye(k), atol=1e-12)
    sigma = np.eye(d) + V.T @ np.diag([8.0, 3.0]) @ V
    # ||S - Sigma|| / ||Sigma|| is of order sqrt(d / n) = 0.016; 0.08 leaves a wide margin.
    assert np.linalg.norm(X.T @ X / n - sigma, 2) / 9.0 < 0.08


def test_spiked_covariance_data_norm_scales_the_whole_sample():
    X, V, ev = make_spiked_covariance(500, 10, 2, data_norm=None, coherence=2, random_state=4)
    Xs, Vs, evs = make_spiked_covariance(500, 10, 2, data_norm=2.0, coherence=2, random_state=4)
    np.testing.assert_array_equal(V, Vs)
    c = 2.0 / np.linalg.norm(X, axis=1).max()
    np.testing.assert_allclose(Xs, c * X)
    np.testing.assert_allclose(evs, c**2 * ev)
    assert np.linalg.norm(Xs, axis=1).max() == pytest.approx(2.0)
    assert coherence(V) == pytest.approx(10 / (2 * 2))
    with pytest.raises(ValueError, match="data_norm"):
        make_spiked_covariance(10, 4, 1, data_norm=0.0)
    with pytest.raises(ValueError, match="spike"):
        make_spiked_covariance(10, 4, 2, spike=[1.0, -2.0])


# ---------------------------------------------------------------------------------------------
# Low-rank tensor for completion
# ---------------------------------------------------------------------------------------------

def test_low_rank_tensor_study():
    data = make_low_rank_tensor((20, 20, 20), 3, missing_ratio=0.5, snr=1.0, random_state=0)
    tensor, noisy, factors = data["tensor"], data["noisy"], data["factors"]
    assert tensor.min() == 0.0 and tensor.max() == 1.0
    for A in factors:
        assert A.shape == (20, 3)
        np.testing.assert_allclose(np.linalg.norm(A, axis=0), 1.0)
    cp = np.einsum("ir,jr,kr->ijk", *factors)
    np.testing.assert_allclose(tensor, (cp - data["offset"]) / data["scale"], atol=1e-12)
    assert np.linalg.matrix_rank(cp.reshape(20, 400)) == 3
    # SNR 1: noise variance equals the signal variance (exactly by construction, and empirically).
    assert data["noise_std"] ** 2 == pytest.approx(tensor.var())
    assert np.var(noisy - tensor) == pytest.approx(tensor.var(), rel=0.1)
    # Half the entries held out, observed and held-out disjoint and covering the tensor.
    obs, test = data["indices"], data["test_indices"]
    assert obs.dtype == np.int64 and len(obs) == 4000 and len(test) == 4000
    flat = np.ravel_multi_index(np.concatenate([obs, test]).T, (20, 20, 20))
    assert np.array_equal(np.sort(flat), np.arange(8000))
    np.testing.assert_array_equal(data["values"], noisy[tuple(obs.T)])
    np.testing.assert_array_equal(data["test_values"], tensor[tuple(test.T)])
    np.testing.assert_array_equal(data["test_values_noisy"], noisy[tuple(test.T)])


@pytest.mark.parametrize("shape,ratio", [((30, 40), 0.1), ((6, 5, 4, 3), 0.9), ((10, 10, 10), 0.0)])
def test_low_rank_tensor_any_order_and_ratio(shape, ratio):
    data = make_low_rank_tensor(shape, 2, missing_ratio=ratio, random_state=1)
    size = int(np.prod(shape))
    assert data["indices"].shape == (size - round(ratio * size), len(shape))
    assert len(data["test_values"]) == round(ratio * size)
    np.testing.assert_array_equal(data["noisy"], data["tensor"])  # snr=None: no noise
    assert data["noise_std"] == 0.0
    again = make_low_rank_tensor(shape, 2, missing_ratio=ratio, random_state=1)
    np.testing.assert_array_equal(again["indices"], data["indices"])


@pytest.mark.parametrize("kwargs,match", [
    (dict(shape=(5,)), "at least 2"), (dict(missing_ratio=1.0), "missing_ratio"),
    (dict(snr=0.0), "snr"), (dict(rank=0), "rank"),
])
def test_low_rank_tensor_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_low_rank_tensor(**kwargs)


# ---------------------------------------------------------------------------------------------
# MovieLens-100K format
# ---------------------------------------------------------------------------------------------

T0 = 874724710  # a timestamp in the real data's range


def _write(path, rows):
    path.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))


@pytest.fixture
def ml_home(tmp_path):
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    base = [(1, 1, 5, T0 + 3600), (1, 3, 4, T0 + 86400 * 2 + 10), (2, 2, 3, T0 + 86400 * 9 + 5),
            (3, 7, 1, T0 + 86399)]
    test = [(2, 4, 2, T0), (3, 1, 5, T0 + 86400 * 4)]  # the earliest timestamp is in the test file
    _write(folder / "ua.base", base)
    _write(folder / "ua.test", test)
    _write(folder / "u.data", base + test)
    return tmp_path


def test_movielens_loader_on_a_generated_file(ml_home):
    data = load_movielens_100k(data_home=ml_home, download=False)
    np.testing.assert_array_equal(data["indices"], [[0, 0, 0], [0, 2, 2], [1, 1, 9], [2, 6, 0]])
    np.testing.assert_array_equal(data["values"], [5.0, 4.0, 3.0, 1.0])
    np.testing.assert_array_equal(data["test_indices"], [[1, 3, 0], [2, 0, 4]])
    np.testing.assert_array_equal(data["test_values"], [2.0, 5.0])
    assert data["indices"].dtype == np.int64
    assert data["shape"] == (3, 7, 10) and data["t0"] == T0 and data["split"] == "ua"
    everything = load_movielens_100k(data_home=ml_home, download=False, split="all")
    assert len(everything["values"]) == 6 and len(everything["test_values"]) == 0
    assert everything["shape"] == (3, 7, 10)


def test_movielens_data_home_from_environment(ml_home, monkeypatch):
    monkeypatch.setenv("DPTENSOR_DATA", str(ml_home))
    assert load_movielens_100k(download=False)["shape"] == (3, 7, 10)


def test_movielens_missing_files_without_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="ub.base"):
        load_movielens_100k(data_home=tmp_path, download=False, split="ub")
    with pytest.raises(ValueError, match="split"):
        load_movielens_100k(data_home=tmp_path, split="uc")


def test_movielens_benchmark_without_the_data_says_how_to_get_it_and_writes_nothing(tmp_path, monkeypatch,
                                                                                   capsys):
    bench = pytest.importorskip("benchmarks.bench_movielens")
    import benchmarks._common as common

    monkeypatch.setenv("DPTENSOR_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    assert bench.run(quick=True) == []
    out = capsys.readouterr().out
    assert "skipping" in out and "load_movielens_100k" in out and "ua.base" in out
    assert not (tmp_path / "results").exists() and not (tmp_path / "nowhere").exists()


def _fake_archive(rows):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        lines = "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows)
        for name in ("ua.base", "ua.test", "u.data"):
            archive.writestr(f"ml-100k/{name}", lines)
        archive.writestr("ml-100k/README", "not ratings")
    return buffer.getvalue()


def test_movielens_download_checks_the_md5(tmp_path, monkeypatch):
    """The download path without a network: a fake archive is refused, unless its MD5 is the expected one."""
    payload = _fake_archive([(1, 1, 4, T0), (2, 3, 5, T0 + 86400)])

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(datasets.urllib.request, "urlopen", lambda url, timeout: Response(payload))
    with pytest.raises(OSError, match="MD5"):
        load_movielens_100k(data_home=tmp_path)
    assert not (tmp_path / "ml-100k").exists()  # nothing half-written is left behind
    monkeypatch.setattr(datasets, "ML100K_MD5", hashlib.md5(payload).hexdigest())
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "notes.txt").write_text("mine")  # a user's file survives the download
    data = load_movielens_100k(data_home=tmp_path)
    assert data["shape"] == (2, 3, 2) and (tmp_path / "ml-100k" / "README").is_file()
    assert (tmp_path / "ml-100k" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ml-100k"]


# ---------------------------------------------------------------------------------------------
# Bi-scaling
# ---------------------------------------------------------------------------------------------

def _dense_slices(shape, seed):
    rng = np.random.default_rng(seed)
    idx = np.stack(np.unravel_index(np.arange(np.prod(shape)), shape), axis=1)
    row_scale = rng.uniform(0.5, 2.0, (shape[0], shape[2]))
    values = (3 + rng.standard_normal(shape[1])[idx[:, 1]] + row_scale[idx[:, 0], idx[:, 2]]
              * rng.standard_normal(len(idx)))
    return idx, values


def test_bi_scaling_standardises_every_row_and_column_of_every_slice():
    shape = (6, 7, 3)
    idx, values = _dense_slices(shape, 0)
    z, scaler = bi_scale(idx, values, shape, shrinkage=0.0, scale_prior=0.0, tol=1e-12, max_iter=2000)
    assert scaler.n_iter_ < 2000
    Z = np.zeros(shape)
    Z[tuple(idx.T)] = z
    np.testing.assert_allclose(Z.mean(axis=1), 0.0, atol=1e-8)   # each (row, slice)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-8)   # each (column, slice)
    np.testing.assert_allclose((Z**2).mean(axis=1), 1.0, atol=1e-8)
    np.testing.assert_allclose((Z**2).mean(axis=0), 1.0, atol=1e-8)
    np.testing.assert_allclose(scaler.inverse_transform(idx, z), values, atol=1e-12)


def test_bi_scaling_other_axis_and_unseen_groups():
    idx, values = _dense_slices((4, 5, 6), 1)
    moved = idx[:, [2, 0, 1]]  # slices along axis 0 now
    z_ref, _ = bi_scale(idx, values, (4, 5, 6))
    z, scaler = bi_scale(moved, values, (6, 4, 5), axis=0)
    np.testing.assert_allclose(z, z_ref, atol=1e-10)
    # A (slice, row, column) never observed: centre 0 and scale 1, so x = mean_ + std_ z.
    scaler.fit(moved[moved[:, 0] > 0], values[moved[:, 0] > 0], (6, 4, 5))
    unseen = np.array([[0, 1, 2]])
    assert scaler.inverse_transform(unseen, [0.5])[0] == pytest.approx(scaler.mean_ + 0.5 * scaler.std_)


def test_bi_scaling_stays_bounded_on_sparse_slices():
    """Sparse slices (a few ratings per user per day) used to send scales to 0 and infinity."""
    rng = np.random.default_rng(2)
    n = 3000
    idx = np.stack([rng.integers(0, 60, n), rng.integers(0, 80, n), rng.integers(0, 20, n)], axis=1)
    idx[:, 2] = (idx[:, 0] * 3 + rng.integers(0, 3, n)) % 20
    idx = np.unique(idx, axis=0)
    values = rng.integers(1, 6, len(idx)).astype(float)
    z, scaler = bi_scale(idx, values, (60, 80, 20))
    assert scaler.n_iter_ < scaler.max_iter
    assert np.abs(np.log(scaler.row_scale_)).max() < 3 and np.abs(np.log(scaler.col_scale_)).max() < 3
    assert np.all(np.isfinite(z)) and np.abs(z).max() < 10
    np.testing.assert_allclose(scaler.inverse_transform(idx, z), values, atol=1e-10)


def test_bi_scaling_is_still_importable_from_datasets():
    """It moved to dptensor.preprocessing; code importing it from dptensor.datasets keeps working."""
    from dptensor import preprocessing
    assert datasets.BiScaler is preprocessing.BiScaler and datasets.bi_scale is preprocessing.bi_scale


def test_bi_scaling_bad_input():
    with pytest.raises(ValueError, match="out of bounds"):
        BiScaler().fit(np.array([[0, 0, 5]]), [1.0], (2, 2, 2))
    with pytest.raises(TypeError, match="integers"):
        BiScaler().fit(np.array([[0.0, 0.0, 0.0]]), [1.0])
    with pytest.raises(ValueError, match="NaN"):
        BiScaler().fit(np.array([[0, 0, 0]]), [np.nan])
    with pytest.raises(ValueError, match="not fitted"):
        BiScaler().transform(np.array([[0, 0, 0]]), [1.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_bi_scaling_refuses_nan_and_infinity_everywhere_saying_what_to_do(bad):
    # transform and inverse_transform passed a NaN or infinity through to their output silently
    idx = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]])
    values = np.array([1.0, 2.0, 3.0, 5.0])
    spoiled = values.copy()
    spoiled[1] = bad
    for call in (lambda: BiScaler().fit(idx, spoiled), lambda: bi_scale(idx, spoiled)):
        with pytest.raises(ValueError, match="values contains NaN or infinity: pass only the "
                                             "observed entries"):
            call()
    scaler = BiScaler().fit(idx, values)
    with pytest.raises(ValueError, match="values contains NaN or infinity: pass only the "
                                         "observed entries"):
        scaler.transform(idx, spoiled)
    with pytest.raises(ValueError, match="z contains NaN or infinity: .* drop or fill in"):
        scaler.inverse_transform(idx, spoiled)
    with pytest.raises(ValueError, match="values has 3 values but indices has 4"):
        scaler.transform(idx, values[:3])
    np.testing.assert_allclose(scaler.inverse_transform(idx, scaler.transform(idx, values)),
                               values)


def test_moment_data_norm_bound_holds_and_is_reached():
    from dptensor.datasets import moment_data_norm_bound

    X, lam, _ = make_orthogonal_moment_data(200_000, 12, 3, eigenvalues=[2.0, 1.0, 0.5], random_state=3)
    norms = np.linalg.norm(X, axis=1)
    bound = moment_data_norm_bound(lam)
    assert norms.max() <= bound * (1 + 1e-12)
    # every h_i takes its large value together in some of 200k rows: the bound is attained
    assert norms.max() >= bound * (1 - 1e-9)


def test_bi_scaling_refuses_values_whose_squares_overflow():
    # At 1e300 the standardisation's std_ overflowed (a RuntimeWarning, then inf scales)
    idx = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]])
    for scale in (1e300, -1e91):
        with pytest.raises(ValueError, match=r"values holds values beyond \+-1e\+90: .* Rescale"):
            BiScaler().fit(idx, np.array([1.0, -1.0, 1.0, 0.5]) * scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        z, scaler = bi_scale(idx, np.array([1.0, -1.0, 1.0, 0.5]) * 1e90)
    assert np.all(np.isfinite(z)) and np.isfinite(scaler.std_)
