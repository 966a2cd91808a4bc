"""The user-level start without the items x items release: a private subspace (power) iteration
on the implicit item Gram ``S = sum_u p_u p_u^T``, releasing ``S V`` (items x block) per step.

The dense start (:func:`~dptensor.algorithms.completion.user_level.private_start`) releases
``S`` whole: ``n_items^2`` noise values (7.2 GB at 3e4 items), then Lanczos on it. This one
never forms ``S``: each step computes ``S V = P^T (P V)`` from the users' sparse clipped residual
rows ``P`` (``O(entries x block)``), releases it with Gaussian noise, and orthonormalises the
noisy product into the next ``V`` (post-processing). Replacing one user moves ``S V`` by
``(p p^T - p' p'^T) V``, whose Frobenius norm is at most ``||p p^T - p' p'^T||_F ||V||_2 <=
sqrt(2) m clip^2`` for ``||V||_2 <= 1``: the dense release's sensitivity, whatever the block
(``docs/derivations/completion.rst``, "User level", "The power start").

Which start runs is a public rule of ``n_items`` and the rank (:func:`start_method`); the steps
compose in Gaussian DP like every other release of the fit (``modes/user.py``).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse

from ...mechanisms import gaussian_release
from .releases import entry_rounding

__all__ = ["POWER_START_MIN_ITEMS", "POWER_START_STEPS", "start_method", "start_releases",
           "power_block", "item_gram_product", "product_sensitivity", "contract",
           "power_noise_level", "start_level", "power_start"]

#: From this many items on, the start never forms the items x items release (the rank at most a
#: tenth of them): its noise (``n_items^2`` values), memory (three copies of ``n_items^2`` floats)
#: and eigensolver grow as ``n_items^2`` and more, the power start's as ``n_items``.
POWER_START_MIN_ITEMS = 4000
#: Released products of the power start: each costs a share of the start's budget, so more steps
#: are noisier steps; a few suffice from an oversampled block. On ratings shaped like a
#: 9066-item set (671 and 6710 users, epsilon 3 and 10; ``benchmarks/bench_user_start.py``,
#: validation RMSE) 2 to 6 steps were all within 0.4% of the dense start and of each other.
POWER_START_STEPS = 4


def start_method(n_items, k) -> str:
    """``"power"`` (:func:`power_start`) or ``"dense"`` (the released items x items matrix): a
    public rule of the number of items and the rank.

    >>> start_method(9066, 3), start_method(1682, 3), start_method(9066, 2000)
    ('power', 'dense', 'dense')
    """
    if n_items is None:
        return "dense"
    return "power" if n_items >= POWER_START_MIN_ITEMS and k <= n_items / 10 else "dense"


def start_releases(n_items, k) -> int:
    """How many Gaussian releases the start makes (public)."""
    return POWER_START_STEPS if start_method(n_items, k) == "power" else 1


def power_block(k) -> int:
    """Columns of the iterated block: oversampled, since the sensitivity does not grow with them
    and the noise's edge only as ``sqrt(block)``, while convergence to the top ``k`` improves."""
    return int(k) + max(int(k), 5)


def item_gram_product(users, items, resid, n_users, n_items, V) -> np.ndarray:
    """``S V = P^T (P V)``, ``P`` the users' clipped residual rows (sparse, at most ``m`` entries
    a row): a sum over users of ``p_u (p_u^T V)``, each user's term from her row alone."""
    P = scipy.sparse.csr_matrix((resid, (users, items)), shape=(n_users, n_items))
    return np.asarray(P.T @ (P @ V))


def product_sensitivity(m, clip) -> float:
    """Frobenius sensitivity of ``S V`` (``||V||_2 <= 1``) under whole-user replacement:
    ``||(p p^T - p' p'^T) V||_F <= ||p p^T - p' p'^T||_F <= sqrt(||p||^4 + ||p'||^4) <=
    sqrt(2) m clip^2`` (two PSD rank-one matrices: their inner product is non-negative)."""
    return math.sqrt(2.0) * m * clip**2


def contract(V) -> np.ndarray:
    """``V`` scaled so that its spectral norm is at most 1, as the sensitivity needs, whatever the
    rounding of the QR that made it near-orthonormal: ``||V||_2^2 = ||V^T V||_2 <= 1 +
    ||V^T V - I||_F``, the computed Gram within ``gamma_n ||V||_F^2`` of the exact one (its
    columns' norms bounded by a computed ``||V||_F^2``), all bounded above with a margin."""
    n, b = V.shape
    u = np.finfo(np.float64).eps / 2.0
    gamma = (n + 2) * u / (1.0 - (n + 2) * u)
    G = V.T @ V
    frob2 = float(np.sum(V * V)) * (1.0 + gamma)
    excess = float(np.linalg.norm(G - np.eye(b))) * (1.0 + 4.0 * u) + gamma * frob2
    return V / math.sqrt(1.0 + 2.0 * excess + 8.0 * u)


def power_noise_level(n_items, k, m, z, clip) -> float:
    """Half the edge of the noise of one released product (items x block Gaussian of std
    ``z s``, ``s`` = :func:`product_sensitivity`): its largest singular value is near ``z s
    (sqrt(n_items) + sqrt(block))``. A direction whose released singular value is below twice
    this level is the noise's (the start drops it). Public quantities only."""
    return z * product_sensitivity(m, clip) * (math.sqrt(n_items) + math.sqrt(power_block(k))) / 2


def start_level(n_items, k, m, z, clip) -> float:
    """The noise level the start the rule names (:func:`start_method`) records: half its noise's
    edge (the dense start's: :func:`~dptensor.algorithms.completion.user_level.
    start_noise_level`), from public quantities only."""
    if start_method(n_items, k) == "power":
        return power_noise_level(n_items, k, m, z, clip)
    return math.sqrt(2.0 * n_items) * z * product_sensitivity(m, clip) / 2.0


def power_start(X, resid, shape, m, k, z, rng, clip):
    """Item factors to start from, as :func:`~dptensor.algorithms.completion.user_level.
    private_start` returns them (``(V, values, noise)``): ``POWER_START_STEPS`` released
    products ``S V + N`` (each with noise multiplier ``z``), each orthonormalised into the next
    ``V``; the top ``k`` left singular vectors of the last one, times ``sqrt(n_items)``, those
    below the noise's edge at 0. ``values``: their released singular values."""
    n_users, n_items = shape[0], shape[1]
    users, items = X[:, 0], X[:, 1]
    sens = product_sensitivity(m, clip)
    b = min(power_block(k), n_items)
    # a user adds ||p (p^T V)||_F <= m clip^2 sqrt(b) in absolute values (|V| has Frobenius norm
    # sqrt(b)); a coordinate sums her m products and then the users' terms, times one product
    rounding = entry_rounding(n_users, m * clip**2 * math.sqrt(b), n_users + m, later=1)
    V = contract(np.linalg.qr(rng.standard_normal((n_items, b)))[0])  # data-independent start
    for step in range(POWER_START_STEPS):
        Y = gaussian_release(item_gram_product(users, items, resid, n_users, n_items, V), sens,
                             z, rng, rounding=rounding)
        if step + 1 < POWER_START_STEPS:
            V = contract(np.linalg.qr(Y)[0])
    Q, s, _ = np.linalg.svd(Y, full_matrices=False)
    Q, s = Q[:, :k], s[:k]
    noise = power_noise_level(n_items, k, m, z, clip)
    return Q * math.sqrt(n_items) * (s > 2.0 * noise), s, noise
