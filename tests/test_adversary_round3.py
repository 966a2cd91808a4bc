"""Adversarial checks of the compiled samplers' releases: each test is a neighbour pair (or a
spy on the generator) that the version before it got wrong."""
import numpy as np
import pytest

from dptensor import mechanisms
from dptensor.mechanisms import releases, samplers



def _signed_zeros(S, rng, size=None):
    """The samplers' law at a draw that returns zeros: ``round(S N)`` is 0 with the sign bit of
    its sign word (the fast path ORs the sign into the magnitude's bits), so half its zeros are
    -0.0. A real release meets one with probability about 2e-10 per value (S near 2**30)."""
    shape = np.shape(S) if size is None else ((size,) if np.ndim(size) == 0 else tuple(size))
    return np.full(shape, -0.0)


def test_the_samplers_return_negative_zeros():
    """The premise: the samplers' zeros carry their random sign bit (harmless alone: the sign is
    independent of everything)."""
    rng = np.random.default_rng(0)
    for sampler in (samplers.rounded_gaussian, samplers.rounded_laplace):
        draws = sampler(1e-3, rng, size=1000)
        assert np.all(draws == 0) and 300 < np.count_nonzero(np.signbit(draws)) < 700


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("kind,per_value", [("gauss", False), ("gauss", True), ("laplace", False)])
def test_a_zero_release_does_not_tell_the_sign_of_the_value(monkeypatch, kind, per_value,
                                                            compiled):
    """Neighbours whose values are -tiny and +tiny round to the same integer 0, so the release
    must be the same; it was -0.0 for the first and +0.0 for the second whenever the noise was a
    zero with its sign bit (``rint`` keeps the sign, and ``-0.0 + -0.0`` is -0.0): a released
    -0.0 proved the value negative, an infinite privacy loss (pure DP broken for Laplace)."""
    monkeypatch.setattr(releases, "rounded_gaussian", _signed_zeros)
    monkeypatch.setattr(releases, "rounded_laplace", _signed_zeros)
    if not compiled:  # the NumPy addition (no numba, or where it fails to compile)
        monkeypatch.setattr(releases, "compiled_kernel", lambda: None)
    rng = np.random.default_rng(1)
    out = []
    for sign in (-1.0, 1.0):
        value = np.array([sign * 1e-300, sign * 1e-20, sign * 0.0])
        sens = np.full(3, 1.0) if per_value else 1.0
        if kind == "gauss":
            out.append(mechanisms.gaussian_release(value, sens, 1.0, rng))
        else:
            out.append(mechanisms.laplace_release(value, 1.0, 1.0, rng))
    assert np.array_equal(out[0], out[1])
    assert out[0].tobytes() == out[1].tobytes(), (out[0], out[1])
    assert not np.any(np.signbit(out[0]))


@pytest.mark.parametrize("release", [
    lambda v, rng: mechanisms.gaussian_release(v, 1.0, 1.0, rng),
    lambda v, rng: mechanisms.laplace_release(v, 1.0, 1.0, rng),
    lambda v, rng: mechanisms.gaussian_release(v, np.ones(v.size), 1.0, rng),
])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e308])
def test_a_refused_release_draws_nothing(release, bad):
    """A release of a non-finite value (or one beyond 2**1000 grid steps) is refused before any
    noise is drawn: the generator is left as it was (it drew the whole release's words first,
    so a caller that went on after the refusal drew from a state that told of it)."""
    rng = np.random.default_rng(2)
    before = rng.bit_generator.state
    value = np.array([0.5, bad, 2.0] * 50)
    with pytest.raises(ValueError, match="must be finite"):
        release(value, rng)
    assert rng.bit_generator.state == before


def _tiny_scale_rows(B, grid):
    """Rows of norm about ``B`` = 3e-200 (whose squares underflow to 0): nine at +0.3 B, one at
    -0.9 B, so that the centre's integers ``a`` (about +0.18 2**b) put the last beyond the
    sphere once centred (``|m - a|`` about 1.08 2**b): a row the centring must scale back."""
    rows = np.array([[0.3, 0.03, -0.017]] * 9 + [[-0.9, -0.09, 0.051]])
    return np.rint(rows * grid) * (B / grid)


def test_the_one_pass_finds_rows_beyond_the_sphere_at_a_tiny_data_norm():
    """The read-only pass bounded ``||m||`` by ``||x|| 2**b / B`` with ``||x||^2`` summed in X's
    own scale: at ``B`` = 3e-200 every square underflows to 0, the bound said ``||m|| <= 2``, and
    rows whose centred map lies beyond the sphere were never scaled back: the released Gram was
    not the held rows' (rows up to ``1.1 2**b`` long where the sensitivity assumed ``2**b``).
    The estimators refuse a data norm below 1e-90 (``DATA_NORM_RANGE``), where the squares of
    the rows that matter stay normal: the functions themselves take any data norm."""
    from dptensor.algorithms import exact as ex, exact_pass

    grid, B = 2.0 ** ex.BITS, 3e-200
    X = _tiny_scale_rows(B, grid)
    mean = X.mean(axis=0)
    M = ex.grid_rows(X, B)
    Mc = ex.grid_rows(M, B, mean, scale=B / grid)
    assert exact_pass._shift(mean, B) is not None  # the one-pass shortcut runs here
    D = M - np.rint(mean * grid / B)
    assert np.max(np.einsum("ij,ij->i", D, D)) > grid ** 2  # a row beyond the sphere, centred
    for use_kernel in (True, False):
        sums = exact_pass.grid_sums(X, B, use_kernel=use_kernel)
        total, C = exact_pass.centred_stats(X, sums, B, mean, 1.0)
        assert np.array_equal(C.ints, ex.gram(Mc).ints)
        assert total.ints == ex.sum_of_squares(Mc).ints


def test_every_compiled_entry_point_is_compiled_before_a_release():
    """``compiled_kernel`` compiles on tiny public arrays, inside its warnings guard, every
    compiled loop a release calls from Python: the chunked path's ``fast_path`` (a release over
    ``2**16`` values) was compiled at the first such release, after its spend, outside it."""
    kernel = samplers.compiled_kernel()
    if kernel is None:
        pytest.skip("numba is not installed")
    for name in ("fast_path", "leftovers", "sample", "grid_add"):
        assert getattr(kernel, name).signatures, name
