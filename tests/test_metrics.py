"""Metrics against hand-computed cases and independent references (brute force, scipy)."""
import itertools

import numpy as np
import pytest
import scipy.linalg
from scipy.stats import ortho_group

from dptensor.metrics import (eigenvalue_error, match_components, recovery_error, rmse, sin_theta_distance,
                              subspace_distance)


def _random_orthonormal(d, k, seed):
    return ortho_group.rvs(d, random_state=seed)[:k]


def test_permuted_and_sign_flipped_components_have_zero_error():
    V = _random_orthonormal(7, 4, 0)
    order, signs = np.array([2, 0, 3, 1]), np.array([1.0, -1.0, -1.0, 1.0])
    estimated = signs[:, None] * V[order]
    perm, found_signs = match_components(estimated, V)
    # true[i] is estimated[j] with order[j] == i.
    np.testing.assert_array_equal(perm, np.argsort(order))
    np.testing.assert_array_equal(found_signs, signs[np.argsort(order)])
    np.testing.assert_allclose(recovery_error(estimated, V), 0.0, atol=1e-12)
    # estimated[j] is V[order[j]], whose eigenvalue is order[j] + 1.
    np.testing.assert_allclose(eigenvalue_error(order + 1.0, [1.0, 2.0, 3.0, 4.0], estimated, V), 0.0)


def test_hungarian_matching_is_the_global_optimum():
    """Brute force over all pairings: the chosen one maximises the summed |cos| (greedy need not)."""
    rng = np.random.default_rng(1)
    for trial in range(20):
        true = rng.standard_normal((4, 6))
        estimated = true[rng.permutation(4)] + 1.5 * rng.standard_normal((4, 6))
        cos = np.abs((true / np.linalg.norm(true, axis=1, keepdims=True))
                     @ (estimated / np.linalg.norm(estimated, axis=1, keepdims=True)).T)
        best = max(sum(cos[i, p[i]] for i in range(4)) for p in itertools.permutations(range(4)))
        perm, _ = match_components(estimated, true)
        assert sorted(perm.tolist()) == [0, 1, 2, 3]
        assert cos[np.arange(4), perm].sum() == pytest.approx(best, rel=1e-12)


def test_recovery_error_of_a_known_rotation():
    theta = 0.3
    true = np.array([[1.0, 0.0, 0.0]])
    estimated = np.array([[-np.cos(theta), -np.sin(theta), 0.0]])  # rotated by theta, then negated
    assert recovery_error(estimated, true)[0] == pytest.approx(2 * np.sin(theta / 2), rel=1e-12)


def test_extra_estimated_components_are_allowed_fewer_are_not():
    V = np.eye(4)[:2]
    estimated = np.eye(4)[[3, 1, 0]]
    np.testing.assert_allclose(recovery_error(estimated, V), [0.0, 0.0])
    with pytest.raises(ValueError, match="fewer"):
        recovery_error(V[:1], V)


def test_eigenvalue_error_relative_and_in_given_order_without_components():
    np.testing.assert_allclose(eigenvalue_error([1.1, 1.5], [1.0, 2.0]), [0.1, 0.25])
    with pytest.raises(ValueError, match="both"):
        eigenvalue_error([1.0], [1.0], estimated=np.eye(1))
    with pytest.raises(ValueError, match="non-zero"):
        eigenvalue_error([1.0], [0.0])


def _two_angle_case(a, b):
    U = np.eye(5)[:2]
    V = np.array([[np.cos(a), 0, np.sin(a), 0, 0], [0, np.cos(b), 0, np.sin(b), 0]])
    return U, V


@pytest.mark.parametrize("a,b", [(0.0, 0.0), (0.2, 0.7), (np.pi / 2, 0.1), (0.5, 0.5)])
def test_distances_for_known_principal_angles(a, b):
    U, V = _two_angle_case(a, b)
    largest = max(np.sin(a) ** 2, np.sin(b) ** 2)
    assert sin_theta_distance(U, V) == pytest.approx(largest, abs=1e-12)
    assert sin_theta_distance(V, U, squared=False) == pytest.approx(np.sqrt(largest), abs=1e-12)
    assert subspace_distance(U, V) == pytest.approx(np.sqrt((np.sin(a) ** 2 + np.sin(b) ** 2) / 2), abs=1e-12)


def test_distances_ignore_the_basis_and_match_scipy():
    rng = np.random.default_rng(2)
    for _ in range(10):
        U, V = rng.standard_normal((3, 9)), rng.standard_normal((3, 9))
        mixed = rng.standard_normal((3, 3)) @ U  # another (non-orthonormal) basis of the same rows
        angles = scipy.linalg.subspace_angles(U.T, V.T)
        assert sin_theta_distance(mixed, V) == pytest.approx(np.sin(angles.max()) ** 2, rel=1e-9)
        assert subspace_distance(mixed, V) == pytest.approx(np.sqrt(np.mean(np.sin(angles) ** 2)), rel=1e-9)
        # The Frobenius definition, from dense d x d projectors.
        Pu, Pv = (scipy.linalg.orth(A.T) @ scipy.linalg.orth(A.T).T for A in (U, V))
        assert subspace_distance(U, V) == pytest.approx(np.linalg.norm(Pu - Pv) / np.sqrt(6), rel=1e-9)


def test_distances_between_subspaces_of_different_dimension():
    line, plane = np.array([[1.0, 1.0, 0.0]]), np.eye(3)[:2]
    assert sin_theta_distance(line, plane) == pytest.approx(0.0, abs=1e-15)  # the line lies in the plane
    assert sin_theta_distance(plane, line) == pytest.approx(1.0)
    assert subspace_distance(line, plane) == pytest.approx(np.sqrt(1 / 3))  # ||P_U - P_V||_F^2 = 1


def test_rank_deficient_or_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="independent"):
        sin_theta_distance([[1.0, 0.0], [2.0, 0.0]], np.eye(2))
    with pytest.raises(ValueError, match="NaN"):
        subspace_distance([[np.nan, 0.0]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="features"):
        recovery_error(np.eye(3), np.eye(2))


def test_rmse():
    assert rmse([0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0]) == pytest.approx(1.0)
    assert rmse(np.ones((2, 3)), np.ones((2, 3))) == 0.0
    with pytest.raises(ValueError, match="shape"):
        rmse([1.0, 2.0], [1.0])
