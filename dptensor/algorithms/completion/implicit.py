r"""Implicit-feedback interactions for completion: a two-mode term learned through the public
positions.

Which positions are observed (Omega) is public, and on ratings it says much about the values: who
rated which items. :class:`ImplicitDesign` builds, from Omega alone, for two modes with a factor
(the *lead* mode, e.g. users, and its *partner*, e.g. items)

* ``z_i``: the unit-norm indicator of the partner rows observed with lead row ``i`` (and ``z'_j``
  of the lead rows observed with partner row ``j``), and
* ``p_i``, ``q_j``: the two modes' spectral embeddings of Omega (``rank`` columns, rows of norm at
  most 1),

and models the interaction as ``f(e) = z_i^T Y q_j + p_i^T W z'_j`` with learned ``Y`` (partner rows
x rank) and ``W`` (lead rows x rank): a user's factor is the normalised sum of learned vectors over
the items they rated, and an item's over the users who rated it. Every entry then informs the
parameters through all the rows its lead and partner rows observed, so the sufficient statistic
``B = sum_e t_e x_e`` of a least-squares fit (``x_e`` the entry's design, of norm at most
``sqrt(2)``) is one release of sensitivity ``sqrt(2) min(1, 2 clip)`` whose signal adds up over
many entries, where per-row factor releases drown in their noise. Its Gram is public;
:func:`wiener_fit` solves the noisy normal equations with an empirical-Bayes (Wiener) filter.
Derivation: ``docs/derivations/completion.rst``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from .releases import entry_rounding

__all__ = ["ImplicitDesign", "wiener_fit", "wiener_filter", "lanczos_function", "DESIGN_NORM",
           "implicit_rounding"]

#: Rademacher probes of the Hutchinson estimate of ``tr(G^2)`` (a public quantity, estimated with a
#: fixed seed so that the fit is a deterministic function of the releases and Omega).
TRACE_PROBES = 16
#: Leading directions of the Gram fitted one by one in the prior's variance (``wiener_fit``).
TOP_DIRECTIONS = 20
#: Lanczos steps of the Wiener solve at most, and its relative tolerance (checked every
#: ``LANCZOS_CHECK`` steps on the change of the solution).
LANCZOS_MAXITER = 300
LANCZOS_RTOL = 1e-4
LANCZOS_CHECK = 10


class ImplicitDesign:
    """The design of ``f(e) = z_{i(e)}^T Y q_{j(e)} + p_{i(e)}^T W z'_{j(e)}`` on the observed
    entries.

    ``lead`` (``i``, e.g. users) and ``partner`` (``j``, e.g. items) are the two modes with a
    factor. A lead row's factor is the normalised sum of learned vectors (``Y``) over the partner
    rows it was observed with (``z_i``, the rows of ``lead_z``), and symmetrically a partner row's
    factor sums ``W`` over its lead rows (``z'_j``, the rows of ``partner_z``); ``q_j`` and ``p_i``
    are the two modes' spectral embeddings of Omega (``rank`` columns, rows of norm at most 1). All
    of it is a function of Omega (public). The parameters are one flat vector ``(vec Y, vec W)``;
    each entry's design has norm ``sqrt(|z_i|^2 |q_j|^2 + |z'_j|^2 |p_i|^2) <= sqrt(2)``:
    ``DESIGN_NORM``.

    An entry's design depends only on its pair ``(i, j)``, so every product runs over the observed
    pairs (entries on several days of one pair are one pair, weighted by their count): ``f`` at
    every pair from two gathers of the small ``Z Y`` and ``Z' W`` against the pairs' embedding rows
    (kept transposed, so each pass is contiguous), and a weighted sum of designs as one sparse
    matrix with the pairs' weights times the embeddings (``S = N_w Q``, ``T = N_w^T P``), then
    ``Z^T S`` and ``Z'^T T``: no per-entry temporary of ``rank`` columns.
    """

    def __init__(self, obs, lead: int, partner: int, rank: int):
        self.lead, self.partner, self.rank = lead, partner, rank
        n_lead, n_partner = obs.shape[lead], obs.shape[partner]
        # (ravel_multi_index refuses a grid of more than 2**63 pairs rather than wrap around)
        keys, self._pair_of_entry, counts = np.unique(
            np.ravel_multi_index((obs.X[:, lead], obs.X[:, partner]), (n_lead, n_partner)),
            return_inverse=True, return_counts=True)
        pi, pj = keys // n_partner, keys % n_partner  # sorted by lead row: CSR order
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(pi, minlength=n_lead))])
        self._pi, self._pj, self.counts = pi, pj, counts.astype(float)
        self._pairs_shape = (n_lead, n_partner)
        lead_scale = 1.0 / np.sqrt(np.maximum(np.bincount(pi, minlength=n_lead), 1.0))
        partner_scale = 1.0 / np.sqrt(np.maximum(np.bincount(pj, minlength=n_partner), 1.0))
        # unit-norm rows of the incidence (a position observed on several days counts once), from
        # each side; 0 for a row without entries
        self.lead_z = self._pairs_matrix(lead_scale[pi])
        self.partner_z = self._pairs_matrix(partner_scale[pj]).T.tocsr()
        normalized = self._pairs_matrix(lead_scale[pi] * partner_scale[pj])
        self.P, self.Q = spectral_embeddings(normalized, rank)
        self._Qt = np.ascontiguousarray(self.Q[pj].T)  # (rank, n_pairs)
        self._Pt = np.ascontiguousarray(self.P[pi].T)
        self._split = self.Q.size
        self._bulks = {}

    def _pairs_matrix(self, data):
        """The ``(lead rows, partner rows)`` sparse matrix with ``data`` at the observed pairs."""
        return sp.csr_matrix((data, self._pj, self._indptr), shape=self._pairs_shape)

    @property
    def shape(self):
        """The parameters' shape: one flat vector ``(vec Y, vec W)``."""
        return (self.Q.size + self.P.size,)

    def _parts(self, theta):
        theta = np.asarray(theta).ravel()
        return theta[:self._split].reshape(self.Q.shape), theta[self._split:].reshape(self.P.shape)

    def _pair_values(self, theta):
        """``f`` at every observed pair."""
        Y, W = self._parts(theta)
        out = np.take(np.ascontiguousarray((self.lead_z @ Y).T), self._pi, axis=1)
        out *= self._Qt
        other = np.take(np.ascontiguousarray((self.partner_z @ W).T), self._pj, axis=1)
        other *= self._Pt
        return out.sum(axis=0) + other.sum(axis=0)

    def _pairs_adjoint(self, weights):
        """``sum_pairs weights x_pair``: a flat vector."""
        N = self._pairs_matrix(weights)
        return np.concatenate([(self.lead_z.T @ (N @ self.Q)).ravel(),
                               (self.partner_z.T @ (N.T @ self.P)).ravel()])

    def apply(self, theta):
        """``f(e)`` at every observed entry."""
        return self._pair_values(theta)[self._pair_of_entry]

    def adjoint(self, w):
        """The sum over entries of ``w_e`` times the entry's design: a flat vector."""
        pair_sums = np.bincount(self._pair_of_entry, weights=w, minlength=len(self.counts))
        return self._pairs_adjoint(pair_sums)

    def gram(self, theta):
        """``adjoint(apply(theta))``, over the pairs."""
        return self._pairs_adjoint(self.counts * self._pair_values(theta))

    def factors(self, theta):
        """The CP factors (lead, partner), ``2 rank`` columns each: ``[Z Y, P]`` and
        ``[Q, Z' W]``."""
        Y, W = self._parts(theta)
        return np.hstack([self.lead_z @ Y, self.P]), np.hstack([self.Q, self.partner_z @ W])

    def bulk(self, n_top):
        """The Gram ``G`` without its ``n_top`` leading directions: ``(V, g, tr1, tr2)`` with ``V``
        ``(dim, n_top)`` the leading eigenvectors and ``g`` their eigenvalues (Lanczos from a fixed
        start), and ``tr1``, ``tr2`` the traces of ``G`` and ``G^2`` on the rest: the first exactly
        (``tr G = sum_e |z|^2 |q|^2 + |z'|^2 |p|^2``), the second by a Hutchinson estimate on the
        deflated Gram with a fixed seed (its variance is small once the dominant directions are
        out). All of it public: functions of Omega, computed once (a fit asks for them before its
        spend, :meth:`~dptensor.algorithms.completion.modes.implicit.Implicit.prepare`, so that
        a solver failing on its positions fails it before anything is spent)."""
        if n_top not in self._bulks:
            self._bulks[n_top] = self._bulk(n_top)
        return self._bulks[n_top]

    def _bulk(self, n_top):
        dim = self.shape[0]
        op = sla.LinearOperator((dim, dim), matvec=self.gram)
        # every pair's rows have entries, so |z_i| = |z'_j| = 1 there
        total = float(self.counts @ (np.sum(self._Qt**2, axis=0) + np.sum(self._Pt**2, axis=0)))
        if total == 0.0:  # G = 0 (positive semi-definite, no trace): embeddings all 0, e.g. one
            # lead or partner row, or a single pair; ARPACK fails on it ("starting vector is zero")
            return np.zeros((dim, 0)), np.zeros(0), 0.0, 0.0
        n_top = min(n_top, dim - 2)
        if n_top > 0:
            g, V = sla.eigsh(op, k=n_top, which="LA", v0=np.ones(dim) / math.sqrt(dim))
            g = np.maximum(g, 0.0)
        else:
            g, V = np.zeros(0), np.zeros((dim, 0))
        tr1 = total - float(g.sum())
        probes = np.random.default_rng(0)

        def deflated(v):
            return v - V @ (V.T @ v)

        tr2 = np.mean([np.sum(deflated(op.matvec(deflated(probes.choice([-1.0, 1.0], dim)))) ** 2)
                       for _ in range(TRACE_PROBES)])
        return V, g, max(tr1, 0.0), float(tr2)


#: Bound on the norm of one entry's design in :class:`ImplicitDesign` (two unit terms).
DESIGN_NORM = math.sqrt(2.0)


def spectral_embeddings(normalized, rank):
    """Both modes' spectral embeddings from the degree-normalised incidence matrix: its left and
    right singular vectors 2 to ``rank + 1`` (the first pair is the degrees' square roots, which
    the offsets already carry), scaled to unit root-mean-square and clipped to rows of norm at
    most 1. Columns past the matrix's rank are 0."""
    n_rows, n_cols = normalized.shape
    k = min(rank + 1, min(n_rows, n_cols))
    if n_rows * n_cols <= 250_000:
        u, s, vt = np.linalg.svd(normalized.toarray(), full_matrices=False)
    elif min(n_rows, n_cols) <= 2 * (rank + 1):
        # one side too small for ARPACK: the eigenvectors of its (small) Gram, the other side's
        # vectors from them, never the dense matrix
        A = normalized.T if n_cols <= n_rows else normalized
        e, small = np.linalg.eigh((A @ A.T).toarray())
        s = np.sqrt(np.maximum(e, 0.0))
        big = (A.T @ small) / np.where(s > 0, s, 1.0)
        u, vt = (big, small.T) if n_cols <= n_rows else (small, big.T)
    else:
        # ARPACK from a fixed start: a deterministic function of Omega
        n_small = min(n_rows, n_cols)
        u, s, vt = sla.svds(normalized, k=k, v0=np.ones(n_small) / math.sqrt(n_small))
    order = np.argsort(-s)[1:k]

    def embed(vectors, n):
        E = np.zeros((n, rank))
        E[:, :len(order)] = vectors * math.sqrt(n)
        return E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1.0)

    return embed(u[:, order], n_rows), embed(vt[order].T, n_cols)


def _prior_variance(g, c2, rest, tr1, tr2, bulk2, s2, noise_var):
    """``tau^2`` by weighted least squares on ``E c^2 = tau^2 g^2 + s2 g + noise_var``: each leading
    direction on its own, the ``rest`` others as one group (its mean ``c^2`` over directions of
    mean ``g`` and ``g^2``, weighted by their number), weights the inverse squared second moments
    refitted twice, as for the factor rows of DP-ALS: directions of large ``g``, whose ``c^2``
    varies most, count least."""
    g1 = np.append(g, tr1 / max(rest, 1))
    g2 = np.append(g**2, tr2 / max(rest, 1))
    c2 = np.append(c2, bulk2 / max(rest, 1))
    count = np.append(np.ones(len(g)), rest)
    t = c2 - noise_var - s2 * g1
    tau2 = 0.0
    for _ in range(3):
        # the weights matter up to a common factor: taken relative to the smallest second moment
        # they lie in [0, 1], where 1 / v^2 itself overflowed (a fit without noise, v ~ 1e-300)
        v = tau2 * g2 + s2 * g1 + noise_var
        low = float(np.min(v[v > 0])) if np.any(v > 0) else 1.0
        w = count * (low / np.maximum(v, low)) ** 2
        tau2 = max(float(np.sum(w * g2 * t) / max(np.sum(w * g2**2), 1e-300)), 0.0)
    return tau2


def wiener_fit(design: ImplicitDesign, B, *, s2, noise_var, n_se=2.0):
    """The parameters ``theta`` from the released statistic ``B``: :func:`wiener_filter` applied
    to it (0 when the filter is)."""
    apply = wiener_filter(design, B, s2=s2, noise_var=noise_var, n_se=n_se)
    return np.zeros(design.shape) if apply is None else apply(B)


def wiener_filter(design: ImplicitDesign, B, *, s2, noise_var, n_se=2.0):
    """The parameters ``theta`` from the released statistic ``B = G theta + X^T eps + xi`` (``G``
    public, residual noise ``eps ~ (0, s2)`` per entry, release noise ``xi ~ N(0, noise_var I)``).

    With the prior ``theta ~ (0, tau^2 I)``, in the eigenbasis of ``G`` each coordinate of ``B`` has
    second moment ``tau^2 g^2 + s2 g + noise_var`` and the posterior mean is
    ``tau^2 (tau^2 G^2 + s2 G + noise_var I)^{-1} G B`` (without release noise: the ridge
    ``(G + s2 / tau^2 I)^{-1} B``): exactly on the leading directions below, on the rest by the
    Lanczos method on products with ``G`` (:func:`lanczos_function`).
    ``tau^2`` is fitted (:func:`_prior_variance`) on the ``TOP_DIRECTIONS`` leading directions of
    ``G`` one by one and on the rest as one group, each weighted by the inverse of its squared
    second moment: the leading directions (popular rows, whose signal the offsets already hold)
    vary most and count least, where one moment over all directions let them set ``tau^2`` (on
    MovieLens-100K, a ridge five times too strong). Lowered by ``n_se`` standard errors of the
    noise's share (``sqrt(2 (dim - m)) noise_var / tr_P G^2``, ``P`` the projection off the
    leading directions), so that a release swamped by noise gives ``theta = 0`` (offsets only).
    Released ``B`` and public quantities only: post-processing. Returns the filter, a linear map
    fitted to ``B`` (``None`` when it is 0), so that it can be applied to other vectors too (the
    release noise alone: :func:`~dptensor.algorithms.completion.fit_noise.implicit_levels`).
    """
    dim = B.size
    V, g, tr1, tr2 = design.bulk(TOP_DIRECTIONS)
    rest = dim - V.shape[1]
    if tr2 <= 0.0:
        return None
    b = B.ravel()
    top = V.T @ b
    bulk = b - V @ top
    se = math.sqrt(2.0 * rest) * noise_var / tr2
    tau2 = _prior_variance(g, top**2, rest, tr1, tr2, float(bulk @ bulk), s2, noise_var) - n_se * se
    if not tau2 > 0.0:
        return None
    shape = design.shape
    if noise_var == 0.0:
        def h(e):
            return 1.0 / (e + s2 / tau2)
    else:
        def h(e):
            return tau2 * e / (tau2 * e**2 + s2 * e + noise_var)

    def off_top(v):
        return v - V @ (V.T @ v)

    def apply(vector):
        # On the leading directions (known) the filter is applied exactly; on the rest by the
        # Lanczos method on the deflated Gram, one product with G a step (the filter's own
        # operator, a quadratic in G, would take two products a step and square the condition
        # number).
        v = np.asarray(vector).ravel()
        lead = V.T @ v
        rest_part = lanczos_function(lambda u: off_top(design.gram(off_top(u).reshape(shape))),
                                     v - V @ lead, h)
        return (V @ (h(g) * lead) + rest_part).reshape(shape)
    return apply


def lanczos_function(op, b, h, *, rtol=LANCZOS_RTOL, maxiter=LANCZOS_MAXITER, check=LANCZOS_CHECK):
    """``h(A) b`` for a symmetric positive semi-definite ``A`` (``op``: its products) by the Lanczos
    method: ``|b| Q_m h(T_m) e_1`` on the Krylov basis ``Q_m`` (fully reorthogonalised) with the
    tridiagonal ``T_m``; every ``check`` steps the estimate is formed and the method stops once it
    moves by at most ``rtol`` of its norm (or the Krylov space is exhausted). Like conjugate
    gradients for a ridge ``h``, for any ``h`` continuous on the spectrum."""
    dim = b.size
    beta0 = float(np.linalg.norm(b))
    if beta0 == 0.0:
        return np.zeros(dim)
    basis = np.empty((min(maxiter, dim) + 1, dim))
    basis[0] = b / beta0
    alpha, beta = [], []
    estimate, scale = None, 0.0
    for j in range(len(basis) - 1):
        w = op(basis[j])
        alpha.append(float(basis[j] @ w))
        scale = max(scale, float(np.linalg.norm(w)))  # |A q| over the steps: A's scale, from below
        w -= basis[:j + 1].T @ (basis[:j + 1] @ w)  # reorthogonalised against the whole basis
        beta.append(float(np.linalg.norm(w)))
        exhausted = beta[-1] <= 1e-12 * max(scale, 1e-300)
        if exhausted or (j + 1) % check == 0 or j == len(basis) - 2:
            T = np.diag(alpha) + np.diag(beta[:-1], 1) + np.diag(beta[:-1], -1)
            theta, S = np.linalg.eigh(T)
            new = basis[:j + 1].T @ (S @ (h(np.maximum(theta, 0.0)) * S[0])) * beta0
            converged = (estimate is not None
                         and np.linalg.norm(new - estimate) <= rtol * np.linalg.norm(new))
            if exhausted or converged:
                return new
            estimate = new
        basis[j + 1] = w / beta[-1]
    return estimate


def implicit_rounding(n_obs, clip):
    """The rounding of the implicit statistic ``B = sum_e t~_e x_e``: each entry adds its clipped
    residual (``<= clip``) times its design (norm ``<= DESIGN_NORM``). A coordinate of ``B`` sums
    over the entries of every pair of a lead row observed with its partner row (or the converse):
    at most every entry, added within its pair, times the embedding, summed over the row's pairs,
    then times the normalised incidence: one more product after a partial sum."""
    return entry_rounding(n_obs, DESIGN_NORM * clip, n_obs, later=1)
