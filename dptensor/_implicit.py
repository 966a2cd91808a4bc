r"""Implicit-feedback interactions for completion: a two-mode term learned through the public positions.

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

__all__ = ["ImplicitDesign", "wiener_fit", "DESIGN_NORM"]

#: Rademacher probes of the Hutchinson estimate of ``tr(G^2)`` (a public quantity, estimated with a
#: fixed seed so that the fit is a deterministic function of the releases and Omega).
TRACE_PROBES = 16
#: Leading directions of the Gram fitted one by one in the prior's variance (``wiener_fit``).
TOP_DIRECTIONS = 20
#: Conjugate-gradient iterations of the Wiener solve, and its relative tolerance.
CG_MAXITER = 200
CG_RTOL = 1e-4


class _Side:
    """One side of the interaction: each row ``r`` of one mode represented through the rows of the
    other mode it was observed with, ``f_side(e) = z_{r(e)}^T Y q_{c(e)}`` (``z_r``: the unit-norm
    indicator of those rows; ``q_c``: the other mode's public embedding). Products with the design
    and its adjoint are two sparse products each: no per-entry Python loop, no dense design."""

    def __init__(self, Z, Q, rows, cols):
        self.Z, self.Q, self.rows = Z, Q, rows
        n_rows, n = Z.shape[0], len(rows)
        self._by_row = sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(n_rows, n))
        self._Qc = Q[cols]
        # Its Gram is Z^T diag_r(M_r) Z with M_r = sum over row r's entries of q_c q_c^T: formed once
        # (rank columns at a time, never an (n, rank^2) array) when the rows hold more than rank
        # entries on average; its products then skip the per-entry work that dominates the
        # conjugate-gradient solve.
        rank = Q.shape[1]
        self._M = None
        if n_rows * rank < n:
            self._M = np.stack([self._by_row @ (self._Qc[:, a:a + 1] * self._Qc) for a in range(rank)],
                               axis=1)

    @property
    def shape(self):
        return self.Q.shape

    def apply(self, Y):
        return np.einsum("ek,ek->e", (self.Z @ Y)[self.rows], self._Qc)

    def adjoint(self, w):
        return self.Z.T @ (self._by_row @ (w[:, None] * self._Qc))

    def gram(self, Y):
        if self._M is None:
            return self.adjoint(self.apply(Y))
        return self.Z.T @ np.einsum("ikl,il->ik", self._M, self.Z @ Y)


class ImplicitDesign:
    """The design of ``f(e) = z_{i(e)}^T Y q_{j(e)} + p_{i(e)}^T W z'_{j(e)}`` on the observed entries.

    ``lead`` (``i``, e.g. users) and ``partner`` (``j``, e.g. items) are the two modes with a factor.
    A lead row's factor is the normalised sum of learned vectors (``Y``) over the partner rows it was
    observed with (``z_i``), and symmetrically a partner row's factor sums ``W`` over its lead rows
    (``z'_j``); ``q_j`` and ``p_i`` are the two modes' spectral embeddings of Omega (``rank``
    columns, rows of norm at most 1). All of it is a function of Omega (public). The parameters are
    one flat vector ``(vec Y, vec W)``; each entry's design has norm
    ``sqrt(|z_i|^2 |q_j|^2 + |z'_j|^2 |p_i|^2) <= sqrt(2)``: ``DESIGN_NORM``.
    """

    def __init__(self, obs, lead: int, partner: int, rank: int):
        self.lead, self.partner, self.rank = lead, partner, rank
        i, j = obs.X[:, lead], obs.X[:, partner]
        n_lead, n_partner, n = obs.shape[lead], obs.shape[partner], len(obs.X)
        incidence = sp.csr_matrix((np.ones(n), (i, j)), shape=(n_lead, n_partner))
        incidence.sum_duplicates()
        incidence.data[:] = 1.0  # a position observed on several days counts once
        lead_degree = np.asarray(incidence.sum(axis=1)).ravel()
        partner_degree = np.asarray(incidence.sum(axis=0)).ravel()
        lead_scale = sp.diags(1.0 / np.sqrt(np.maximum(lead_degree, 1.0)))
        partner_scale = sp.diags(1.0 / np.sqrt(np.maximum(partner_degree, 1.0)))
        P, Q = spectral_embeddings(lead_scale @ incidence @ partner_scale, rank)
        # unit-norm rows of the incidence, from each side (0 for a row without entries)
        self.lead_side = _Side(sp.csr_matrix(lead_scale @ incidence), Q, i, j)
        self.partner_side = _Side(sp.csr_matrix(partner_scale @ incidence.T), P, j, i)
        self.P, self.Q = P, Q
        self._split = Q.size

    @property
    def shape(self):
        """The parameters' shape: one flat vector ``(vec Y, vec W)``."""
        return (self.Q.size + self.P.size,)

    def _parts(self, theta):
        theta = np.asarray(theta).ravel()
        return theta[:self._split].reshape(self.Q.shape), theta[self._split:].reshape(self.P.shape)

    def apply(self, theta):
        """``f(e)`` at every observed entry."""
        Y, W = self._parts(theta)
        return self.lead_side.apply(Y) + self.partner_side.apply(W)

    def adjoint(self, w):
        """The sum over entries of ``w_e`` times the entry's design: a flat vector."""
        return np.concatenate([self.lead_side.adjoint(w).ravel(), self.partner_side.adjoint(w).ravel()])

    def gram(self, theta):
        """``adjoint(apply(theta))``: the diagonal blocks from the sides' per-row blocks, the cross
        terms through the entries."""
        Y, W = self._parts(theta)
        a, b = self.lead_side, self.partner_side
        return np.concatenate([(a.gram(Y) + a.adjoint(b.apply(W))).ravel(),
                               (b.gram(W) + b.adjoint(a.apply(Y))).ravel()])

    def factors(self, theta):
        """The CP factors (lead, partner), ``2 rank`` columns each: ``[Z Y, P]`` and ``[Q, Z' W]``."""
        Y, W = self._parts(theta)
        return (np.hstack([np.asarray(self.lead_side.Z @ Y), self.P]),
                np.hstack([self.Q, np.asarray(self.partner_side.Z @ W)]))

    def bulk(self, n_top):
        """The Gram ``G`` without its ``n_top`` leading directions: ``(V, g, tr1, tr2)`` with ``V``
        ``(dim, n_top)`` the leading eigenvectors and ``g`` their eigenvalues (Lanczos from a fixed
        start), and ``tr1``, ``tr2`` the traces of ``G`` and ``G^2`` on the rest: the first exactly
        (``tr G = sum_e |z|^2 |q|^2 + |z'|^2 |p|^2``), the second by a Hutchinson estimate on the
        deflated Gram with a fixed seed (its variance is small once the dominant directions are
        out). All of it public: functions of Omega."""
        dim = self.shape[0]
        op = sla.LinearOperator((dim, dim), matvec=self.gram)
        n_top = min(n_top, dim - 2)
        if n_top > 0:
            g, V = sla.eigsh(op, k=n_top, which="LA", v0=np.ones(dim) / math.sqrt(dim))
            g = np.maximum(g, 0.0)
        else:
            g, V = np.zeros(0), np.zeros((dim, 0))
        total = sum(float(np.sum(side._Qc**2)) for side in (self.lead_side, self.partner_side))
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
    """Both modes' spectral embeddings from the degree-normalised incidence matrix: its left and right
    singular vectors 2 to ``rank + 1`` (the first pair is the degrees' square roots, which the
    offsets already carry), scaled to unit root-mean-square and clipped to rows of norm at most 1.
    Columns past the matrix's rank are 0."""
    n_rows, n_cols = normalized.shape
    k = min(rank + 1, min(n_rows, n_cols))
    if min(n_rows, n_cols) <= 2 * (rank + 1) or n_rows * n_cols <= 250_000:
        u, s, vt = np.linalg.svd(normalized.toarray(), full_matrices=False)
    else:
        # ARPACK from a fixed start: a deterministic function of Omega
        u, s, vt = sla.svds(normalized, k=k, v0=np.ones(min(n_rows, n_cols)) / math.sqrt(min(n_rows, n_cols)))
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
        w = count / np.maximum(tau2 * g2 + s2 * g1 + noise_var, 1e-300) ** 2
        tau2 = max(float(np.sum(w * g2 * t) / max(np.sum(w * g2**2), 1e-300)), 0.0)
    return tau2


def wiener_fit(design: ImplicitDesign, B, *, s2, noise_var, n_se=2.0):
    """The parameters ``theta`` from the released statistic ``B = G theta + X^T eps + xi`` (``G``
    public, residual noise ``eps ~ (0, s2)`` per entry, release noise ``xi ~ N(0, noise_var I)``).

    With the prior ``theta ~ (0, tau^2 I)``, in the eigenbasis of ``G`` each coordinate of ``B`` has
    second moment ``tau^2 g^2 + s2 g + noise_var`` and the posterior mean is
    ``tau^2 (tau^2 G^2 + s2 G + noise_var I)^{-1} G B`` (without release noise: the ridge
    ``(G + s2 / tau^2 I)^{-1} B``), solved by conjugate gradients on products with ``G``.
    ``tau^2`` is fitted (:func:`_prior_variance`) on the ``TOP_DIRECTIONS`` leading directions of
    ``G`` one by one and on the rest as one group, each weighted by the inverse of its squared
    second moment: the leading directions (popular rows, whose signal the offsets already hold)
    vary most and count least, where one moment over all directions let them set ``tau^2`` (on
    MovieLens-100K, a ridge five times too strong). Lowered by ``n_se`` standard errors of the
    noise's share (``sqrt(2 (dim - m)) noise_var / tr_P G^2``, ``P`` the projection off the
    leading directions), so that a release swamped by noise gives ``theta = 0`` (offsets only).
    Released ``B`` and public quantities only: post-processing.
    """
    dim = B.size
    V, g, tr1, tr2 = design.bulk(TOP_DIRECTIONS)
    rest = dim - V.shape[1]
    if tr2 <= 0.0:
        return np.zeros(design.shape)
    b = B.ravel()
    top = V.T @ b
    bulk = b - V @ top
    se = math.sqrt(2.0 * rest) * noise_var / tr2
    tau2 = _prior_variance(g, top**2, rest, tr1, tr2, float(bulk @ bulk), s2, noise_var) - n_se * se
    if not tau2 > 0.0:
        return np.zeros(design.shape)
    shape = design.shape

    def gram(v):
        return design.gram(v.reshape(shape))

    # Deflation preconditioner: the solve's operator is f(G); on the leading directions (known
    # exactly) it is inverted exactly, on the rest scaled by f at the rest's mean eigenvalue. The
    # leading directions are what makes f(G) ill-conditioned: without this the solve needed
    # hundreds of products with G and stopped short of its tolerance.
    def preconditioner(f):
        top, scale = f(g), f(tr1 / max(rest, 1))

        def apply(v):
            c = V.T @ v
            return V @ (c / top) + (v - V @ c) / scale
        return sla.LinearOperator((dim, dim), matvec=apply)

    if noise_var == 0.0:
        op = sla.LinearOperator((dim, dim), matvec=lambda v: (gram(v) + s2 / tau2 * v.reshape(shape)).ravel())
        x, _ = sla.cg(op, b, rtol=CG_RTOL, maxiter=CG_MAXITER, M=preconditioner(lambda e: e + s2 / tau2))
        return x.reshape(shape)

    def wiener(v):
        g1 = gram(v)
        return (tau2 * design.gram(g1) + s2 * g1 + noise_var * v.reshape(shape)).ravel()

    op = sla.LinearOperator((dim, dim), matvec=wiener)
    x, _ = sla.cg(op, gram(b).ravel(), rtol=CG_RTOL, maxiter=CG_MAXITER,
                  M=preconditioner(lambda e: tau2 * e**2 + s2 * e + noise_var))
    return tau2 * x.reshape(shape)
