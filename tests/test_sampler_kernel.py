"""The compiled loops of the exact samplers: the fast path gives the NumPy path's values bit for bit,
the compiled full method and its hand-backs to the exact paths draw the exact law, and the NumPy
path (the fallback) still draws the values it drew before."""
import hashlib

import numpy as np
import pytest
from scipy import stats

from dptensor.mechanisms import releases as rl
from dptensor.mechanisms import samplers as sm

pytest.importorskip("numba")
P_MIN = 1e-3  # seeded draws: a fixed p-value; below this the sampler is wrong, not unlucky


@pytest.fixture
def kernel():
    k = sm.compiled_kernel()
    assert k is not None  # numba is installed: the loops must compile
    return k


@pytest.fixture
def numpy_path(monkeypatch):
    monkeypatch.setattr(sm, "_KERNEL", [None])


def _pmf_pvalue(x, kind, S, K=None):
    """Chi-squared of integer draws against the exact pmf, every lattice point up to K its own bin
    and one bin per tail beyond (bins under 5 expected pooled)."""
    pmf = sm.gaussian_pmf if kind == "gauss" else sm.laplace_pmf
    K = K or int(4 * S) + 2
    ks = np.arange(-K, K + 1)
    inner = pmf(ks, S)
    tail = (1 - inner.sum()) / 2
    expected = np.r_[tail, inner, tail] * x.size
    observed = np.bincount(np.clip(x, -K - 1, K + 1).astype(int) + K + 1, minlength=ks.size + 2)
    big = expected >= 5
    exp_, obs_ = np.r_[expected[big], expected[~big].sum()], np.r_[observed[big],
                                                                   observed[~big].sum()]
    keep = exp_ > 0
    return stats.chisquare(obs_[keep], exp_[keep] * obs_[keep].sum() / exp_[keep].sum()).pvalue


def _binned_pvalue(x, kind, S, n_bins=30):
    """Chi-squared on bins of about equal exact mass, cut at lattice points (any scale)."""
    from scipy.special import ndtr
    q = (stats.norm if kind == "gauss" else stats.laplace).ppf(np.linspace(0, 1, n_bins + 1)[1:-1])
    edges = np.unique(np.floor(S * q + 0.5))
    t = (edges + 0.5) / S                                   # P(round(S Y) <= edge)
    cdf = ndtr(t) if kind == "gauss" else np.where(t < 0, np.exp(np.minimum(t, 0)) / 2,
                                                   1 - np.exp(-np.maximum(t, 0)) / 2)
    expected = np.diff(np.r_[0.0, cdf, 1.0]) * x.size
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=expected.size)
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def test_compiled_fast_path_gives_the_numpy_values(rng, kernel):
    """On the same words: the same positions left to the full method, and wherever the fast path
    settles a value, the NumPy path's value (and sign of zero) bit for bit."""
    n = 100_000
    for table in (sm._EXP, sm._HALF_NORMAL):
        for S in (0.3, 40.0, 2.0 ** 30 * 1.37):
            U = sm._raw(rng, n)
            Sw = np.float64(S * 2.0 ** -6)
            want = np.empty(n)
            left = sm._fast(table, Sw, U, 0.0, want)
            inside = table.fast[(U[left] >> np.uint64(48)).astype(np.intp)] > -1.5
            sm._fast_exact(table, Sw, U[left[inside]], left[inside], want, rng)
            got, idx = np.empty(n), np.empty((2, n), dtype=np.int64)
            n_left, n_unsure = kernel.fast_path(U, table.fast_cells, np.array([Sw]), sm._ROUND_TOL, got,
                                                0, idx[0], idx[1])
            assert np.array_equal(idx[0, :n_left], left[~inside])
            settled = np.ones(n, dtype=bool)
            settled[idx[0, :n_left]] = settled[idx[1, :n_unsure]] = False
            assert settled.mean() > 0.96
            assert np.array_equal(got[settled], want[settled])
            assert np.array_equal(np.signbit(got[settled]), np.signbit(want[settled]))


def test_the_numpy_path_draws_the_values_it_drew_before(numpy_path):
    """The fallback's plumbing changed, not its method: the same generator state gives the same
    values as before this change (a digest of them, taken then)."""
    digest = hashlib.sha256()
    for seed, S, size in [(0, 2.5, 5000), (1, 2.0 ** 30 * 1.37, 70_000), (2, 40.0, 1000)]:
        for sampler in (sm.rounded_gaussian, sm.rounded_laplace):
            digest.update(sampler(S, np.random.default_rng(seed), size=size).tobytes())
    assert digest.hexdigest()[:32] == "bcd2dd7ba98855e14b9be13dc3d22143"


def _full_method(kernel, table, S, n, rng):
    """The compiled full method on ``n`` uniform first words: a complete sampler by itself."""
    out = np.empty(n)
    sm._leftovers_compiled(kernel, table, np.array([S * 2.0 ** -6]), np.arange(n),
                           sm._raw(rng, n), out, rng)
    return out


@pytest.mark.parametrize("kind,table", [("gauss", sm._HALF_NORMAL), ("laplace", sm._EXP)])
def test_compiled_full_method_draws_the_exact_law(rng, kernel, kind, table):
    """From any first word (caps, rejections, restarts at the edge included) the compiled full
    method draws round(S Y) exactly: the pmf at small S, and at large S the mean position within
    the cells of width 2**-6 (where the density falls across each cell), which flat cells miss."""
    x = _full_method(kernel, table, 2.5, 60_000, rng)
    assert np.all(x == np.round(x)) and _pmf_pvalue(x, kind, 2.5) > P_MIN
    assert _pmf_pvalue(x, kind, 2.5 * 1.06) < 1e-4  # the test has power
    S, n = 2.0 ** 30 * 1.37, 2_000_000
    frac = np.modf(np.abs(_full_method(kernel, table, S, n, rng)) / S * 64)[0]
    x, wts = np.polynomial.legendre.leggauss(20)
    theta, wts = (x + 1) / 2, wts / 2
    y = (np.arange(64 * 40)[:, None] + theta) / 64
    dens = np.exp(-y) if kind == "laplace" else np.exp(-y * y / 2)
    exact = float(np.sum(dens * theta * wts) / np.sum(dens * wts))
    sd = np.sqrt(1 / 12 / n)
    assert abs(frac.mean() - exact) < 4 * sd and abs(0.5 - exact) > 4.5 * sd


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian),
                                          ("laplace", sm.rounded_laplace)])
def test_compiled_samplers_fit_their_exact_pmf_per_value_scales(rng, kernel, kind, sampler):
    """One scale per value (the per-value path), and a 32-bit bit generator (words from
    ``integers``): each half of the draws fits its own scale's pmf."""
    S = np.r_[np.full(30_000, 1.5), np.full(30_000, 6.0)]
    for gen in (rng, np.random.Generator(np.random.MT19937(7))):
        x = sampler(S, gen)
        assert _pmf_pvalue(x[:30_000], kind, 1.5) > P_MIN
        assert _pmf_pvalue(x[30_000:], kind, 6.0) > P_MIN


def test_hand_backs_keep_the_law(rng, kernel, monkeypatch):
    """With the float bounds made far looser, the compiled loops hand many values back to the
    exact paths (inside a cap's Bernoulli series, at its comparison, at a rounding), each from the
    state it reached: the law must not change."""
    codes = []
    real = sm._hand_back
    monkeypatch.setattr(sm, "_hand_back", lambda k, t, code, *a: codes.append(code)
                        or real(k, t, code, *a))
    monkeypatch.setattr(sm, "_MARGIN", 0.5)
    monkeypatch.setattr(sm, "_ROUND_TOL", 2.0 ** -16)
    for kind, sampler in [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)]:
        for S in (2.5, 2.0 ** 12 + 0.5):  # (at the larger scale roundings are handed back too)
            assert _binned_pvalue(sampler(np.full(40_000, S), rng), kind, S) > P_MIN
    counts = np.bincount(codes, minlength=7)
    assert counts[kernel.BERN] >= 10 and counts[kernel.LESS] > 500 and counts[kernel.ROUND] > 100


def test_ties_and_the_tail_are_handed_back(rng, kernel):
    """A first word equal to a table boundary is resolved with more bits (a value in either
    neighbouring rectangle); the last word lies beyond the table: the exponential restarts one
    table length on, the half-normal draws beyond 8 or rejects and draws again."""
    S, n = 2.0 ** 20, 200
    out = np.empty(n)
    tie = np.full(n, sm._EXP.bounds[17], dtype=np.uint64)  # between rectangles 17 and 18
    sm._leftovers_compiled(kernel, sm._EXP, np.array([S / 64]), np.arange(n), tie, out, rng)
    cells = np.floor(np.abs(out) / S * 64)
    assert set(np.unique(cells)) == {17.0, 18.0}
    top = np.full(n, 2 ** 64 - 1, dtype=np.uint64)
    sm._leftovers_compiled(kernel, sm._EXP, np.array([S / 64]), np.arange(n), top, out, rng)
    assert np.all(np.abs(out) >= 8 * S - 1)
    sm._leftovers_compiled(kernel, sm._HALF_NORMAL, np.array([S / 64]), np.arange(n), top, out,
                           rng)
    assert np.all(out == np.round(out)) and 0.3 < np.mean(np.abs(out) >= 8 * S - 1) < 1.0


@pytest.mark.parametrize("size", [3000, 100_000])
def test_a_short_buffer_replays_the_same_values(kernel, monkeypatch, size):
    """A value that meets the end of its buffer of fresh words is replayed from its first word on
    the extended buffer: the values do not depend on the buffer's size."""
    for sampler in (sm.rounded_gaussian, sm.rounded_laplace):
        want = sampler(40.0, np.random.default_rng(4), size=size)
        with monkeypatch.context() as m:
            m.setattr(sm, "_SPARE_SHARE", 0.0)
            m.setattr(sm, "_WORDS_PER_LEFTOVER", 0)
            m.setattr(sm, "_WORDS_EXTRA", 1)
            assert np.array_equal(sampler(40.0, np.random.default_rng(4), size=size), want)


def test_chunks_do_not_change_the_values(kernel, monkeypatch):
    """A release in one draw and one drawn a chunk at a time read the same stream of words: the
    same values (one scale, or one per value)."""
    S = np.random.default_rng(5).uniform(1.0, 1e9, 20_000)
    for scale in (40.0, S):
        want = sm.rounded_gaussian(scale, np.random.default_rng(6), size=20_000)
        with monkeypatch.context() as m:
            m.setattr(sm, "_CHUNK", 1536)
            assert np.array_equal(sm.rounded_gaussian(scale, np.random.default_rng(6),
                                                      size=20_000), want)


def test_compiled_grid_addition_is_the_numpy_one(rng, kernel, monkeypatch):
    """The release on its grid, ``(rint(value / gamma) + noise) gamma``: the same bits on either
    path, and a value that is not finite is refused on both."""
    value = rng.standard_normal(50_000) * 1e3
    noise = sm.rounded_gaussian(1e9, rng, size=value.shape)
    gamma = np.float64(2.0 ** -20)
    compiled = rl._noisy(value, gamma, noise.copy())
    for path in ("compiled", "numpy"):
        if path == "numpy":
            monkeypatch.setattr(sm, "_KERNEL", [None])
            assert np.array_equal(compiled, rl._noisy(value, gamma, noise.copy()))
        for bad in (np.nan, np.inf, 2.0 ** 1000 * gamma):
            with pytest.raises(ValueError, match="finite"):
                rl._noisy(np.r_[value[:10], bad], gamma, noise[:11].copy())


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian),
                                          ("laplace", sm.rounded_laplace)])
def test_numpy_fallback_fits_the_exact_pmf(rng, numpy_path, kind, sampler):
    assert sm.compiled_kernel() is None
    x = sampler(np.full(40_000, 2.5), rng)
    assert _pmf_pvalue(x, kind, 2.5) > P_MIN
