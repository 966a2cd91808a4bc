"""User-level private completion: the item side released from sums over users, the user side
solved by each user from her own ratings (joint differential privacy, the billboard model).

The privacy unit is one *user* (mode 0): replacing a user's whole history (which items, how many
up to the public bound ``m``, and the values) is the neighbour relation, and the positions are
private. Every statistic below is a sum over users of a contribution that the bounding makes
small: at most ``m`` entries per user (:func:`bound_contributions`), values in ``[-1/2, 1/2]``
(scaled units), residuals clipped to ``clip``, user factors clipped to norm ``factor_clip``.
Each ``*_sensitivity`` function is the l2 (Frobenius) sensitivity of one statistic under
replace-one-user neighbours, derived in ``docs/derivations/completion.rst`` ("User level") and
checked by brute force in ``tests/test_user_level.py``.

The user factors and offsets the fit solves (:func:`solve_users`) are intermediate: they enter
the next release only through clipped contributions, and are never returned. A caller predicts
for a user by solving her side again, from her own rows, against the released item side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ...mechanisms import gaussian_release
from ..eigen import top_k_eigh, use_top_k
from .dp_als import wiener_solve
from .offsets import eb_shrinkage
from .releases import entry_rounding
from .user_start import power_start, start_method

#: Ridge of a user's own offset in her local solve, as a ratio of the residual variance to the
#: offsets' variance (about 4 for ratings: residual sd 0.9, user-offset sd 0.45, in stars).
USER_OFFSET_REG = 4.0
#: The per-entry residual spread the shrinkage assumes (scaled units; about one star of five).
RESIDUAL_SD = 0.25
#: Ridge of a user's own factor in her local solve (scaled units, the item factors carrying the
#: interaction's scale).
USER_FACTOR_REG = 1.0
#: Columns of the item-item matrix formed at once from the sparse residual rows (bounds the
#: sparse intermediate: ``n_items`` times this many numbers at most).
COOCCURRENCE_BLOCK = 1024


def _sorted_by(groups, keys):
    """``np.lexsort((keys, *reversed(groups)))``, the same permutation, as stable sorts: by the
    float keys, then by each integer group array from the last to the first (``groups[0]`` the
    primary key); a little faster than ``lexsort`` (users and items of 9e6 entries: 4.5 s
    against 4.9 s). No keys are combined arithmetically, so none can overflow: the cell
    ``user * (items.max() + 1) + item`` sorted before wrapped around int64 past 2**63 (its one
    sort fewer saved about 0.7 s there, of a fit that takes a minute)."""
    order = np.argsort(keys, kind="stable")
    for group in reversed(groups):
        order = order[np.argsort(group[order], kind="stable")]
    return order


def bound_contributions(users: np.ndarray, items: np.ndarray, n_users: int, m: int,
                        rng) -> np.ndarray:
    """Indices (sorted) of the entries kept: at most one per (user, item) and at most ``m`` per
    user, chosen uniformly at random.

    Run after the spend with the fit's generator: which entries are kept is random and never
    released. ``users`` and ``items`` are the mode-0 and mode-1 indices of every entry.
    """
    keys = rng.random(len(users))
    order = _sorted_by((users, items), keys)  # by (user, item), at random within a cell
    u, i = users[order], items[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (u[1:] != u[:-1]) | (i[1:] != i[:-1])
    order = order[first]
    # a fresh random order within each user, then the first m
    order = order[_sorted_by((users[order],), rng.random(len(order)))]
    u = users[order]
    starts = np.searchsorted(u, np.arange(n_users))
    rank_in_user = np.arange(len(u)) - starts[u]
    return np.sort(order[rank_in_user < m])


# ---------------------------------------------------------------------------- sensitivities
# Every bound is for replace-one-user neighbours: user u's kept entries (at most ``m``, at most one
# per item, values in [-1/2, 1/2]) replaced by any other such set. ``distinct``: the mode's rows
# are distinct among one user's entries (items, by the bounding); other modes (days) may repeat.
def global_sensitivity(m: int) -> float:
    """``(sum y, n)`` over the kept entries: ``k <= m`` values replaced by ``k'``:
    ``|d sum| <= (k + k') / 2``, ``|d n| = |k - k'|``; largest at ``(0, m)``: ``m sqrt(5) / 2``."""
    return m * math.sqrt(5.0) / 2.0


def count_sensitivity(m: int, distinct: bool = True) -> float:
    """The per-row counts of one mode: a user's count vectors ``c, c'`` are non-negative, so
    ``||c - c'|| <= sqrt(||c||^2 + ||c'||^2)``; ``||c||^2 <= m`` for distinct rows (``sqrt(2m)``),
    ``<= m^2`` when they repeat (``sqrt(2) m``)."""
    return math.sqrt(2.0 * m) if distinct else math.sqrt(2.0) * m


def sum_sensitivity(m: int, clip: float, distinct: bool = True) -> float:
    """Per-row sums of residuals clipped to ``[-clip, clip]``. Distinct rows: a row both users
    hold moves by ``<= 2 clip``, a row one holds by ``<= clip``; at most ``m`` of the first or
    ``2m`` of the second: ``2 clip sqrt(m)``. Repeated rows: each user's vector has l2 norm
    ``<= m clip``: ``2 m clip``."""
    return 2.0 * clip * (math.sqrt(m) if distinct else m)


def gram_sensitivity(m: int, factor_clip: float) -> float:
    """The item Grams ``G_j = sum_u u_u u_u^T`` (``||u_u|| <= C``, distinct items): on an item
    both users hold the PSD blocks differ by ``<= sqrt(C^4 + C^4)``, on one only by ``<= C^2``;
    ``m`` of the first or ``2m`` of the second: ``sqrt(2m) C^2`` (Frobenius)."""
    return math.sqrt(2.0 * m) * factor_clip**2


def rhs_sensitivity(m: int, clip: float, factor_clip: float) -> float:
    """The item right-hand sides ``r_j = sum_u t_uj u_u`` (``|t| <= clip``, ``||u|| <= C``):
    ``2 clip C`` on a shared item, ``clip C`` on one only: ``2 clip C sqrt(m)``."""
    return 2.0 * clip * factor_clip * math.sqrt(m)


def cooccurrence_sensitivity(m: int, clip: float) -> float:
    """The item-item matrix ``sum_u p_u p_u^T`` (``p_u`` the user's clipped residuals, at most
    ``m`` distinct items): ``||p_u p_u^T||_F = ||p_u||^2 <= m clip^2``; two PSD matrices differ by
    at most ``sqrt(2)`` times that in Frobenius norm."""
    return math.sqrt(2.0) * m * clip**2


# ---------------------------------------------------------------------------- statistics
def row_sums(index: np.ndarray, values: np.ndarray, n_rows: int) -> np.ndarray:
    """Per-row sums over entries (``values`` (n,) or (n, p))."""
    if values.ndim == 1:
        return np.bincount(index, weights=values, minlength=n_rows)
    return np.stack([np.bincount(index, weights=values[:, j], minlength=n_rows)
                     for j in range(values.shape[1])], axis=1).reshape(n_rows, values.shape[1])


def cooccurrence(users, items, resid, n_users, n_items) -> np.ndarray:
    """``sum_u p_u p_u^T``: ``P^T P`` with ``P`` the users' clipped residual rows, ``n_items``
    square and dense. ``P`` is held sparse (at most ``m`` entries a row): a dense ``P`` costs
    ``n_users n_items`` floats and the product ``n_users n_items^2`` operations (at 7e4 users
    and 1e4 items, 5.6 GB and minutes), the sparse product only the pairs each user holds. The
    result is formed a block of columns at a time, so no sparse copy of it is ever whole."""
    P = scipy.sparse.csc_matrix((resid, (users, items)), shape=(n_users, n_items))
    Pt = P.T.tocsr()
    M = np.empty((n_items, n_items))
    for start in range(0, n_items, COOCCURRENCE_BLOCK):
        stop = min(start + COOCCURRENCE_BLOCK, n_items)
        M[:, start:stop] = (Pt @ P[:, start:stop]).toarray()
    return M


def normal_equations(src, dst, resid, F, n_dst):
    """``(G, r)``: for each row ``j`` of the output, ``sum F[src] F[src]^T`` and
    ``sum resid F[src]`` over the entries with ``dst == j`` (items from user factors, or a
    user's own Gram from item factors)."""
    Fe = F[src]
    k = F.shape[1]
    G = row_sums(dst, np.einsum("ep,eq->epq", Fe, Fe).reshape(len(src), k * k), n_dst)
    return G.reshape(n_dst, k, k), row_sums(dst, resid[:, None] * Fe, n_dst)


# ---------------------------------------------------------------------------- local solves
def solve_users(users, items, y, n_users, V, offset_reg=USER_OFFSET_REG,
                factor_reg=USER_FACTOR_REG, n_alt=3):
    """Each user's own offset ``a_u`` and factor ``u_u`` from her rows alone: ``y`` are her
    values less the released offsets; ``V`` the released item factors ((n_items, k), or
    ``None``). Ridge least squares, alternating offset and factor ``n_alt`` times. What user
    ``u`` gets depends on the other users only through the released item side."""
    counts = np.bincount(users, minlength=n_users).astype(float)
    k = 0 if V is None else V.shape[1]
    U = np.zeros((n_users, k))
    a = row_sums(users, y, n_users) / (counts + offset_reg)
    if not k:
        return a, U
    G, _ = normal_equations(items, users, y, V, n_users)
    solve = np.linalg.inv(G + factor_reg * np.eye(k))
    for _ in range(n_alt):
        _, r = normal_equations(items, users, y - a[users], V, n_users)
        U = np.einsum("ipq,iq->ip", solve, r)
        inter = np.einsum("ek,ek->e", U[users], V[items])
        a = row_sums(users, y - inter, n_users) / (counts + offset_reg)
    return a, U


def clip_rows(U: np.ndarray, bound: float) -> np.ndarray:
    """Every row scaled to l2 norm at most ``bound``."""
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    return U * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


@dataclass
class ItemSide:
    """The released model: the intercept, every mode's offsets but the users' (``biases[0]``
    is empty), and the item (mode-1) factors ``V`` (``None`` at rank 0)."""

    intercept: float
    biases: list
    V: np.ndarray | None
    #: ``(values, noise)``: the top eigenvalues of the released item-item matrix and their noise
    #: level (:func:`start_noise_level`), in units of ``clip^2``; ``None`` at rank 0.
    start: tuple | None = None


def _release(value, sens, z, rng, n_users, bound, longest):
    """One Gaussian release of a sum over users (each adding at most ``bound`` in the release's
    norm, a coordinate summing at most ``longest`` terms): its rounding from public values."""
    return gaussian_release(value, sens, z, rng,
                            rounding=entry_rounding(n_users, bound, longest))


def offsets_of(X, intercept, biases):
    """The released offsets at each entry (the users' excluded)."""
    out = np.full(len(X), float(intercept))
    for k in range(1, X.shape[1]):
        out += biases[k][X[:, k]]
    return out


def release_offsets(X, y, shape, m, plan, rng):
    """The intercept, then ``plan["rounds"]`` backfitting rounds of every item-side mode's
    offsets (noisy sums over users of clipped residuals, divided by the noisy counts with
    empirical-Bayes shrinkage), each user's offset solved locally before each round.
    Returns ``(intercept, biases, counts)``."""
    n_users, d = shape[0], len(shape)
    clip, z = plan["clip"], plan["zs"]
    n_pub = n_users * m  # public bound on the number of kept entries
    tot = _release(np.array([y.sum(), float(len(y))]), global_sensitivity(m), z["global"], rng,
                   n_users, 1.5 * m, n_pub)
    intercept = float(np.clip(tot[0] / max(tot[1], 1.0), -0.5, 0.5))
    counts = [np.zeros(0)]
    for k in range(1, d):
        raw = np.bincount(X[:, k], minlength=shape[k]).astype(float)
        counts.append(np.maximum(_release(raw, count_sensitivity(m, k == 1), z["counts"], rng,
                                          n_users, m, n_pub), 0.0))
    biases = [np.zeros(0)] + [np.zeros(n) for n in shape[1:]]
    for _ in range(plan["rounds"]):
        a, _ = solve_users(X[:, 0], X[:, 1], y - offsets_of(X, intercept, biases), n_users, None)
        for k in range(1, d):
            others = offsets_of(X, intercept, biases) - biases[k][X[:, k]]
            resid = np.clip(y - others - a[X[:, 0]], -clip, clip)
            sens = sum_sensitivity(m, clip, k == 1)
            sums = _release(row_sums(X[:, k], resid, shape[k]), sens, z["sums"], rng, n_users,
                            m * clip, n_pub)
            # the known-spread path: fitting the spread from means over noisy counts would let a
            # row with a count near 0 and a noisy sum blow the prior up
            kappa = eb_shrinkage(sums, counts[k], (z["sums"] * sens) ** 2,
                                 s2=min(clip, RESIDUAL_SD) ** 2)
            b = sums / np.maximum(counts[k] + kappa, 1e-12)
            biases[k] = np.clip(np.where(counts[k] > 0, b, 0.0), -1.0, 1.0)
    return intercept, biases, counts


def start_noise_level(n_items, m, z, clip) -> float:
    """Half the spectral edge of the start's noise: the released item-item matrix, symmetrised,
    holds off-diagonal noise of std ``z sens / sqrt(2)``, a Wigner matrix whose eigenvalues
    reach ``sqrt(2 n_items) z sens``. A direction whose released eigenvalue is below twice this
    level is the noise's, not the data's (the start drops it). Public quantities only; the
    matrix's units (squared scaled residuals)."""
    return math.sqrt(2.0 * n_items) * z * cooccurrence_sensitivity(m, clip) / 2.0


def start_signal_bound(n_users, m) -> float:
    """The largest eigenvalue the item-item matrix can have, in units of ``clip^2``: it is PSD
    with trace ``sum_u ||p_u||^2 <= n_users m clip^2``."""
    return float(n_users) * m


def private_start(X, resid, shape, m, k, z, rng, clip):
    """Item factors to start from: the top ``k`` eigenvectors of a noisy item-item matrix (one
    release), times ``sqrt(n_items)`` so that an item's row has unit scale per column; a
    direction whose eigenvalue is below the noise's spectral edge starts at 0. Returns
    ``(V, values, noise)``: the released top eigenvalues and their noise level."""
    n_users, n_items = shape[0], shape[1]
    M = cooccurrence(X[:, 0], X[:, 1], resid, n_users, n_items)
    sens = cooccurrence_sensitivity(m, clip)
    M = _release(M, sens, z, rng, n_users, m * clip**2, n_users)
    M = (M + M.T) / 2.0
    # symmetrising halves the off-diagonal variance: the edge of a Wigner matrix of that scale
    noise = start_noise_level(n_items, m, z, clip)
    if use_top_k(n_items, k):  # many items, few factors: Lanczos, to below the noise
        w, Q = top_k_eigh(M, k, noise_norm=2.0 * noise)
    else:
        w, Q = np.linalg.eigh(M)
        top = np.argsort(w)[::-1][:k]
        w, Q = w[top], Q[:, top]
    return Q * math.sqrt(n_items) * (w > 2.0 * noise), w, noise


def item_factor_sweep(X, base, shape, m, V, plan, rng, counts):
    """One ALS half-step on the item side: every user's offset and factor solved locally against
    ``V``, the factor clipped to ``factor_clip``; then the items' Grams and right-hand sides of
    the clipped residuals released (one release each), made symmetric PSD and solved with
    empirical-Bayes shrinkage (:func:`~dptensor.algorithms.completion.dp_als.wiener_solve`)."""
    n_users, n_items = shape[0], shape[1]
    clip, C, z = plan["clip"], plan["factor_clip"], plan["zs"]["factors"]
    a, U = solve_users(X[:, 0], X[:, 1], base, n_users, V)
    U = clip_rows(U, C)
    t = np.clip(base - a[X[:, 0]], -clip, clip)
    G, r = normal_equations(X[:, 0], X[:, 1], t, U, n_items)
    n_pub = n_users * m
    G = _release(G, gram_sensitivity(m, C), z, rng, n_users, m * C**2, n_pub)
    w, Q = np.linalg.eigh((G + np.swapaxes(G, 1, 2)) / 2.0)
    G = np.einsum("ipk,ik,iqk->ipq", Q, np.maximum(w, 0.0), Q)  # nearest PSD: post-processing
    sens = rhs_sensitivity(m, clip, C)
    r = _release(r, sens, z, rng, n_users, m * clip * C, n_pub)
    # residual variance per entry: at most clip^2, about a quarter of it for ratings
    return wiener_solve(G, r, (z * sens) ** 2, counts, clip**2 / 4.0, floor=False)


def fit_user_level(X, y, shape, rank, plan, rng) -> ItemSide:
    """The released item side of a user-level fit on scaled values ``y`` in ``[-1/2, 1/2]``:
    contributions bounded (:func:`bound_contributions`), offsets (:func:`release_offsets`),
    then at ``rank > 0`` a private start (:func:`private_start`, or for many items
    :func:`~dptensor.algorithms.completion.user_start.power_start`) and ``plan["n_iter"]``
    item-factor sweeps."""
    m = plan["m"]
    # The bounding draws one number per entry (a count one user's history moves) from a stream
    # of its own, seeded by a fixed number of the fit's draws: the noise and the power start's
    # random block then come from positions of the fit's stream that do not depend on the data.
    own = np.random.default_rng(rng.integers(0, 2**63, size=4))
    keep = bound_contributions(X[:, 0], X[:, 1], shape[0], m, own)
    X, y = X[keep], y[keep]
    intercept, biases, counts = release_offsets(X, y, shape, m, plan, rng)
    if not rank:
        return ItemSide(intercept, biases, np.zeros((shape[1], 0)))
    base = y - offsets_of(X, intercept, biases)
    a, _ = solve_users(X[:, 0], X[:, 1], base, shape[0], None)
    resid = np.clip(base - a[X[:, 0]], -plan["clip"], plan["clip"])
    # the start the public rule names (the items x items release, or the power iteration)
    start = power_start if start_method(shape[1], rank) == "power" else private_start
    V, w, noise = start(X, resid, shape, m, rank, plan["zs"]["start"], rng, plan["clip"])
    for _ in range(plan["n_iter"]):
        V = item_factor_sweep(X, base, shape, m, V, plan, rng, counts[1])
    clip2 = plan["clip"] ** 2
    return ItemSide(intercept, biases, V, start=(w / clip2, noise / clip2))


def predict_users(X, item_side: ItemSide, hist_X, hist_y, n_users):
    """Scaled predictions at ``X``: each user's offset and factor solved from her own history
    rows (``hist_y`` scaled) against the released item side; a user without history gets the
    item side alone (offsets, no interaction)."""
    V = item_side.V if item_side.V is not None and item_side.V.shape[1] else None
    base = hist_y - offsets_of(hist_X, item_side.intercept, item_side.biases)
    a, U = solve_users(hist_X[:, 0], hist_X[:, 1], base, n_users, V)
    out = offsets_of(X, item_side.intercept, item_side.biases) + a[X[:, 0]]
    if V is not None:
        out += np.einsum("ek,ek->e", U[X[:, 0]], V[X[:, 1]])
    return out


def _real_values(values) -> np.ndarray:
    """A history's values as a flat float64 array: text, complex numbers (whose imaginary parts a
    cast would drop) and other objects refused, in words that quote none of them."""
    v = np.asarray(values)
    if v.dtype.kind == "O":  # numbers held as objects are values as any others
        try:
            v = v.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError("history's values must be real numbers, and some entry is no "
                            "number") from None
    if v.dtype.kind not in "biuf":
        raise TypeError(f"history's values must be real numbers, got dtype {v.dtype}")
    return v.astype(np.float64).reshape(-1)


def check_history(history, shape, value_range, scaling):
    """A prediction history's index tuples and scaled values, checked: ``ValueError`` for a
    malformed pair, an index outside the fitted ``shape`` or a value outside ``value_range``."""
    if not (isinstance(history, (tuple, list)) and len(history) == 2):
        raise ValueError("history must be a pair (X_hist, y_hist) of index tuples and values")
    Xh = np.asarray(history[0])
    if Xh.ndim != 2 or Xh.shape[1] != len(shape):
        raise ValueError(f"history needs (n, {len(shape)}) index tuples and n values, "
                         f"got index tuples of shape {Xh.shape}")
    yh = _real_values(history[1])
    if len(yh) != len(Xh):
        raise ValueError(f"history needs (n, {len(shape)}) index tuples and n values, "
                         f"got {len(Xh)} index tuples and {len(yh)} values")
    if Xh.dtype.kind not in "iu" or np.any(Xh < 0) or np.any(Xh >= np.asarray(shape)):
        raise ValueError(f"history holds an index outside the fitted shape {tuple(shape)} "
                         "(or one that is no non-negative integer)")
    lo, hi = value_range
    if not np.all((yh >= lo) & (yh <= hi)):
        raise ValueError(f"history holds a value outside value_range {tuple(value_range)} "
                         "(or NaN)")
    center, scale = scaling
    return Xh.astype(np.int64), (yh - center) / scale


def predict_released(X, history, intercept, biases, V, shape, value_range, scaling):
    """Predictions in the caller's units from a released item side (``intercept``, ``biases``
    with ``biases[0]`` empty, item factors ``V``, all in the caller's units). A user with
    history rows gets her own offset and factor solved from them; a position with an index at
    or past ``shape`` gets the offsets of the modes it lies inside (cold start)."""
    center, scale = scaling
    n = np.asarray(shape)
    side = ItemSide((intercept - center) / scale,
                    [np.zeros(n[0])] + [b / scale for b in biases[1:]],
                    V / scale if V.shape[1] else None)
    if history is None:
        Xh, yh = np.zeros((0, len(n)), dtype=np.int64), np.zeros(0)
    else:
        Xh, yh = check_history(history, shape, value_range, scaling)
    known = np.all(X < n, axis=1)
    out = predict_users(np.where(X < n, X, 0), side, Xh, yh, int(n[0]))
    cold = np.full(len(X), float(side.intercept))
    for k in range(1, X.shape[1]):
        inside = X[:, k] < n[k]
        cold[inside] += side.biases[k][X[inside, k]]
    return np.clip(center + scale * np.where(known, out, cold), *value_range)
