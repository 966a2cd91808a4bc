r"""An LDA topic model learned by the method of moments, private per document."""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._operators import moment_tensor
from ..pca import MAX_DENSE_FEATURES, auto_n_iter, noisy_power_method
from ..tensor_decomposition import row_sensitivity
from ._base import SpectralLatentModel
from ._pipeline import Whitening, sym3, whiten

__all__ = ["PrivateLatentDirichletAllocation", "document_moments", "DocumentPairOperator",
           "DOCUMENT_SENSITIVITY"]

#: l2 sensitivity (times n) of the per-document mean and of the upper triangle of the per-document
#: pair moment: each is a non-negative vector of norm at most 1 (a convex combination of word
#: indicators, or of their pair products), so two of them differ by at most sqrt(2).
DOCUMENT_SENSITIVITY = float(np.sqrt(2.0))


def document_moments(C):
    r"""The per-document unbiased first and second moment estimates, averaged over documents.

    For a document with counts c and length l = sum(c) >= 2, ``c / l`` estimates E[x_1] and
    ``(c c^T - diag(c)) / (l (l - 1))`` estimates E[x_1 (x) x_2] (word indicators at two distinct
    positions). Returns ``(mean (d,), second (d, d) dense)``.
    """
    n = C.shape[0]
    length = np.asarray(C.sum(axis=1)).ravel()
    inv1, inv2 = 1.0 / length, 1.0 / (length * (length - 1.0))
    mean = np.asarray(C.T @ inv1).ravel() / n
    scaled = sp.diags(inv2) @ C
    second = C.T @ scaled
    second = second.toarray() if sp.issparse(second) else np.asarray(second)
    second[np.diag_indices_from(second)] -= np.asarray(scaled.sum(axis=0)).ravel()
    return mean, second / n


class DocumentPairOperator:
    r"""``M2 Q = E2 Q - alpha0/(alpha0+1) m (m^T Q)`` for a d x p block Q, never forming d x d.

    ``E2 Q = (1/n) (C^T (D (C Q)) - diag(C^T D 1) Q)`` with ``D = diag(1 / (l (l-1)))``: two sparse
    products, O(nnz p). ``m`` is the released mean, so the correction is public and the product's
    row-level sensitivity is that of ``E2 Q`` alone: ``sqrt(2) / n`` for orthonormal Q.
    """

    def __init__(self, C, mean, alpha0: float):
        length = np.asarray(C.sum(axis=1)).ravel()
        self.C, self.n = C, C.shape[0]
        self.inv2 = 1.0 / (length * (length - 1.0))
        self.diag = np.asarray(C.T @ self.inv2).ravel()
        self.mean, self.scale = mean, alpha0 / (alpha0 + 1.0)
        self.shape = (C.shape[1], C.shape[1])

    def matmat(self, Q):
        CQ = np.asarray(self.C @ Q) * self.inv2[:, None]
        E2Q = (np.asarray(self.C.T @ CQ) - self.diag[:, None] * Q) / self.n
        return E2Q - self.scale * np.outer(self.mean, self.mean @ Q)


class PrivateLatentDirichletAllocation(ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                                       SpectralLatentModel):
    r"""Latent Dirichlet allocation by moments, whitening and tensor decomposition (Anandkumar et al. 2012).

    The model: each document draws topic proportions ``theta ~ Dirichlet(alpha)`` with
    ``sum(alpha) = alpha0`` (known), then each word from the topic-word distribution of a topic
    drawn from ``theta``. With ``x_1, x_2, x_3`` the indicators of three distinct word positions,

    * ``M2 = E[x_1 (x) x_2] - alpha0/(alpha0+1) M1 (x) M1 = sum_i alpha_i / (alpha0 (alpha0+1)) mu_i mu_i^T``,
    * ``M3 = E[x_1 (x) x_2 (x) x_3] - alpha0/(alpha0+2) (E[x_1 (x) x_2 (x) M1] + 2 perms)
      + 2 alpha0^2 / ((alpha0+1)(alpha0+2)) M1^(x)3
      = sum_i 2 alpha_i / (alpha0 (alpha0+1)(alpha0+2)) mu_i^(x)3``,

    estimated without bias from each document of length >= 3 by averaging over its distinct word
    positions. The whitened third moment is built from the whitened documents (k numbers each) and
    two d x k sums, never a d x d x d tensor; topics are projected onto the simplex at the end.

    Notes
    -----
    *Privacy unit.* One document (a row of counts), n public. No bound on document length is
    needed: each document's moment terms are averages over its word positions.

    *What is released.* The mean of ``c / l`` and the upper triangle of the mean pair moment, each
    with Gaussian noise at sensitivity ``sqrt(2) / n``; then, with the whitening W computed from
    them (public), the whitened data part of M3, whose per-document term is an average of
    ``w_a (x) w_b (x) w_c`` over word triples (``w_a`` the rows of W), so it has sensitivity
    ``2 r^3 / n`` with ``r`` the largest row norm of W: released once with symmetric Gaussian noise
    (``method="perturb"``) or through the private tensor power method (``"power"``). Topics and
    ``alpha_`` are post-processing.

    *Guarantee.* ``(epsilon, delta)``-DP per document: the three releases share the Gaussian-DP
    budget as 0.1, 0.45, 0.45 of ``mu^2``, one ``ComposedEvent`` recorded before any noisy release.
    The d x d pair moment is noised whole, so privacy needs many documents when the vocabulary is
    large (the noise's operator norm grows like ``sqrt(d) / n``). Derivations:
    ``docs/derivations/latent.rst``.

    Parameters
    ----------
    n_components : int, default=10
        Number of topics k.
    alpha0 : float, default=1.0
        The Dirichlet concentration ``sum(alpha)``, assumed known (scikit-learn's default
        ``doc_topic_prior = 1/k`` per topic is ``alpha0 = 1``).
    epsilon : float, default=np.inf
    delta : float or None, default=None
    method : {"auto", "perturb", "power"}, default="auto"
        How the whitened third moment is released (see the derivation page).
    whitening : {"auto", "dense", "power"}, default="auto"
        ``"dense"`` forms the d x d pair moment (released by Analyze Gauss, then its top-k
        eigenpairs); ``"power"`` never forms it: the top-k eigenpairs of ``M2`` come from the
        private power method over the documents, each step one Gaussian release of ``M2 Q``
        (without privacy: Lanczos on the same implicit products);
        ``"auto"``: dense for a private fit up to 2000 words (``dptensor.pca.MAX_DENSE_FEATURES``),
        where one Analyze Gauss release is less noisy than the power steps; the power method
        otherwise (without privacy it gives the same whitening, faster).
    n_restarts, n_iter : int, default=10, 20
    max_transform_iter : int, default=50
        Fixed-point steps of :meth:`transform`.
    accountant : PrivacyAccountant or None, default=None
    random_state : None, int or Generator, default=None
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Topic-word distributions (rows sum to 1). scikit-learn's ``LatentDirichletAllocation``
        holds unnormalised pseudo-counts there: normalise its rows to compare.
    alpha_ : ndarray of shape (n_components,)
        The estimated Dirichlet parameters (they sum to about ``alpha0``).
    method_ : str
    whitening_ : str
        ``"dense"`` or ``"power"``.
    n_samples_ : int
    n_features_in_ : int
    privacy_cost_ : PrivacyCost
    """

    def __init__(self, n_components=10, *, alpha0=1.0, epsilon=np.inf, delta=None, method="auto",
                 whitening="auto", n_restarts=10, n_iter=20, max_transform_iter=50, accountant=None,
                 random_state=None, verbose=0):
        self.n_components = n_components
        self.alpha0 = alpha0
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.whitening = whitening
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.max_transform_iter = max_transform_iter
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # -- the model's moments -----------------------------------------------------------------
    _unit = "document"

    def _validate(self, X, reset, min_length=3):
        X = validate_data(self, X, reset=reset, accept_sparse="csr", dtype=[np.float64, np.float32])
        C = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        values = C.data if sp.issparse(C) else C
        if np.any(values < 0) or np.any(values != np.round(values)):
            raise ValueError("X must hold word counts: non-negative integers")
        length = np.asarray(C.sum(axis=1)).ravel()
        if min_length and np.any(length < min_length):
            raise ValueError(f"every document needs at least {min_length} words (the third moment is "
                             f"estimated from distinct word triples); {int(np.sum(length < min_length))} "
                             "have fewer: drop them first")
        return C

    def _prepare(self, X, epsilon):
        if isinstance(self.alpha0, bool) or not isinstance(self.alpha0, numbers.Real) or not (
                0 < self.alpha0 < np.inf):
            raise ValueError(f"alpha0 must be a finite number > 0, got {self.alpha0!r}")
        steps = self.max_transform_iter
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
            raise ValueError(f"max_transform_iter must be an integer >= 1, got {self.max_transform_iter!r}")
        if self.whitening not in ("auto", "dense", "power"):
            raise ValueError(f"whitening must be one of ('auto', 'dense', 'power'), got {self.whitening!r}")
        d = X.shape[1]
        private = bool(np.isfinite(epsilon))
        power = self.whitening == "power" or (self.whitening == "auto" and (d > MAX_DENSE_FEATURES
                                                                             or not private))
        return {"rows": X, "private": private, "power": power,
                "steps": auto_n_iter(d, private) if power else 1}

    def _second_moment_steps(self, ctx):  # one Gaussian release per private power step
        return ctx["steps"] if ctx["private"] else 1

    def _first_moments(self, ctx):
        C = ctx["rows"]
        n = C.shape[0]
        if ctx["power"]:  # the pair moment is never formed; only the mean here
            length = np.asarray(C.sum(axis=1)).ravel()
            mean, second = np.asarray(C.T @ (1.0 / length)).ravel() / n, None
        else:
            mean, second = document_moments(C)
        return mean, second, DOCUMENT_SENSITIVITY / n, DOCUMENT_SENSITIVITY / n

    def _power_whitening(self, ctx, mean, plan, rng):
        """Top-k eigenpairs of M2 by the (noisy) power method on :class:`DocumentPairOperator`."""
        C, k = ctx["rows"], self.n_components
        d = C.shape[1]
        operator = DocumentPairOperator(C, mean, float(self.alpha0))
        if not plan.private:  # exact eigenpairs: Lanczos on the operator converges far faster
            return whiten(operator, k, rng)
        result = noisy_power_method(operator, k, ctx["steps"], rng,
                                    noise_multiplier=np.asarray(plan.z_second),
                                    sensitivity=DOCUMENT_SENSITIVITY / C.shape[0],
                                    n_oversamples=min(k, d - k))
        values = np.asarray(result.eigenvalues, dtype=float)  # Ritz values, largest first
        floor = 1e-6 * max(float(np.max(values)), np.finfo(float).tiny)
        return Whitening(result.components.T, np.maximum(values, floor))

    def _second_moment(self, ctx, mean, second, rng):
        a0 = float(self.alpha0)
        return second - a0 / (a0 + 1.0) * np.outer(mean, mean)

    def _whitened_third(self, ctx, whitening, mean, second):
        C, W = ctx["rows"], whitening.W
        n = C.shape[0]
        length = np.asarray(C.sum(axis=1)).ravel()
        a = 1.0 / (length * (length - 1.0) * (length - 2.0))
        Y = np.asarray(C @ W)  # whitened documents, (n, k)
        Z = np.asarray(C.T @ (a[:, None] * Y))  # sum_doc a c_i y, (d, k)
        s = np.asarray(C.T @ a).ravel()  # sum_doc a c_i, (d,)
        data = (moment_tensor((a ** (1.0 / 3.0))[:, None] * Y) * n
                - sym3(np.einsum("ia,ib,ic->abc", W, W, Z, optimize=True))
                + 2.0 * np.einsum("i,ia,ib,ic->abc", s, W, W, W, optimize=True)) / n
        a0 = float(self.alpha0)
        m = W.T @ mean
        # W^T E2 W; without E2 (power whitening) from W^T M2 W = I, exact on the released subspace
        Q = W.T @ second @ W if second is not None else np.eye(len(m)) + a0 / (a0 + 1.0) * np.outer(m, m)
        correction = (-a0 / (a0 + 2.0) * sym3(Q[:, :, None] * m[None, None, :])
                      + 2.0 * a0**2 / ((a0 + 1.0) * (a0 + 2.0)) * np.einsum("a,b,c->abc", m, m, m))
        r = float(np.max(np.linalg.norm(W, axis=1)))
        sensitivity = row_sensitivity(r, n) if ctx["private"] else 0.0
        return data, correction, sensitivity

    def _recover(self, ctx, components, eigenvalues, whitening, mean):
        self.whitening_ = "power" if ctx["power"] else "dense"
        a0 = float(self.alpha0)
        lam = self._positive(eigenvalues)
        weight = (2.0 / ((a0 + 2.0) * lam)) ** 2  # alpha_i / (alpha0 (alpha0 + 1))
        topics = ((a0 + 2.0) / 2.0 * lam[:, None] * components) @ whitening.unwhiten.T
        topics = np.maximum(topics, 0.0)
        sums = topics.sum(axis=1, keepdims=True)
        d = topics.shape[1]
        # a topic with no positive mass left (pure noise) becomes uniform rather than NaN
        self.components_ = np.where(sums > 0, topics / np.where(sums > 0, sums, 1.0), 1.0 / d)
        self.alpha_ = weight * a0 * (a0 + 1.0)

    # -- transform ---------------------------------------------------------------------------
    def transform(self, X):
        """Document-topic proportions (rows sum to 1), by a fixed number of fixed-point steps.

        ``theta <- normalise(alpha + theta * (Phi (c / (theta Phi))))``: the expected topic counts
        of the words given the current proportions, plus the Dirichlet prior ``alpha_`` as pseudo
        counts (a MAP-like update). It reads only the released topics and the given documents.
        """
        check_is_fitted(self, "components_")
        C = self._validate(X, reset=False, min_length=0)
        C = sp.csr_matrix(C)
        Phi = np.maximum(self.components_, 1e-12)
        k, n = Phi.shape[0], C.shape[0]
        rows = np.repeat(np.arange(n), np.diff(C.indptr))
        theta = np.full((n, k), 1.0 / k)
        PhiT = Phi[:, C.indices].T  # (nnz, k)
        for _ in range(self.max_transform_iter):
            p = np.einsum("zk,zk->z", theta[rows], PhiT)
            ratio = sp.csr_matrix((C.data / p, C.indices, C.indptr), shape=C.shape)
            expected = theta * (ratio @ Phi.T)
            theta = expected + np.maximum(self.alpha_, 0.0)
            theta /= theta.sum(axis=1, keepdims=True)
        return theta

    def score(self, X, y=None):
        """Log-likelihood of the words of X given the topics and each document's proportions from
        :meth:`transform` (higher is better)."""
        C = sp.csr_matrix(self._validate(X, reset=False, min_length=0))
        theta = self.transform(C)
        rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
        p = np.einsum("zk,kz->z", theta[rows], np.maximum(self.components_, 1e-12)[:, C.indices])
        return float(np.sum(C.data * np.log(p)))

    def perplexity(self, X):
        """``exp(-score(X) / number of words)``, as scikit-learn's ``perplexity`` (lower is better)."""
        C = sp.csr_matrix(self._validate(X, reset=False, min_length=0))
        return float(np.exp(-self.score(C) / C.sum()))

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags
