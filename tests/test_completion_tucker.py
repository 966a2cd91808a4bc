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
