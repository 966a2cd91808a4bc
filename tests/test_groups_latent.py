"""Groups of rows as the privacy unit of the latent models (``fit(X, groups=...)``).

Each group's rows are averaged (one weight ``1 / m_g`` in every moment): a brute-force check that
replacing one whole group (its rows, how many, their values) moves every released statistic by at
most its one-row sensitivity over the number of groups, that the rounding allowance is public (a
function of the number of groups, not of rows), the refusals before any spend, and recovery.
"""
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor import PrivacyAccountant
from dptensor.algorithms import group_moments
from dptensor.algorithms.group_moments import GROUP_BATCH, group_layout
from dptensor.algorithms.moments import match_rows, sym3
from dptensor.algorithms.vocabulary import column_query
from dptensor.algorithms.power import covariance_sensitivity, row_power_sensitivity
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.latent import gaussian_mixture as gm
from dptensor.latent import lda

SIZES = (1, 2, 3, 17, 20, 5)  # groups of the batched sizes and two summed alone (> 16 rows)


def _upper(A):
    return A[np.triu_indices(len(A))]


def _orthonormal(rng, d, p):
    return np.linalg.qr(rng.standard_normal((d, p)))[0]


def _labels(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def _gmm_stats(X, groups, B, W, bound_w, Q, V):
    """Every statistic a grouped mixture fit releases (before its noise), as the fit computes it."""
    est = PrivateGaussianMixture(2, epsilon=1.0, data_norm=B)
    prep = est._check_data(X, groups).extra
    n = prep["n"]
    total, square, gram = est._reduce(prep, gm._moment_sums, True)
    (step,) = est._reduce(prep, gm._gram_product, Q)
    (proj,) = est._reduce(prep, gm._gram_product, V)
    Y = gm._whitened_rows(prep["rows"], W, bound_w)
    (cube,) = est._reduce({"rows": Y, "groups": prep["groups"]}, gm._cube_sum)
    # the whole matrices too: their Frobenius norm is the bound the fit's releases use
    return {"mean": total / n, "trace": np.float64(square / n), "second": _upper(gram / n),
            "second_whole": gram / n, "step": step / n, "projection": _upper(V.T @ proj / n),
            "projection_whole": V.T @ proj / n, "third": cube / n}


def _gmm_sensitivities(B, bound_w, p, G):
    return {"mean": 2 * B / G, "trace": B * B / G, "second": covariance_sensitivity(B) / G,
            "second_whole": covariance_sensitivity(B) / G,
            "step": row_power_sensitivity(B, p) / G, "projection": covariance_sensitivity(B) / G,
            "projection_whole": covariance_sensitivity(B) / G, "third": 2 * bound_w**3 / G}


def _replace(X, labels, g, rows):
    """X and labels with group g's rows replaced by ``rows`` (any number of them)."""
    keep = labels != g
    return (np.vstack([X[keep], rows]), np.r_[labels[keep], np.full(len(rows), g)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replacing_one_whole_group_moves_each_mixture_statistic_by_one_rows_sensitivity(seed):
    rng = np.random.default_rng(seed)
    d, B, bound_w = 3, 2.0, 1.5
    labels = _labels(SIZES)
    X = rng.standard_normal((labels.size, d)) * 1.5  # some rows beyond B: clipped
    W, Q, V = rng.standard_normal((d, 2)), _orthonormal(rng, d, 2), _orthonormal(rng, d, 2)
    G = len(SIZES)
    sens = _gmm_sensitivities(B, bound_w, 2, G)
    base = _gmm_stats(X, labels, B, W, bound_w, Q, V)
    worst = dict.fromkeys(sens, 0.0)
    for _ in range(60):
        g, size = int(rng.integers(G)), int(rng.choice([1, 4, 18, 40]))
        other = _gmm_stats(*_replace(X, labels, g, rng.standard_normal((size, d)) * 2.0), B, W,
                           bound_w, Q, V)
        for name in sens:
            worst[name] = max(worst[name], float(np.linalg.norm(other[name] - base[name])))
    for name in sens:
        assert worst[name] <= sens[name] * (1 + 1e-9), name
    # the extreme pairs reach the bounds: a whole group at +B e0 against one at -B e0 (or B e1)
    e0, e1 = np.eye(d)[0], np.eye(d)[1]
    Wi = np.eye(d)[:, :2] * 10.0  # every whitened row clipped to bound_w
    plus = _gmm_stats(*_replace(X, labels, 3, np.tile(B * e0, (20, 1))), B, Wi, bound_w, Q, V)
    minus = _gmm_stats(*_replace(X, labels, 3, np.tile(-B * e0, (2, 1))), B, Wi, bound_w, Q, V)
    other = _gmm_stats(*_replace(X, labels, 3, np.tile(B * e1, (7, 1))), B, Wi, bound_w, Q, V)
    assert np.linalg.norm(plus["mean"] - minus["mean"]) == pytest.approx(sens["mean"])
    assert np.linalg.norm(plus["third"] - minus["third"]) == pytest.approx(sens["third"])
    assert np.linalg.norm(plus["second"] - other["second"]) == pytest.approx(sens["second"])
    assert np.linalg.norm(plus["second_whole"] - other["second_whole"]) == pytest.approx(
        sens["second_whole"])


def _lda_stats(C, groups, tau, W, bound3, Q):
    """Every statistic a grouped topic fit releases (before its noise, at weight 1)."""
    est = PrivateLatentDirichletAllocation(2, epsilon=1.0)
    prep = est._check_data(sp.csr_matrix(C), groups).extra
    n = prep["n"]
    (scale,) = est._reduce(prep, lda._scale_sums)
    (mean,) = est._reduce(prep, lda._mean_sums, tau)
    (pair,) = est._reduce(prep, lda._pair_sums, tau)
    (step,) = est._reduce(prep, lda._pair_products, Q, tau)
    (columns,) = est._reduce(prep, lda._column_sums, tau, WORDS)  # the frequent words' columns
    cube, Z, s = est._reduce(prep, lda._triple_sums, W, tau, bound3)
    third = (cube - sym3(np.einsum("ia,ib,ic->abc", W, W, Z))
             + 2.0 * np.einsum("i,ia,ib,ic->abc", s, W, W, W))
    return {"scale": np.float64(scale / n), "mean": mean / n, "pair": pair / n,
            "step": step / n, "third": third / n,
            "columns": column_query(columns / n, WORDS)}


#: The chosen words of the whitening over the frequent words (``whitening=m``), here 0 and 1.
WORDS = np.array([0, 1])


def _documents(rng, n, d):
    lengths = rng.integers(0, 7, n)  # documents of fewer than 3 words weigh 0
    return np.array([rng.multinomial(m, rng.dirichlet(np.full(d, 0.5))) for m in lengths], float)


@pytest.mark.parametrize("tau", [(None, None), (0.6, 0.4)])
def test_replacing_one_authors_documents_moves_each_topic_statistic_by_one_documents(tau):
    rng = np.random.default_rng(3)
    d, G = 4, len(SIZES)
    labels = _labels(SIZES)
    C = _documents(rng, labels.size, d)
    W, Q = rng.standard_normal((d, 2)), _orthonormal(rng, d, 2)
    r = float(np.max(np.linalg.norm(W, axis=1)))
    bound3 = None if tau[0] is None else (0.5 * r) ** 3
    b3 = r**3 if bound3 is None else bound3
    t1, t2 = tau[0] or 1.0, tau[1] or 1.0
    sens = {"scale": 1.0 / G, "mean": math.sqrt(2) * t1 / G, "pair": math.sqrt(2) * t2 / G,
            "step": math.sqrt(2) * t2 / G, "third": 2 * b3 / G,
            "columns": math.sqrt(2) * t2 / G}
    base = _lda_stats(C, labels, tau, W, bound3, Q)
    worst = dict.fromkeys(sens, 0.0)
    for _ in range(60):
        g, size = int(rng.integers(G)), int(rng.choice([1, 3, 18, 30]))
        other = _lda_stats(*_replace(C, labels, g, _documents(rng, size, d)), tau, W, bound3, Q)
        for name in sens:
            worst[name] = max(worst[name], float(np.linalg.norm(other[name] - base[name])))
    for name in sens:
        assert worst[name] <= sens[name] * (1 + 1e-9), name
    if tau[0] is None:  # unclipped, one-word authors reach the bound: sqrt(2) / G
        a = _lda_stats(*_replace(C, labels, 4, np.tile([3.0, 0, 0, 0], (20, 1))), tau, W, None, Q)
        b = _lda_stats(*_replace(C, labels, 4, np.tile([0, 5.0, 0, 0], (1, 1))), tau, W, None, Q)
        assert np.linalg.norm(a["mean"] - b["mean"]) == pytest.approx(sens["mean"])
        assert np.linalg.norm(a["pair"] - b["pair"]) == pytest.approx(sens["pair"])
        assert np.linalg.norm(a["columns"] - b["columns"]) == pytest.approx(sens["columns"])


def test_the_layout_batches_small_groups_by_size_and_sums_larger_ones_alone():
    sizes = (3, 1, 17, 3, 40, 1, 16)
    codes = np.random.default_rng(0).permutation(_labels(sizes))
    layout = group_layout(codes, len(sizes))
    parts = [(stop - start, size) for start, stop, size in layout.parts]
    assert parts == [(2, 1), (6, 3), (16, 16), (17, 17), (40, 40)]
    for start, stop, size in layout.parts:  # a part holds whole groups of its size
        held = codes[layout.order][start:stop]
        assert all(np.sum(codes == g) == size for g in np.unique(held))
    assert sorted(layout.order.tolist()) == list(range(codes.size))


def test_a_group_beyond_the_row_limit_weighs_nothing(monkeypatch):
    monkeypatch.setattr(group_moments, "MAX_GROUP_ROWS", 30)
    layout = group_layout(_labels((2, 31, 30)), 3)
    assert [size for _, _, size in layout.parts] == [2, 30]


def test_the_rounding_allowance_counts_groups_not_rows():
    """Two data sets of 6 groups, 48 and 900 rows: the same public Rounding and margin, so the
    allowance reveals nothing of the number of rows; the margin is a tiny share of the bound."""
    rng = np.random.default_rng(0)
    est = PrivateGaussianMixture(2, epsilon=1.0, data_norm=2.0)
    few, many = _labels(SIZES), _labels((1, 2, 3, 400, 490, 4))
    roundings = []
    for labels in (few, many):
        prep = est._check_data(rng.standard_normal((labels.size, 3)), labels).extra
        roundings.append((est._rounding(prep, 2.0), est._whitening_roundings(prep, 2, 4.0)))
    assert roundings[0] == roundings[1]
    (first, margin), _ = roundings[0]
    assert first.terms == (GROUP_BATCH + 1) * 7 + group_moments.SPARE_TERMS
    assert 0 < margin < 1e-6 * 2 * 2.0 / 6


def _people_mixture(rng, n_people, means, rows_per_person=(1, 6)):
    """Each person has 1-5 rows, all from her own component."""
    h = rng.integers(0, len(means), n_people)
    sizes = rng.integers(*rows_per_person, n_people)
    labels = np.repeat(np.arange(n_people), sizes)
    X = means[h[labels]] + 0.5 * rng.standard_normal((labels.size, means.shape[1]))
    return X, labels


@pytest.mark.parametrize("whitening", ["dense", "power"])
@pytest.mark.parametrize("method", ["perturb", "power"])
def test_a_grouped_mixture_fit_recovers_the_means(whitening, method):
    rng = np.random.default_rng(1)
    means = 4.0 * np.eye(3)
    X, labels = _people_mixture(rng, 20000, means)
    gmm = PrivateGaussianMixture(3, epsilon=50.0, data_norm=8.0, whitening=whitening,
                                 method=method, random_state=0).fit(X, groups=labels)
    perm, dist = match_rows(gmm.means_, means)
    assert np.max(dist) < 0.4
    assert np.allclose(gmm.weights_, 1 / 3, atol=0.05)
    assert gmm.n_samples_ == 20000 and gmm.privacy_cost_.unit == "group of rows"


def test_one_person_with_many_rows_does_not_steer_the_mixture_weights():
    """250 people at each of two means, and one more who owns 1,000 rows at the second: per row
    the second component weighs 5/6, per person one half."""
    rng = np.random.default_rng(2)
    means = np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    h = np.r_[np.zeros(250, int), np.ones(1250, int)]
    labels = np.r_[np.arange(500), np.full(1000, 500)]
    X = means[h] + 0.3 * rng.standard_normal((1500, 3))
    fits = [PrivateGaussianMixture(2, epsilon=200.0, data_norm=6.0, random_state=0).fit(X, **kw)
            for kw in ({}, {"groups": labels})]
    second = [float(f.weights_[np.argmax(f.means_[:, 1])]) for f in fits]
    assert second[0] == pytest.approx(5 / 6, abs=0.05)
    assert second[1] == pytest.approx(1 / 2, abs=0.05)


def test_fit_predict_takes_groups_as_fit_does():
    rng = np.random.default_rng(3)
    X, labels = rng.standard_normal((600, 3)), np.arange(600) // 3
    budget = PrivacyAccountant(epsilon=5.0, delta=1e-5)
    kw = dict(epsilon=1.0, data_norm=3.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = PrivateGaussianMixture(2, accountant=PrivacyAccountant(5.0, 1e-5), **kw).fit(
            X, groups=labels)
        model = PrivateGaussianMixture(2, accountant=budget, **kw)
        np.testing.assert_array_equal(model.fit_predict(X, groups=labels), fitted.predict(X))
    assert [e.label for e in budget.history()] == [
        "PrivateGaussianMixture(epsilon=1, unit='group of rows')"]


def _author_corpus(rng, n_authors, d=30, k=3):
    topics = rng.dirichlet(np.full(d, 0.3), k)
    labels = np.repeat(np.arange(n_authors), rng.integers(1, 5, n_authors))
    theta = rng.dirichlet(np.full(k, 1 / 3), labels.size)
    C = np.array([rng.multinomial(30, p) for p in theta @ topics], dtype=float)
    return sp.csr_matrix(C), labels, topics


@pytest.mark.parametrize("whitening", ["dense", "power", 10])  # 10: its ten most frequent words
def test_a_grouped_topic_fit_recovers_the_topics(whitening):
    C, labels, topics = _author_corpus(np.random.default_rng(4), 15000)
    fit = PrivateLatentDirichletAllocation(3, epsilon=20.0, whitening=whitening,
                                           random_state=0).fit(C, groups=labels)
    perm, _ = match_rows(fit.components_, topics)
    assert np.max(np.abs(fit.components_[perm] - topics).sum(axis=1)) < 0.1
    assert fit.n_samples_ == 15000 and fit.privacy_cost_.unit == "group of rows"


def test_groups_of_one_row_each_release_the_row_level_statistics():
    """One row a group: every weight is 1 and G = n, so the grouped statistics equal the row
    level ones (up to the order of the sums), and so does the fit (the same plan)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 3))
    W, Q, V = rng.standard_normal((3, 2)), _orthonormal(rng, 3, 2), _orthonormal(rng, 3, 2)
    grouped = _gmm_stats(X, np.arange(300)[::-1], 2.0, W, 1.5, Q, V)
    rows = gm.clip_rows(X, 2.0)
    assert np.allclose(grouped["mean"], rows.mean(axis=0), rtol=1e-12, atol=1e-14)
    assert np.allclose(grouped["second"], _upper(rows.T @ rows / 300), rtol=1e-12)
    a = PrivateGaussianMixture(2, epsilon=1.0, data_norm=2.0).privacy_cost(300, 3)
    est = PrivateGaussianMixture(2, epsilon=1.0, data_norm=2.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, groups=np.arange(300))
    assert est.privacy_cost_.noise_multiplier == a.noise_multiplier


@pytest.mark.parametrize("cls", [PrivateGaussianMixture, PrivateLatentDirichletAllocation])
def test_refusals_come_before_any_spend_and_the_ledger_names_the_unit(cls):
    import dask.array as da

    rng = np.random.default_rng(6)
    X = rng.poisson(2.0, (60, 4)).astype(float)
    labels = np.repeat(np.arange(20), 3)
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    est = cls(2, epsilon=1.0, accountant=budget)
    if cls is PrivateGaussianMixture:
        est.set_params(data_norm=10.0)
    for bad in (labels[:-1], np.r_[labels[:-1], np.nan], labels.reshape(-1, 1)):
        with pytest.raises(ValueError, match="groups"):
            est.fit(X, groups=bad)
    with pytest.raises(ValueError, match="groups"):
        cls(2, data_norm=10.0).fit(X, groups=labels) if cls is PrivateGaussianMixture else (
            cls(2).fit(X, groups=labels))  # epsilon=inf bounds nothing
    with pytest.raises(TypeError, match="dask"):
        est.fit(da.from_array(X, chunks=20), groups=labels)
    assert budget.history() == []
    assert not hasattr(est, "n_features_in_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, groups=labels.astype(str))
        preview = est.privacy_cost(20, 4)
    (entry,) = budget.history()
    assert "group of rows" in entry.label
    assert est.privacy_cost_.unit == "group of rows" and est.n_samples_ == 20
    assert math.isclose(est.privacy_cost_.epsilon, 1.0, rel_tol=1e-6)
    assert preview.noise_multiplier == est.privacy_cost_.noise_multiplier


def test_a_private_search_refuses_the_latent_models_for_their_score_not_their_groups():
    """The search splits by group for estimators whose fit takes groups (these now do), but a
    log-likelihood has no public per-unit bound, so no private search of them is made at all."""
    from dptensor.model_selection import PrivateGridSearchCV

    X = np.abs(np.random.default_rng(0).standard_normal((40, 3)))
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    search = PrivateGridSearchCV(PrivateGaussianMixture(2, data_norm=3.0),
                                 {"n_components": [1, 2]}, epsilon=1.0, accountant=budget)
    assert PrivateGaussianMixture._search_tag.groups
    with pytest.raises(TypeError, match="its score"):
        search.fit(X, groups=np.repeat(np.arange(20), 2))
    assert budget.history() == []


def test_a_grouped_fit_releases_at_the_group_sensitivity_and_allowance(monkeypatch):
    """The mean and the trace go to the mechanism at one row's sensitivity over G plus the margin,
    with the grouped Rounding (terms from G): what the derivation states, not n's."""
    import dptensor.algorithms.moments as moments

    calls, real = [], moments.gaussian_release

    def spy(value, sensitivity, z, rng, *, rounding):
        calls.append((float(sensitivity), rounding))
        return real(value, sensitivity, z, rng, rounding=rounding)
    monkeypatch.setattr(moments, "gaussian_release", spy)
    rng = np.random.default_rng(7)
    X, labels = _people_mixture(rng, 400, 4.0 * np.eye(3))
    B, G = 8.0, 400
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivateGaussianMixture(2, epsilon=1.0, data_norm=B, whitening="power",
                               random_state=0).fit(X, groups=labels)
    (mean_sens, mean_r), (trace_sens, trace_r) = calls[:2]
    outer, margin = group_moments.group_rounding(B, G)
    assert mean_r == outer and mean_sens == 2 * B / G + margin
    outer, margin = group_moments.group_rounding(B * B, G, 3)
    assert trace_r == outer and trace_sens == B * B / G + margin
    assert outer.terms == (GROUP_BATCH + 1) * (G + 1) + 3 + group_moments.SPARE_TERMS


def test_float32_rows_give_the_grouped_statistics_of_float64_rows():
    """float32 rows are summed in float64 blocks: the grouped statistics are those of the same
    values held in float64, and the fitted arrays float32."""
    rng = np.random.default_rng(8)
    X, labels = _people_mixture(rng, 300, 4.0 * np.eye(3))
    X = X.astype(np.float32)
    W, Q, V = rng.standard_normal((3, 2)), _orthonormal(rng, 3, 2), _orthonormal(rng, 3, 2)
    single, double = (_gmm_stats(X.astype(t), labels, 8.0, W, 3.0, Q, V)
                      for t in (np.float32, np.float64))
    for name in single:
        assert np.allclose(single[name], double[name], rtol=1e-6, atol=1e-6), name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = PrivateGaussianMixture(3, epsilon=20.0, data_norm=8.0, random_state=0).fit(
            X, groups=labels)
    assert fit.means_.dtype == np.float32
