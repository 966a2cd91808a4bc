r"""Implicit-feedback interactions for completion: a two-mode term learned through the public positions.

Which positions are observed (Omega) is public, and on ratings it says much about the values: who
rated which items. :class:`ImplicitDesign` builds, from Omega alone, for two modes with a factor
(the *lead* mode, e.g. users, and its *partner*, e.g. items)

* ``z_i``: the unit-norm indicator of the partner rows observed with lead row ``i``, and
* ``q_j``: a spectral embedding of the partner rows (``rank`` columns, rows of norm at most 1),

and models the interaction as ``f(e) = z_{i(e)}^T Y q_{j(e)}`` with one learned matrix ``Y``
(partner rows x rank): a user's factor is the normalised sum of learned vectors over the items
they rated. Every entry then informs ``Y`` through all the rows its lead row observed, so the
sufficient statistic ``B = sum_e t_e z_{i(e)} q_{j(e)}^T`` of a least-squares fit is one release
of sensitivity ``2 clip`` (``|z| = 1``, ``|q| <= 1``) whose signal adds up over many entries, where
per-row factor releases drown in their noise. Its Gram is public; :func:`wiener_fit` solves the
noisy normal equations with an empirical-Bayes (Wiener) filter. Derivation:
``docs/derivations/completion.rst``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

__all__ = ["ImplicitDesign", "wiener_fit"]

#: Rademacher probes of the Hutchinson estimate of ``tr(G^2)`` (a public quantity, estimated with a
#: fixed seed so that the fit is a deterministic function of the releases and Omega).
TRACE_PROBES = 16
#: Leading directions of the Gram fitted one by one in the prior's variance (``wiener_fit``).
TOP_DIRECTIONS = 20
#: Conjugate-gradient iterations of the Wiener solve, and its relative tolerance.
CG_MAXITER = 200
CG_RTOL = 1e-4


class ImplicitDesign:
    """The design of ``f(e) = z_{i(e)}^T Y q_{j(e)}`` on the observed entries of ``obs``.

    ``lead`` and ``partner`` are the two modes with a factor; ``rank`` the embedding's columns. All
    of it is a function of Omega (public). Products with the design and its adjoint are two sparse
    products each: no per-entry Python loop, no dense design.
    """

    def __init__(self, obs, lead: int, partner: int, rank: int):
        self.lead, self.partner, self.rank = lead, partner, rank
        self.i, self.j = obs.X[:, lead], obs.X[:, partner]
        n_lead, n_partner, n = obs.shape[lead], obs.shape[partner], len(obs.X)
        incidence = sp.csr_matrix((np.ones(n), (self.i, self.j)), shape=(n_lead, n_partner))
        incidence.sum_duplicates()
        incidence.data[:] = 1.0  # a position observed on several days counts once
        lead_degree = np.asarray(incidence.sum(axis=1)).ravel()
        partner_degree = np.asarray(incidence.sum(axis=0)).ravel()
        self.Z = sp.diags(1.0 / np.sqrt(np.maximum(lead_degree, 1.0))) @ incidence  # unit-norm rows
        self.Q = spectral_embedding(self.Z @ sp.diags(1.0 / np.sqrt(np.maximum(partner_degree, 1.0))), rank)
        # per lead row, the sum over its entries: one sparse product
        self._by_lead = sp.csr_matrix((np.ones(n), (self.i, np.arange(n))), shape=(n_lead, n))
        self._Qj = self.Q[self.j]
        # The Gram is Z^T diag_i(M_i) Z with M_i = sum over lead row i's entries of q_j q_j^T:
        # formed once (rank columns at a time, never an (n, rank^2) array) when the lead rows
        # hold more than rank entries on average, its products then skip the per-entry work
        # that dominates the conjugate-gradient solve.
        self._M = None
        if n_lead * rank < n:
            self._M = np.stack([self._by_lead @ (self._Qj[:, a:a + 1] * self._Qj) for a in range(rank)],
                               axis=1)

    @property
    def shape(self):
        """The shape of ``Y``: (partner rows, rank)."""
        return self.Q.shape

    def apply(self, Y):
        """``f(e)`` at every observed entry."""
        return np.einsum("ek,ek->e", (self.Z @ Y)[self.i], self._Qj)

    def adjoint(self, w):
        """``sum_e w_e z_{i(e)} q_{j(e)}^T``: (partner rows, rank)."""
        return self.Z.T @ (self._by_lead @ (w[:, None] * self._Qj))

    def gram(self, Y):
        """``adjoint(apply(Y))``: the Gram of the design applied to ``Y``."""
        if self._M is None:
            return self.adjoint(self.apply(Y))
        return self.Z.T @ np.einsum("ikl,il->ik", self._M, self.Z @ Y)

    def lead_factor(self, Y):
        """The lead mode's CP factor ``Z Y`` (a row without entries: 0)."""
        return np.asarray(self.Z @ Y)

    def bulk(self, n_top):
        """The Gram ``G`` without its ``n_top`` leading directions: ``(V, g, tr1, tr2)`` with ``V``
        ``(dim, n_top)`` the leading eigenvectors and ``g`` their eigenvalues (Lanczos from a fixed
        start), and ``tr1``, ``tr2`` the traces of ``G`` and ``G^2`` on the rest: the first exactly
        (``tr G = sum_e |z|^2 |q|^2``), the second by a Hutchinson estimate on the deflated Gram
        with a fixed seed (its variance is small once the dominant directions are out). All of it
        public: functions of Omega."""
        dim = self.Q.size
        op = sla.LinearOperator((dim, dim), matvec=lambda v: self.gram(v.reshape(self.shape)).ravel())
        n_top = min(n_top, dim - 2)
        if n_top > 0:
            g, V = sla.eigsh(op, k=n_top, which="LA", v0=np.ones(dim) / math.sqrt(dim))
            g = np.maximum(g, 0.0)
        else:
            g, V = np.zeros(0), np.zeros((dim, 0))
        tr1 = float(np.sum(self._Qj**2) if len(self.i) else 0.0) - float(g.sum())
        probes = np.random.default_rng(0)

        def deflated(v):
            return v - V @ (V.T @ v)

        tr2 = np.mean([np.sum(deflated(op.matvec(deflated(probes.choice([-1.0, 1.0], dim)))) ** 2)
                       for _ in range(TRACE_PROBES)])
        return V, g, max(tr1, 0.0), float(tr2)


def spectral_embedding(normalized, rank):
    """The partner rows' spectral embedding from the degree-normalised incidence matrix: its right
    singular vectors 2 to ``rank + 1`` (the first is the degrees' square roots, which the offsets
    already carry), scaled to unit root-mean-square and clipped to rows of norm at most 1. Columns
    past the matrix's rank are 0."""
    n_rows, n_cols = normalized.shape
    k = min(rank + 1, min(n_rows, n_cols))
    if min(n_rows, n_cols) <= 2 * (rank + 1) or n_rows * n_cols <= 250_000:
        _, s, vt = np.linalg.svd(normalized.toarray(), full_matrices=False)
    else:
        # ARPACK from a fixed start: a deterministic function of Omega
        _, s, vt = sla.svds(normalized, k=k, v0=np.ones(min(n_rows, n_cols)) / math.sqrt(min(n_rows, n_cols)))
    order = np.argsort(-s)[1:k]
    Q = np.zeros((n_cols, rank))
    Q[:, :len(order)] = vt[order].T * math.sqrt(n_cols)
    return Q / np.maximum(np.linalg.norm(Q, axis=1, keepdims=True), 1.0)


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
    """``Y`` from the released statistic ``B = G vec(Y) + X^T eps + xi`` (``G`` public, residual noise
    ``eps ~ (0, s2)`` per entry, release noise ``xi ~ N(0, noise_var I)``).

    With the prior ``Y ~ (0, tau^2 I)``, in the eigenbasis of ``G`` each coordinate of ``B`` has
    second moment ``tau^2 g^2 + s2 g + noise_var`` and the posterior mean is
    ``tau^2 (tau^2 G^2 + s2 G + noise_var I)^{-1} G B`` (without release noise: the ridge
    ``(G + s2 / tau^2 I)^{-1} B``), solved by conjugate gradients on products with ``G``.
    ``tau^2`` is fitted (:func:`_prior_variance`) on the ``TOP_DIRECTIONS`` leading directions of
    ``G`` one by one and on the rest as one group, each weighted by the inverse of its squared
    second moment: the leading directions (popular rows, whose signal the offsets already hold)
    vary most and count least, where one moment over all directions let them set ``tau^2`` (on
    MovieLens-100K, a ridge five times too strong). Lowered by ``n_se`` standard errors of the
    noise's share (``sqrt(2 (dim - m)) noise_var / tr_P G^2``, ``P`` the projection off the
    leading directions), so that a release swamped by noise gives ``Y = 0`` (offsets only).
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

    if noise_var == 0.0:
        op = sla.LinearOperator((dim, dim), matvec=lambda v: (gram(v) + s2 / tau2 * v.reshape(shape)).ravel())
        x, _ = sla.cg(op, b, rtol=CG_RTOL, maxiter=CG_MAXITER)
        return x.reshape(shape)

    def wiener(v):
        g1 = gram(v)
        return (tau2 * design.gram(g1) + s2 * g1 + noise_var * v.reshape(shape)).ravel()

    op = sla.LinearOperator((dim, dim), matvec=wiener)
    x, _ = sla.cg(op, gram(b).ravel(), rtol=CG_RTOL, maxiter=CG_MAXITER)
    return tau2 * x.reshape(shape)
