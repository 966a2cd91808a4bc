"""Exact samplers: goodness of fit against the exact pmf, the slow exact paths, the floating-point
attack they defeat, and their privacy checked by direct computation."""
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp, ndtr

from dptensor.mechanisms import samplers as sm
from dptensor.accounting import gdp_delta
from dptensor.accounting.composition import ORDERS, _laplace_rdp
from dptensor.mechanisms import GRID_BITS, gaussian_release, grid_step, laplace_release

P_MIN = 1e-3  # seeded draws: a fixed p-value; below this the sampler is wrong, not unlucky


def _cdf(kind, x, S):
    """P(round(S Y) <= x) for the Laplace or Gaussian Y, at real x (vectorised, exact formulas)."""
    t = (np.floor(x) + 0.5) / S
    if kind == "gauss":
        return ndtr(t)
    return np.where(t < 0, np.exp(np.minimum(t, 0)) / 2, 1 - np.exp(-np.maximum(t, 0)) / 2)


def _chi2_pvalue(x, kind, S, n_bins=40):
    """Chi-squared on bins of equal exact mass (whole lattice points, tails included in the end bins)."""
    qs = stats.norm.ppf if kind == "gauss" else stats.laplace.ppf
    edges = np.unique(np.floor(S * qs(np.linspace(0, 1, n_bins + 1)[1:-1]) + 0.5))  # lattice cut points
    cdf = np.concatenate([[0.0], _cdf(kind, edges, S), [1.0]])
    expected = np.diff(cdf) * x.size
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=expected.size)
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)])
@pytest.mark.parametrize("S", [0.3, 2.5, 37.0, 2.0 ** GRID_BITS * 1.37])
def test_samplers_fit_their_exact_pmf(rng, kind, sampler, S):
    x = sampler(np.full(40_000, S), rng)
    assert np.all(x == np.round(x))                       # integers
    assert _chi2_pvalue(x, kind, S) > P_MIN
    # The test has power: a 6% wrong scale is rejected (except where S is so small that the
    # lattice swallows it).
    if S > 1:
        assert _chi2_pvalue(x, kind, 1.06 * S) < 1e-4


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)])
def test_samplers_fit_with_a_32_bit_generator(kind, sampler):
    """A bit generator whose raw words are 32-bit (MT19937) is read through ``integers`` instead."""
    rng = np.random.Generator(np.random.MT19937(20240601))
    S = 2.0 ** GRID_BITS * 1.37
    assert _chi2_pvalue(sampler(np.full(40_000, S), rng), kind, S) > P_MIN


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)])
def test_small_lattice_pmf_tails_included(rng, kind, sampler):
    """At S = 1.5 every lattice point up to 5 sigma is its own bin; beyond, one bin per side."""
    S, n = 1.5, 60_000
    x = sampler(np.full(n, S), rng).astype(int)
    K = 8 if kind == "gauss" else 18
    pmf = sm.gaussian_pmf if kind == "gauss" else sm.laplace_pmf
    ks = np.arange(-K, K + 1)
    expected = np.concatenate([[_cdf(kind, -K - 1, S)], pmf(ks, S), [1 - _cdf(kind, K, S)]]) * n
    observed = np.concatenate([[np.sum(x < -K)], [np.sum(x == k) for k in ks], [np.sum(x > K)]])
    pooled = expected >= 5
    exp_, obs_ = expected[pooled], observed[pooled]
    extra_e, extra_o = expected[~pooled].sum(), observed[~pooled].sum()
    exp_, obs_ = np.r_[exp_, extra_e], np.r_[obs_, extra_o]
    assert stats.chisquare(obs_, exp_ * obs_.sum() / exp_.sum()).pvalue > P_MIN


def test_slow_exact_paths_keep_the_law(rng, monkeypatch):
    """With the float bounds made far looser, many roundings (on the fast path and the full one)
    and comparisons are settled in exact rational arithmetic instead: the law must not change."""
    calls = {"bern": 0, "less": 0, "round": 0}

    def count(name, real):
        def wrapped(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return wrapped
    for name, real in [("bern", sm._slow_bernoulli_exp), ("less", sm._slow_less), ("round", sm._slow_round)]:
        monkeypatch.setattr(sm, f"_slow_{'bernoulli_exp' if name == 'bern' else name}", count(name, real))
    monkeypatch.setattr(sm, "_MARGIN", 0.5)
    monkeypatch.setattr(sm, "_ROUND_TOL", 2.0 ** -16)
    for kind, sampler in [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)]:
        S = 2.0 ** 12 + 0.5
        x = sampler(np.full(20_000, S), rng)
        assert _chi2_pvalue(x, kind, S, n_bins=16) > P_MIN
    assert calls["round"] > 2000 and calls["less"] > 20  # the slow paths did run (Bernoulli: below)


def _cap_density(kind, cell):
    """The cap's height exp(-A(theta)) - exp(-A(1)) over its box's 1 - exp(-A(1)), on a fine grid."""
    grid, w = np.linspace(0.0, 1.0, 100_001), 2.0 ** -6
    A = grid * w if kind == "exp" else grid * (2 * cell + grid) * w * w / 2
    return grid, (np.exp(-A) - np.exp(-A[-1])) / -np.expm1(-A[-1])


@pytest.mark.parametrize("kind,cell", [("exp", 0), ("exp", 300), ("half_normal", 0), ("half_normal", 90),
                                       ("half_normal", 511)])
@pytest.mark.parametrize("margin", [None, 0.9])
def test_cap_acceptance_follows_the_cap(rng, monkeypatch, kind, cell, margin):
    """A cap proposal keeps its uniform theta with probability (exp(-A) - exp(-A(1)))/(1 - exp(-A(1))):
    the kept thetas follow the cap's density and the rate is the cap's share of its box (what the
    table's box masses assume). With the float bounds made far looser (margin 0.9), most
    decisions are settled in exact rational arithmetic: same law."""
    slow = []
    if margin is not None:
        monkeypatch.setattr(sm, "_MARGIN", margin)
        real = sm._slow_bernoulli_exp
        monkeypatch.setattr(sm, "_slow_bernoulli_exp", lambda *a, **k: slow.append(1) or real(*a, **k))
    n = 40_000 if margin is None else 4_000  # (the exact path is slow)
    theta_int = rng.integers(0, 2**52, size=n, dtype=np.uint64)
    refined = {}
    kept = sm._cap_accept(kind, np.full(n, cell), theta_int, rng, refined, np.arange(n))
    grid, density = _cap_density(kind, cell)
    share = np.trapezoid(density, grid)
    assert abs(kept.mean() - share) < 4 * np.sqrt(share * (1 - share) / n)
    cdf = np.r_[0.0, np.cumsum((density[1:] + density[:-1]) / 2)]
    theta = theta_int[kept] / 2.0 ** 52
    assert stats.kstest(theta, lambda t: np.interp(t, grid, cdf / cdf[-1])).pvalue > P_MIN
    assert stats.kstest(theta, "uniform").pvalue < 1e-6                 # the test has power
    assert all(refined[i].lo // sm.Fraction(1, 2**52) == int(theta_int[i]) for i in refined)
    assert (len(refined) > 500) == (margin is not None)  # the exact comparisons ran ...
    if margin is not None and (kind == "exp" or cell > 0):  # ... and the exact Bernoulli (except where
        assert len(slow) > 20                                # A(1) u < 1e-4 leaves it nothing to settle)


def _frac_mean(kind):
    """E[frac(Y / w)] for Y exponential or half-normal and w = 2**-6 (Gauss-Legendre per cell)."""
    x, wts = np.polynomial.legendre.leggauss(20)
    theta, wts = (x + 1) / 2, wts / 2
    cells = np.arange(64 * 40)[:, None]
    y = (cells + theta) / 64
    dens = np.exp(-y) if kind == "laplace" else np.exp(-y * y / 2)
    return float(np.sum(dens * theta * wts) / np.sum(dens * wts))


@pytest.mark.parametrize("kind,sampler", [("gauss", sm.rounded_gaussian), ("laplace", sm.rounded_laplace)])
def test_position_within_cells_is_exact(rng, kind, sampler):
    """The density falls across each cell of width 2**-6 (by w/12 in the mean position for the
    exponential); rectangles and caps together must reproduce it. Two million draws resolve the
    mean to 2e-4, five times finer than what a sampler without caps (flat cells) would miss."""
    S, n = 2.0 ** 30 * 1.37, 2_000_000
    y = np.abs(sampler(S, rng, size=n)) / S
    frac = np.modf(y * 64)[0]
    sd = np.sqrt(1 / 12 / n)
    exact = _frac_mean(kind)
    assert abs(frac.mean() - exact) < 4 * sd
    assert abs(0.5 - exact) > 4.5 * sd  # ... which flat cells would fail


def test_fast_path_reads_cell_theta_and_sign_from_one_word(rng):
    """A word in a bucket inside rectangle c gives sign bit 0, theta = its bits 1..47, and
    round(S w (c + theta)); the cell is the exact inversion's. With a loose chunk-wide bound most
    roundings are left to the per-value bound and the exact path: the same values."""
    table, S = sm._HALF_NORMAL, 2.0 ** 30 * 1.37
    Sw = np.float64(S * 2.0 ** -6)
    U = sm._raw(rng, 20_000)
    out = np.empty(U.size)
    left = sm._fast(table, Sw, U.copy(), 0.3, out)
    inside = table.fast[(U[left] >> np.uint64(48)).astype(np.intp)] > -1.5
    assert inside.mean() > 0.5
    sm._fast_exact(table, Sw, U[left[inside]], left[inside], out, rng)
    fast = np.ones(U.size, dtype=bool)
    fast[left[~inside]] = False
    seg = sm._draw_segments(table, U, rng)
    assert 0.97 < fast.mean() and np.all(seg[fast] < table.n_cells)  # rectangles
    for i in np.flatnonzero(fast)[:4000]:
        u, c = int(U[i]), int(seg[i])
        t = (u >> 1) & (2**47 - 1)
        lo, hi = (math.floor(sm.Fraction(S) / 64 * (c + sm.Fraction(k, 2**47)) + sm.Fraction(1, 2))
                  for k in (t, t + 1))
        assert lo <= abs(out[i]) <= hi and hi - lo <= 1 and np.signbit(out[i]) == bool(u & 1)
        assert lo == hi or i in left  # (an open rounding is the exact path's, drawing more bits)


def test_guide_buckets_decide_only_inside_one_rectangle(rng):
    """A bucket of the fast table names a rectangle only when its first and last words invert
    to that rectangle and its first word is not a table boundary (a tie)."""
    for table in (sm._EXP, sm._HALF_NORMAL):
        tops = np.arange(2**16, dtype=np.uint64) << np.uint64(48)
        ends = tops + np.uint64(2**48 - 1)
        first, last = (sm._draw_segments(table, v.copy(), rng) for v in (tops, ends))
        on_bound = np.isin(tops, table.bounds)
        decided = (first == last) & (first < table.n_cells) & ~on_bound
        assert np.array_equal(table.fast > -1.5, decided)
        assert np.array_equal(table.fast[decided], first[decided] - 1.0)
        assert 0.97 < decided.mean() < 0.99


def test_gaussian_tail_slow_path(rng):
    """Beyond the table (Y >= 8, probability 1e-15) the exact rejection sampler takes over: its
    accepted proposals follow the normal conditioned on the tail, and it accepts with probability
    the tail's mass over the envelope's, exp(32) 8 P(N >= 8) (what the table's tail mass assumes)."""
    S = 2.0 ** 20
    n = 3000  # the rate is resolved to 0.01: a sampler that never rejects (rate 1) fails
    draws = [sm._slow_gaussian_tail(sm.Fraction(S), rng) for _ in range(n)]
    y = np.array([d for d in draws if d is not None]) / S
    rate = np.exp(32.0) * 8 * np.sqrt(2 * np.pi) * ndtr(-8.0)
    assert abs(y.size / n - rate) < 4 * np.sqrt(rate * (1 - rate) / n) < (1 - rate) / 1.5
    assert y.min() >= 8.0
    tail = ndtr(-8.0)
    assert stats.kstest(y, lambda t: 1 - ndtr(-t) / tail if np.isscalar(t) else
                        1 - ndtr(-np.asarray(t)) / tail).pvalue > P_MIN


def test_full_path_at_the_top_word(rng):
    """The last word, 2**64 - 1, lies in the tail: the exponential restarts one table length on
    (nothing drawn), the half-normal draws beyond 8 (or rejects, to draw again)."""
    top = np.full(40, 2**64 - 1, dtype=np.uint64)
    base = np.zeros(40, dtype=np.int64)
    values, done = sm._full(sm._EXP, np.float64(100.0 / 64), top, base, rng)
    assert not done.any() and np.all(base == sm._EXP.n_cells)
    values, done = sm._full(sm._HALF_NORMAL, np.float64(100.0 / 64), top, base, rng)
    assert done.mean() > 0.8 and np.all(np.abs(values[done]) >= 800)


def test_table_ties_resolve_against_more_bits(rng):
    table = sm._EXP
    j = 17
    U = int(table.bounds[j])
    for _ in range(20):
        segment = sm._resolve_tie(table, j, U, rng)
        assert segment in (j, j + 1)
    # The boundaries are the certified floors of 2**64 times the proposal's CDF: the rectangles
    # (the cells' lower heights), then the caps (the rest of each cell's box), then the tail.
    w = 2.0 ** -6
    heights = np.exp(-w * np.arange(table.n_cells + 1))
    weights = np.r_[w * heights[1:], w * (heights[:-1] - heights[1:]), np.exp(-8.0)]
    cdf = np.cumsum(weights) / weights.sum()
    for j in (17, table.n_cells + 17, table.tail - 1):
        assert abs(int(table.bounds[j]) / 2.0 ** 64 - cdf[j]) < 1e-14


# ---------------------------------------------------------------- Mironov's attack
def _old_numpy_laplace(loc, raw):
    """A copy of NumPy's Laplace path (random_laplace in distributions.c) on 64-bit raw draws."""
    U = (raw >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    with np.errstate(divide="ignore"):
        return np.where(U >= 0.5, loc - np.log(2.0 - U - U), loc + np.log(U + U))


def _consistent(y, loc, window=24):
    """Can the old sampler output ``y`` when the true value is ``loc``? Inverts it over nearby doubles."""
    t = y - loc
    u = np.where(t < 0, np.exp(np.minimum(t, 0)) / 2, 1 - np.exp(-np.maximum(t, 0)) / 2)
    k = np.rint(u * 2.0 ** 53)[:, None] + np.arange(-window, window + 1)[None, :]
    U = np.clip(k, 1, 2.0 ** 53 - 1) * 2.0 ** -53
    with np.errstate(divide="ignore"):
        out = np.where(U >= 0.5, loc - np.log(2.0 - U - U), loc + np.log(U + U))
    return np.any(out == y[:, None], axis=1)


def test_mironov_attack_on_the_old_sampler_and_not_on_the_new(rng):
    raw = rng.integers(0, 2**64, size=4000, dtype=np.uint64)
    y = _old_numpy_laplace(0.5, raw)
    assert _consistent(y, 0.5).all()                      # the truth is always consistent
    rate = _consistent(y, -0.5).mean()
    assert rate < 0.5                                     # the neighbour is ruled out most of the time

    # The new release: every output lies on the public grid of the scale, which does not depend on
    # the value, and each grid point has a positive probability under both hypotheses, with a
    # likelihood ratio within exp(epsilon).
    eps = 1.0
    out = laplace_release(np.full(4000, 0.5), 1.0, eps, rng)
    gamma = grid_step(1.0 / eps)
    k = out / gamma
    assert np.all(k == np.round(k))
    S = 1.0 / eps / gamma * (1 + 4000 * 2.0 ** -GRID_BITS / eps)
    n_true, n_nb = np.rint(0.5 / gamma), np.rint(-0.5 / gamma)
    log_ratio = np.log(sm.laplace_pmf(k - n_true, S)) - np.log(sm.laplace_pmf(k - n_nb, S))
    assert np.all(np.isfinite(log_ratio)) and np.abs(log_ratio).max() <= eps


# ---------------------------------------------------------------- privacy by direct computation
def _delta_profile(p, q, eps):
    return np.array([np.maximum(p - np.exp(e) * q, 0).sum() for e in np.atleast_1d(eps)])


@pytest.mark.parametrize("S,v", [(2.3, 1), (2.3, 3), (17.0, 5), (1.1, 2)])
def test_rounded_gaussian_is_gdp_at_integer_shifts(S, v):
    """Rounding is post-processing: the exact privacy profile of round(n + S N) at an integer shift v
    never exceeds the Gaussian's gdp_delta(eps, v/S), and it is close to it."""
    k = np.arange(-int(40 * S) - v, int(40 * S) + v + 1)
    p, q = sm.gaussian_pmf(k, S), sm.gaussian_pmf(k - v, S)
    eps = np.linspace(0.0, 3 * v / S + 1, 25)
    exact = _delta_profile(p, q, eps)
    bound = np.array([gdp_delta(e, v / S) for e in eps])
    assert np.all(exact <= bound + 1e-12)
    assert np.max(bound - exact) < 0.5 / S  # a lattice's worth, not a different mechanism


@pytest.mark.parametrize("s,z,size", [(1.0, 3.0, 1), (0.02, 0.7, 1000), (5.0, 40.0, 2_000_000)])
def test_gaussian_release_scale_covers_the_rounded_sensitivity(rng, monkeypatch, s, z, size):
    """The l2 sensitivity of the rounded query is at most s/gamma + sqrt(size) lattice steps; with
    the scale S the release uses, that shift over S is at most 1/z, the GaussianEvent's mu, so by
    the test above (rounding is post-processing) the release costs no more than its event."""
    seen = {}

    def capture(S, rng, size=None):
        seen["S"] = np.asarray(S)
        return np.zeros(np.shape(S) if size is None else size)

    monkeypatch.setattr("dptensor.mechanisms.releases.rounded_gaussian", capture)
    gaussian_release(np.zeros(size), s, z, rng)
    gamma = grid_step(s * z)
    lattice_l2 = s / gamma + math.sqrt(size)
    assert np.all(lattice_l2 / seen["S"] <= 1 / z)
    assert np.all(lattice_l2 / seen["S"] > (1 / z) * (1 - 1e-3))  # and it adds almost nothing


def test_rounded_laplace_is_within_the_laplace_event():
    """Pure epsilon = v/S exactly, and its Renyi divergences stay under the LaplaceEvent's curve."""
    for S, v in [(3.0, 1), (2.0, 2), (10.0, 7)]:
        k = np.arange(-60 * int(S), 60 * int(S) + 1)
        p, q = sm.laplace_pmf(k, S), sm.laplace_pmf(k - v, S)
        eps = v / S
        assert np.max(np.abs(np.log(p) - np.log(q))) <= eps + 1e-12
        orders = ORDERS[ORDERS <= 32][::40]
        renyi = np.array([logsumexp(a * np.log(p) + (1 - a) * np.log(q)) / (a - 1) for a in orders])
        assert np.all(renyi <= _laplace_rdp(eps, orders) + 1e-12)


# ---------------------------------------------------------------- against OpenDP's samplers
def test_two_sample_against_opendp(rng):
    dp = pytest.importorskip("opendp.prelude", reason="opendp not installed (pip install opendp)")
    dp.enable_features("contrib")
    S, n = 40.0, 8_000
    ours = {"gauss": sm.rounded_gaussian(S, rng, size=n), "laplace": sm.rounded_laplace(S, rng, size=n)}
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
    theirs = {"gauss": np.array(dp.m.make_gaussian(*space, scale=S)([0] * n)),
              "laplace": np.array(dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)),
                                                    dp.l1_distance(T=int), scale=S)([0] * n))}
    # OpenDP samples the discrete Gaussian and discrete Laplace; at S = 40 these differ from the
    # rounded laws by far less than 8 000 draws can resolve, so a two-sample test must accept.
    for kind in ours:
        assert stats.ks_2samp(ours[kind], theirs[kind]).pvalue > P_MIN
        # power: a 25% wrong scale is rejected (OpenDP's draws are not seeded; at 15% the Laplace
        # check failed for about one draw in five)
        assert stats.ks_2samp(ours[kind], np.round(1.25 * theirs[kind])).pvalue < 1e-3


# ---------------------------------------------------------------- the releases
def test_gaussian_release_is_on_the_grid_with_the_right_law(rng):
    value = np.linspace(-3.0, 7.0, 30_000)
    out = gaussian_release(value, 0.5, 2.0, rng)
    gamma = grid_step(1.0)
    assert np.all(out / gamma == np.round(out / gamma))
    assert stats.kstest(out - value, stats.norm(scale=1.0).cdf).pvalue > P_MIN
    # per-column sensitivities, a zero scale returns the value, negative scales are refused
    cols = gaussian_release(np.zeros((4000, 3)), np.array([0.0, 1.0, 3.0]), 1.0, rng, dtype=np.float32)
    assert cols.dtype == np.float32 and np.all(cols[:, 0] == 0)
    assert abs(cols[:, 2].std() / cols[:, 1].std() - 3.0) < 0.2
    with pytest.raises(ValueError, match="sensitivity"):
        gaussian_release(np.zeros(3), -1.0, 1.0, rng)
    with pytest.raises(ValueError, match="finite"):
        gaussian_release(np.array([np.nan]), 1.0, 1.0, rng)


def test_laplace_release_law(rng):
    value = np.full(20_000, 1.25)
    out = laplace_release(value, 2.0, 0.5, rng)
    assert stats.kstest(out - value, stats.laplace(scale=4.0).cdf).pvalue > P_MIN
    with pytest.raises(ValueError, match="epsilon"):
        laplace_release(value, 1.0, 0.0, rng)


@pytest.mark.parametrize("order", [2, 3])
def test_symmetric_release_is_symmetric_with_the_right_distinct_noise(rng, order):
    from itertools import permutations

    from dptensor.mechanisms import symmetric_gaussian_release
    d = 30 if order == 2 else 12
    A = rng.standard_normal((d,) * order)
    T = sum(A.transpose(p) for p in permutations(range(order)))  # symmetric
    R = symmetric_gaussian_release(T, 0.5, 2.0, rng)
    for p in permutations(range(order)):
        assert np.array_equal(R, R.transpose(p))
    idx = np.triu_indices(d) if order == 2 else np.nonzero(
        np.triu(np.ones((d, d), bool))[:, :, None] & np.triu(np.ones((d, d), bool))[None, :, :])
    noise = (R - T)[idx]
    assert noise.size == (d * (d + 1) // 2 if order == 2 else d * (d + 1) * (d + 2) // 6)
    assert stats.kstest(noise, stats.norm(scale=1.0).cdf).pvalue > P_MIN
    with pytest.raises(ValueError, match="order-3"):
        symmetric_gaussian_release(np.zeros((2, 2, 2, 2)), 1.0, 1.0, rng)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # inside dp-accounting
@pytest.mark.parametrize("kind,S,v,count", [("gauss", 4.0, 1, 5), ("gauss", 2.5, 2, 3), ("laplace", 3.0, 1, 4)])
def test_composed_cost_against_dp_accounting(kind, S, v, count):
    """dp-accounting's privacy-loss distribution of the exact rounded pmfs, composed: never above
    what the accountant charges for the matching GaussianEvent / LaplaceEvent."""
    pld_mod = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    from dptensor.accounting import GaussianEvent, LaplaceEvent, epsilon_of

    k = np.arange(-int(60 * S) - v, int(60 * S) + v + 1)
    pmf = sm.gaussian_pmf if kind == "gauss" else sm.laplace_pmf
    with np.errstate(divide="ignore"):
        lower = {int(i): float(np.log(pmf(i, S))) for i in k}
        upper = {int(i): float(np.log(pmf(i - v, S))) for i in k}
    pld = pld_mod.from_two_probability_mass_functions(lower, upper, value_discretization_interval=1e-4)
    pld = pld.self_compose(count)
    delta = 1e-5
    event = GaussianEvent(S / v, count) if kind == "gauss" else LaplaceEvent(v / S, count)
    charged = epsilon_of(event, delta)
    exact = pld.get_epsilon_for_delta(delta)
    assert exact <= charged + count * 1e-4  # the PLD's pessimistic discretisation, 1e-4 a step
    assert exact >= 0.8 * charged  # the same mechanism up to the lattice, not a different one


def test_discrete_gaussian_is_not_gdp_at_its_scale_but_the_rounded_one_is():
    """Why the samplers round a continuous Gaussian instead of drawing the discrete Gaussian: for a
    log-concave law on the integers with CDF F, the shift by one is mu-GDP iff every step of
    Phi^{-1}(F(u)) is at most mu. The rounded Gaussian's steps are exactly 1/S; the discrete
    Gaussian's exceed it in the tails, so GaussianEvent would under-price it."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 80
    S = mp.mpf(3)

    def probit(p):
        return -mp.sqrt(2) * mp.erfinv(1 - 2 * p)

    ks = range(-40, 1)
    weights = [mp.e ** (-mp.mpf(k) ** 2 / (2 * S * S)) for k in range(-200, 201)]
    total = mp.fsum(weights)
    cdf = {k: mp.fsum(weights[: k + 201]) / total for k in ks}
    steps = [S * (probit(cdf[k]) - probit(cdf[k - 1])) for k in list(ks)[1:]]
    assert min(steps) > 1.003 and max(steps) > 1.004  # every step: not (1/S)-GDP, nor (1.003/S)
    rounded = [S * (probit(mp.ncdf((k + mp.mpf(1) / 2) / S)) - probit(mp.ncdf((k - mp.mpf(1) / 2) / S)))
               for k in list(ks)[1:]]
    assert max(abs(r - 1) for r in rounded) < mp.mpf(10) ** -40
