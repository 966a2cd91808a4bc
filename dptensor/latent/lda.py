r"""An LDA topic model learned by the method of moments, private per document.

Every pass over the documents is a sum of per-document terms, written here as functions of one
chunk of documents (``_*_sums``) that return partial sums: applied to the whole corpus in memory,
or to each row chunk of a Dask array (:func:`~dptensor.algorithms.dask.reduce_row_chunks`), where
only the sums (d, d x p or k^3 numbers) reach the client.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._base import SearchTag
from .._validation import integer_scalar, real_scalar, validate_private_data
from ..algorithms.dask import check_dask_array, is_dask_array
from ..algorithms.documents import MAX_DOCUMENT_LENGTH, MIN_DOCUMENT_LENGTH, document_norms
from ..algorithms.documents import (clip_scale as _clip_scale, count_checks as _count_checks,
                                    counts as _counts, document_weights,
                                    per_document as _per_document)
from ..algorithms.eigen import top_eigenpairs
from ..algorithms.operators import moment_tensor
from ..algorithms.pair_moment import weighted_gram
from ..algorithms.tensor_power import row_sensitivity
from ..algorithms.vocabulary import (auto_whitening_words, entry_noise_std, frequent_words,
                                     pair_columns, release_columns, vocabulary_whitening)
from ._base import TINY, SpectralLatentModel, auto_doc_clip, fold_in
from ..algorithms.moments import (ImplicitMatrix, power_subspace, release, release_second,
                                  sym3, topic_noise_std, whiten)

__all__ = ["PrivateLatentDirichletAllocation", "document_moments", "document_norms",
           "document_weights", "topic_noise_std", "DOCUMENT_SENSITIVITY", "LDA_FIRST_SHARE",
           "MAX_DOCUMENT_LENGTH", "MIN_DOCUMENT_LENGTH"]

#: l2 sensitivity, times ``n / tau``, of the mean and (in Frobenius norm, over the whole matrix) of
#: the pair moment when each document's term is clipped to norm ``tau <= 1`` (``tau = 1``:
#: unclipped): each term is a non-negative vector (matrix) of norm at most ``tau`` (a convex
#: combination of word indicators, or of their pair products, scaled down), so two of them differ
#: by at most ``sqrt(2) tau``.
DOCUMENT_SENSITIVITY = float(np.sqrt(2.0))

#: The first moments' share of the Gaussian-DP budget ``mu^2`` (the clipping scale and the mean):
#: removing their noise altogether changed the topic error by under 1% (2000 words, 10^5
#: documents, epsilon 1), so they get half of the default
#: :data:`~dptensor.algorithms.moments.SHARES` one.
LDA_FIRST_SHARE = 0.05

#: A bound on ``||s_c D_c (c c^T + diag c)||_F / ||s_c E2(c)||_F`` over documents of at least 3
#: words (``D_c = 1 / (l (l-1))``): the absolute values of the summands that make a document's
#: pair term, against the term's own norm (at most ``(t + 1) / (t - 1)`` with ``t = ||c|| >=
#: sqrt(3)``, so ``2 + sqrt(3)``), for the pair moment's rounding (latent.rst, "Rounding").
PAIR_PARTS_RATIO = 4.0

#: A document's whitened triple term is summed as three parts whose absolute values add up to at
#: most ``a (S1^3 + 3 S1 S2 + 2 S3)`` (:func:`_triple_sums`); its weight keeps that at most this
#: many times the term's bound, so that the sum's rounding has a public bound. A document whose
#: words weigh about alike has a ratio of at most 10 (at 3 words; it falls towards 1 with the
#: length): only one whose parts cancel far more (one heavy word among light ones) is clipped.
TRIPLE_PARTS_RATIO = 20.0

#: A second clip of the whitened triple term, against the bound from the document's whitened sum
#: (:func:`_triple_norm_bound`, about ``(|y| / l)^3``; the triangle inequality overstates a
#: document spread over topics several times), at ``doc_clip`` times this many times the typical
#: ``|y| / l``, ``sqrt(tr(W^T E2 W)) = sqrt(k + c |u|^2)`` (public: ``u = W^T m``). At 1.25 it
#: clips 7% of the benchmark's documents and the term's bound falls from 237 to 71 (2000 words,
#: 10^5 documents); 1 clipped 41% and 1.5, 2 left more noise: worse (latent.rst).
TRIPLE_CLIP = 1.25


def _scale_sums(chunk):
    """``sum ||E2(c)||_F``: the clipping scale's statistic (each term in [0, 1])."""
    return (float(np.sum(document_norms(chunk)[2])),)


def _mean_sums(chunk, tau):
    """``sum_c s_c c / l`` (:func:`document_weights`)."""
    C = _counts(chunk)
    length, s = document_weights(C, tau)
    return (np.asarray(C.T @ _per_document(s, length, length)).ravel(),)


def _pair_weights(C, tau):
    length, s = document_weights(C, tau)
    return _per_document(s, length, length * (length - 1.0))


def _pair_sums(chunk, tau):
    """``sum_c s_c E2(c)`` (d x d, dense; :func:`document_weights`)."""
    C = _counts(chunk)
    D = _pair_weights(C, tau)
    second = weighted_gram(C, D)  # the upper triangle scipy's C^T diag(D) C, bit for bit
    second[np.diag_indices_from(second)] -= np.asarray(C.T @ D).ravel()
    return (second,)


def _column_sums(chunk, tau, words):
    """``sum_c s_c E2(c)[:, words]`` (d x m: ``pair_columns``)."""
    C = _counts(chunk)
    return (pair_columns(C, _pair_weights(C, tau), words),)


def _moment_sums(chunk, tau, dense):
    """The weighted mean's sum and, for a dense whitening, the weighted pair moment's (one pass)."""
    return _mean_sums(chunk, tau)[0], _pair_sums(chunk, tau)[0] if dense else 0.0


def _pair_parts(chunk, tau):
    """What ``E2 Q`` needs of a chunk, once: its counts, ``D = s / (l (l-1))`` and ``C^T D``."""
    C = _counts(chunk)
    D = _pair_weights(C, tau)
    return C, D, np.asarray(C.T @ D).ravel()


def _pair_apply(parts, Q):
    """``sum_c s_c E2(c) Q = C^T (D (C Q)) - diag(C^T D) Q`` (Q: d x p) in O(nnz p), not d x d."""
    C, D, diag = parts
    return np.asarray(C.T @ (D[:, None] * np.asarray(C @ Q))) - diag[:, None] * Q


def _pair_products(chunk, Q, tau):
    return (_pair_apply(_pair_parts(chunk, tau), Q),)


def _triple_sums(chunk, W, tau, bound, norm_bound=None):
    r"""The partial sums of the whitened third moment's data part over one chunk.

    With ``y = W^T c`` and ``a = s_c / (l (l-1) (l-2))``: ``sum a y^(x)3`` (k^3), ``Z = C^T (a y)``
    (d x k) and ``C^T a`` (d). ``s_c`` is the document's weight (:func:`document_weights` of
    ``tau``), lowered further where needed so that the term's upper bound
    ``s_c (S1^3 - 3 S1 S2 + 2 S3) / (l (l-1) (l-2))`` is at most ``bound``;
    ``S_j = sum_i c_i ||w_i||^j`` (the sum of ``||w_a|| ||w_b|| ||w_c||`` over the document's
    distinct position triples), and so that ``a (S1^3 + 3 S1 S2 + 2 S3)``, the absolute size
    of the three parts it is summed from, is at most :data:`TRIPLE_PARTS_RATIO` times ``bound``.
    With ``norm_bound`` the same again for the tighter bound :func:`_triple_norm_bound` (from
    ``|y|``: far lower for a document whose words spread over the topics) against
    ``norm_bound``: the term is then at most ``min(bound, norm_bound)``, and so are its parts
    over :data:`TRIPLE_PARTS_RATIO`.
    """
    C = _counts(chunk)
    length, s = document_weights(C, tau)
    a = _per_document(s, length, length * (length - 1.0) * (length - 2.0))
    Y = np.asarray(C @ W)
    if bound is not None or norm_bound is not None:
        rho = np.linalg.norm(W, axis=1)
        S1, S2, S3 = (np.asarray(C @ rho**j).ravel() for j in (1, 2, 3))
        # S1^3 - 3 S1 S2 + 2 S3 cancels where one heavy word (large ||w_i||, once) fills S1: its
        # rounding error, and the term's own, are a few (d + k) ulps of the sum of the parts'
        # magnitudes, which can exceed the true value (0 for rows 10^9 apart, leaving the term
        # unclipped); added, the bound stays an upper bound (typically a 1e-12 relative change)
        parts = S1**3 + 3.0 * S1 * S2 + 2.0 * S3
        rounding = 4.0 * (W.shape[0] + W.shape[1] + 8) * np.finfo(float).eps
        beta = np.maximum(S1**3 - 3.0 * S1 * S2 + 2.0 * S3, 0.0)
        a = a * _clip_scale(a * np.maximum(beta + rounding * parts, parts / TRIPLE_PARTS_RATIO),
                            bound)
        if norm_bound is not None:  # the lesser of two upper bounds (the second loose below ~10
            # words), the computed term's rounding added
            beta = np.minimum(beta, _triple_norm_bound(Y, S1, S2, S3, 2.0 * rounding))
            a = a * _clip_scale(a * np.maximum(beta + rounding * parts,
                                               parts / TRIPLE_PARTS_RATIO), norm_bound)
    cube = (moment_tensor(np.cbrt(a)[:, None] * Y) * Y.shape[0] if len(Y)
            else np.zeros((W.shape[1],) * 3))
    return cube, np.asarray(C.T @ (a[:, None] * Y)), np.asarray(C.T @ a).ravel()


def _triple_norm_bound(Y, S1, S2, S3, rounding):
    r"""Per document, an upper bound on ``||E3(c)(W, W, W)||_F / a`` from its whitened sum ``y``.

    The term is ``a (y^(x)3 - sym3(A (x) y) + 2 B)`` with ``A = sum_i c_i w_i w_i^T`` (PSD, so
    ``||A||_F <= tr A = S2`` and ``|A y| <= S2 |y|``, ``y^T A y >= 0``) and ``||B|| <= S3``:
    ``||y^(x)3 - sym3(A (x) y)||^2 = |y|^6 - 6 |y|^2 y^T A y + 3 ||A||_F^2 |y|^2 + 6 |A y|^2
    <= |y|^6 + 9 S2^2 |y|^2``. Where the words' whitened rows point alike (one topic) ``|y|`` is
    near ``S1`` and the bound near ``S1^3``; where they spread over the topics it is far below the
    triangle inequality's ``S1^3 - 3 S1 S2 + 2 S3``. The computed ``|y|^2`` and ``S2`` carry a few
    ``d + k`` ulps of ``S1^2`` and ``S2``, so the radicand is raised by ``rounding`` times its
    terms' upper bound ``(S1^3 + 3 S1 S2)^2`` (in the square root: relatively about 1e-6 of
    ``S1^3``) and the result by ``rounding`` relatively (latent.rst, "Sensitivities").
    """
    yy = np.einsum("ij,ij->i", Y, Y)
    top = S1**3 + 3.0 * S1 * S2
    radicand = yy**3 + 9.0 * (S2 * S2) * yy + rounding * top * top
    return (np.sqrt(radicand) + 2.0 * S3) * (1.0 + rounding)


def _em_sums(chunk, Phi, alpha, n_steps):
    """The E-step over one chunk: ``theta^T (C / (theta Phi))`` (k x d), to be multiplied by Phi."""
    C = _counts(chunk)
    theta, p = fold_in(C, Phi, alpha, n_steps)
    ratio = sp.csr_matrix((C.data / p, C.indices, C.indptr), shape=C.shape)
    return (np.asarray(ratio.T @ theta).T,)


def document_moments(C):
    r"""The per-document unbiased first and second moment estimates, averaged over documents.

    For a document with counts c and length l = sum(c), ``c / l`` estimates E[x_1] and
    ``(c c^T - diag(c)) / (l (l - 1))`` estimates E[x_1 (x) x_2] (word indicators at two distinct
    positions); the averages are over the documents of at least :data:`MIN_DOCUMENT_LENGTH` words,
    those a fit uses. Returns ``(mean (d,), second (d, d) dense)``.
    """
    C = _counts(C)
    used = max(int(np.sum(document_weights(C, None)[1])), 1)
    return _mean_sums(C, None)[0] / used, _pair_sums(C, None)[0] / used


class PrivateLatentDirichletAllocation(ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                                       SpectralLatentModel):
    r"""Latent Dirichlet allocation by moments and tensor decomposition (Anandkumar et al. 2012).

    The model: each document draws topic proportions ``theta ~ Dirichlet(alpha)`` with
    ``sum(alpha) = alpha0`` (known), then each word from the topic-word distribution of a topic
    drawn from ``theta``. With ``x_1, x_2, x_3`` the indicators of three distinct word positions,

    * ``M2 = E[x_1 (x) x_2] - alpha0/(alpha0+1) M1 (x) M1
      = sum_i alpha_i / (alpha0 (alpha0+1)) mu_i mu_i^T``,
    * ``M3 = E[x_1 (x) x_2 (x) x_3] - alpha0/(alpha0+2) (E[x_1 (x) x_2 (x) M1] + 2 perms)
      + 2 alpha0^2 / ((alpha0+1)(alpha0+2)) M1^(x)3
      = sum_i 2 alpha_i / (alpha0 (alpha0+1)(alpha0+2)) mu_i^(x)3``,

    estimated without bias from each document of length >= 3 by averaging over its distinct word
    positions. The whitened third moment is built from the whitened documents (k numbers each) and
    two d x k sums, never a d x d x d tensor; topics are projected onto the simplex at the end.
    X may be a (sparse) array of counts, or a Dask array of counts whose row chunks are computed
    where they live (each pass over the documents is one reduction).

    Notes
    -----
    *Privacy unit.* One document (a row of counts), n public. No bound on document length is
    needed: each document's moment terms are averages over its word positions (a fit refuses
    documents of 2**53 words or more, where float64 counts stop being exact and their powers
    overflow: :data:`MAX_DOCUMENT_LENGTH`). A document of fewer than 3 words has no third-moment
    term and weighs nothing in any moment: keep such rows (filtering them out would make the
    number of documents, which is public, depend on the data).

    *What is released.* With ``doc_clip`` set (the default): first the mean of ``||E2(c)||_F`` over
    documents (sensitivity ``1 / n``), which fixes the typical norm ``nu`` of a document's pair
    term. Each document's terms are then scaled by one weight, the same in every moment
    (:func:`document_weights`), that clips them to ``doc_clip`` times their typical size:
    ``c / l`` to ``tau_1 = min(1, doc_clip sqrt(nu))``, its pair term to
    ``tau_2 = min(1, doc_clip^2 nu)`` and, the weight lowered further where needed, its whitened
    triple term to ``tau_3 = b^3``, ``b = min(b_1, b_2)``: its triangle-inequality bound to
    ``b_1^3``, ``b_1 = min(max(doc_clip, 1) M1 . rho, r)`` (``rho`` the row norms of the whitening
    W, ``M1 . rho`` their mean under the released word frequencies, floored at the least of them,
    ``r`` the largest), and its bound from the document's whitened sum (:func:`_triple_norm_bound`,
    several times lower for a document spread over topics) to ``b_2^3``,
    ``b_2 = min(1.25 doc_clip sqrt(k + c |u|^2), r)`` (:data:`TRIPLE_CLIP`;
    ``sqrt(k + c |u|^2) = sqrt(tr(W^T E2 W))`` the typical norm of a document's whitened word
    frequencies, ``u = W^T M1``). Then the mean of the weighted ``c / l`` (sensitivity
    ``sqrt(2) tau_1 / n``). Every moment is divided by the mean weight, read off that release
    (post-processing), so the clipped moments are those of one reweighted corpus and keep the
    relations the method needs. Then the whitening, from the clipped pair moment (sensitivity
    ``sqrt(2) tau_2 / n``) by Analyze Gauss (``whitening="dense"``; or its columns of the most
    frequent words, ``whitening=m``) or by the private power method (``"power"``: d x p
    products, then the p x p projection, never a d x d noise); and the whitened data part of M3,
    of sensitivity ``2 tau_3 / n``, released once with
    symmetric Gaussian noise (``method="perturb"``) or through the private tensor power method
    (``"power"``). Each of these sensitivities bounds the Frobenius norm of the whole symmetric
    array's change, so the symmetric releases use that geometry: an entry with m mirror positions
    gets ``1 / sqrt(m)`` of the noise (off the diagonal ``1 / sqrt(2)`` for the pair moment, mostly
    ``1 / sqrt(6)`` for M3) at the same cost. Topics and ``alpha_`` are post-processing, including
    the threshold below. ``doc_clip=None`` clips nothing and uses the worst-case sensitivities
    (``tau_1 = tau_2 = 1``, ``tau_3 = r^3``).

    *Denoising the topics* (``topic_threshold``, a private fit only). The pair moment's noise
    moves the whitening's eigenvectors in every coordinate, so each topic carries noise spread
    over the whole vocabulary, of a standard deviation known to first order from public values
    (:func:`topic_noise_std`: the noise multiplier, the sensitivity and the released eigenpairs).
    Entries below ``topic_threshold`` times it are zeroed before the topics are normalised: most
    words have almost no mass in a given topic, and without the threshold their noise is what the
    l1 topic error mostly measures.

    *Guarantee.* ``(epsilon, delta)``-DP per document: the releases share the Gaussian-DP budget
    ``mu^2``, 0.05 of it for the first moments and the rest split between the whitening and the
    third moment in the ratio ``((d - k) / k)^(1/3)`` (their noises move ``k (d - k)`` and ``k^2``
    coordinates: 0.81 and 0.14 at 2000 words and 10 topics), one ``ComposedEvent`` recorded before
    any noisy release. The noise on the pair moment grows
    like ``sqrt(d) / n``, against an eigenvalue of order ``w ||mu||^2``, so a private fit needs many
    documents when the vocabulary is large. Derivations: ``docs/derivations/latent.rst``.

    *Groups of rows.* ``fit(X, groups=labels)`` protects an author (her documents, how many, their
    words) as one unit: each of her ``m`` documents' weights is divided by ``m`` in every moment,
    so she adds her average terms, bounded as one document's, and ``n`` is the public number of
    authors (``n_samples_``; ``privacy_cost_.unit`` ``"group of rows"``). Refused before any
    spend: bad labels, ``epsilon=inf``, Dask input. See the mixture's notes and the derivation.

    Parameters
    ----------
    n_components : int, default=10
        Number of topics k.
    alpha0 : float, default=1.0
        The Dirichlet concentration ``sum(alpha)``, assumed known (scikit-learn's default
        ``doc_topic_prior = 1/k`` per topic is ``alpha0 = 1``).
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` is the exact (non-private) method of moments, which costs
        epsilon = infinity. A private fit needs no bound on the documents (see the notes).
    delta : float or None, default=None
        ``None`` takes the accountant's delta (1e-5 without an accountant); keep it well below
        1 / the number of documents.
    doc_clip : "auto", float or None, default="auto"
        Each document's moment terms are clipped, by one weight per document, to ``doc_clip``
        times their typical size (released privately, see above); a private fit only. ``"auto"``:
        1, or less (down to 0.5) where ``n mu / sqrt(d)`` is small (``auto_doc_clip``). ``None``:
        no clipping, the worst-case sensitivities (20 times the error at 2000 words, 10^5
        documents, epsilon = 1). Clipping trades noise for bias (documents concentrated on one
        topic weigh less): 1 gave the least error, or close to it, at epsilon <= 4 and 10^5
        documents, but at 100 words it leaves a bias floor that 2 avoids when ``n epsilon`` is
        large: benchmarks/results/latent.md, docs/derivations/latent.rst.
    topic_threshold : float or None, default=2.0
        A private fit zeroes each topic entry below this many standard deviations of the noise
        the whitening put on it (post-processing; see the notes). ``None`` keeps every positive
        entry. It helps when topics are sparse, as word distributions are (at 2000 words,
        epsilon = 1: l1 topic error 0.035 against 0.049 at 3 x 10^5 documents); on dense topics
        (every word in every topic) it costs a little (docs/derivations/latent.rst).
    method : {"auto", "perturb", "power"}, default="auto"
        How the whitened third moment is released (see the derivation page).
    whitening : {"auto", "dense", "power"} or int, default="auto"
        ``"dense"`` forms the d x d pair moment (released by Analyze Gauss, then its top-k
        eigenpairs); an integer m (``n_components <= m <= n_features``, else refused before any
        spend): only the pair moment's columns of the m words the released mean finds most
        frequent (one release at the dense one's cost and noise per entry, d x m numbers), the
        subspace from their m x m block, every other word's topic weights from its row
        (``dptensor.algorithms.vocabulary``); ``"power"``: the (noisy) power method over the
        documents, each step a release of ``M2 Q`` (d x 2k), then of the 2k x 2k projection.
        ``"auto"``: a private fit takes the dense release up to 2000 words and the columns of the
        2000 most frequent beyond (``auto_whitening_words``; on the committed grid the dense
        release was the best at 2000 words, and at 6000 words the columns beat the power method,
        which learned nothing: ``benchmarks/results/latent_grid_words.md``); without privacy the
        exact top-k eigenpairs by Lanczos on sparse products. The d x d matrix (or d x m
        columns) and copies of the counts' stored entries set the fit's memory; a fit whose bound
        exceeds what the process can allocate is refused before its spend
        (:class:`~dptensor.MemoryRefusedError`): choose fewer words or ``"power"`` then.
    n_restarts, n_iter : int, default=10, 20
        Restarts and steps of the tensor power method on the k x k x k tensor.
    max_transform_iter : int, default=50
        Fixed-point steps of :meth:`transform`.
    refine_iter : int, default=0
        Without privacy only (``epsilon=np.inf``): EM steps from the spectral topics (E-step
        :meth:`transform`'s fixed point, M-step the expected topic-word counts plus the pseudo
        count ``1/k``, scikit-learn's default topic-word prior). They read the documents without
        noise, so a private fit refuses them. Each step raises the likelihood that :meth:`score`
        measures, which is not the same as bringing the topics closer to the truth: they helped
        at 2000 words (benchmarks/results/latent.md), but on a small vocabulary with many
        documents, where the spectral topics are already close, they can move them away.
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) is the only choice fit for a real release.
    verbose : int, default=0
        Progress of the tensor power method.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Topic-word distributions (rows sum to 1). scikit-learn's ``LatentDirichletAllocation``
        holds unnormalised pseudo-counts there: normalise its rows to compare.
    alpha_ : ndarray of shape (n_components,)
        The estimated Dirichlet parameters (they sum to about ``alpha0``).
    method_ : str
    whitening_ : str
        ``"dense"``, ``"vocabulary"`` (the columns of the most frequent words) or ``"power"``.
    m2_eigenvalues_, m2_eigenvalues_noise_ : ndarray of shape (n_components,)
        As in :class:`PrivateGaussianMixture` (here ``signal_bound`` is 1: ``||E2||_F <= 1``).
    n_iter_ : int
        Passes of EM over the documents (``refine_iter``; 0 for the moments alone).
    doc_clip_ : float or None (the clip used, ``"auto"`` resolved; None: nothing clipped)
    n_samples_ : int
    n_features_in_ : int
    privacy_cost_ : PrivacyCost

    Float32 counts give float32 ``components_`` and ``alpha_``, and :meth:`transform` returns
    the type of ``components_``, as scikit-learn's does. There is no ``partial_fit``: the
    whitening is made from the pair moment of every document before the third moment can be
    whitened, so batches cannot be folded in one at a time (each a new release and spend).
    """

    def __init__(self, n_components=10, *, alpha0=1.0, epsilon=np.inf, delta=None,
                 doc_clip="auto", topic_threshold=2.0, method="auto", whitening="auto",
                 n_restarts=10, n_iter=20, max_transform_iter=50, refine_iter=0, accountant=None,
                 random_state=None, verbose=0):
        self.n_components = n_components
        self.alpha0 = alpha0
        self.epsilon = epsilon
        self.delta = delta
        self.doc_clip = doc_clip
        self.topic_threshold = topic_threshold
        self.method = method
        self.whitening = whitening
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.max_transform_iter = max_transform_iter
        self.refine_iter = refine_iter
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # -- the model's moments -----------------------------------------------------------------
    _unit = "document"
    _search_tag = SearchTag(unit="document", groups=True)
    _row_copies = 2  # the documents' pair sums scale copies of the (sparse) counts
    _frobenius = True  # every sensitivity below bounds the Frobenius norm of the change
    _vocabulary = True

    def _validate(self, X, reset, fit=True):
        if is_dask_array(X):  # checked by one reduction over the chunks, never pulled here
            C = check_dask_array(self, X, reset=reset)
            negative, fractional, long = self._reduce({"rows": C}, _count_checks)
        else:
            X = validate_private_data(self, X, reset=reset, accept_sparse="csr",
                                      dtype=[np.float64, np.float32])
            C = _counts(X)
            negative, fractional, long = _count_checks(C)
        if negative:  # scikit-learn's words for it, as its own LatentDirichletAllocation says
            raise ValueError("Negative values in data: X must hold "
                             "word counts (non-negative integers)")
        if fractional:
            raise ValueError("X must hold word counts (non-negative integers), and some entries "
                             "are not whole numbers: normalised or tf-idf rows are not counts")
        # documents of fewer than 3 words are not refused: they weigh nothing (document_weights)
        if fit and long:  # a fit only: transform reads no private data
            raise ValueError("every document needs fewer than 2**53 words "
                             "(counts beyond are not exact in float64, and their "
                             "powers overflow); some have more: drop them first")
        return C

    def _shares(self, prepared, k):
        # error contributions: the pair moment's noise moves the k(d-k) coordinates of the top
        # subspace, the third moment's the k^2 of the whitened topics; with errors a_j/sqrt(s_j)
        # and a_j ~ sqrt(dof_j), s_j ~ a_j^(2/3) ~ dof_j^(1/3) minimises their sum
        ratio = (max(prepared["d"] - k, 1) / k) ** (1.0 / 3.0)
        rest = 1.0 - LDA_FIRST_SHARE
        return {"first": LDA_FIRST_SHARE, "second": rest * ratio / (1.0 + ratio),
                "third": rest / (1.0 + ratio)}

    def _m2_noise(self, prepared, n, plan):
        # the pair moment's at the scale tau_2 / weight = 1: a clipped fit's is at most it
        z = plan.z_second[-2 if prepared["power"] and plan.private else 0]
        return z * (DOCUMENT_SENSITIVITY if prepared["power"] else 1.0) / n, 1.0

    def _dense_max(self, private):
        # without privacy the implicit path gives the same whitening, faster (Lanczos on sparse
        # products); a private fit takes Analyze Gauss, or beyond MAX_DENSE_FEATURES words the
        # columns of that many (auto_whitening_words), never the power method: both less noisy
        return np.inf if private else 0

    def _prepare(self, X, epsilon):
        alpha0, threshold = real_scalar(self.alpha0), real_scalar(self.topic_threshold)
        if isinstance(alpha0, bool) or not isinstance(alpha0, numbers.Real) or not (
                0 < alpha0 < np.inf):
            raise ValueError(f"alpha0 must be a finite number > 0, got {self.alpha0!r}")
        for name, low in (("max_transform_iter", 1), ("refine_iter", 0)):
            steps = integer_scalar(getattr(self, name))  # a 0-d array of an int: that int
            if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {getattr(self, name)!r}")
        if threshold is not None and (
                isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
                or not 0 <= threshold < np.inf):
            raise ValueError("topic_threshold must be None or a finite number >= 0, "
                             f"got {self.topic_threshold!r}")
        if self.refine_iter and np.isfinite(epsilon):
            raise ValueError("refine_iter needs epsilon=np.inf: EM steps read the "
                             "documents without noise, which no private fit may do")
        # "auto": resolved from the public number of units at the first release; checked here
        auto = isinstance(self.doc_clip, str) and self.doc_clip == "auto"
        clip = 0.5 if auto else real_scalar(self.doc_clip)
        if clip is not None:  # None is the way to clip nothing, so the error names it
            if (isinstance(clip, bool) or not isinstance(clip, numbers.Real)
                    or not 0 < clip < np.inf):
                raise ValueError("doc_clip must be a finite number > 0, or None to clip nothing, "
                                 f"or 'auto', got {clip!r}")
            clip = float(clip)
            # tau_2 >= doc_clip^2 / d (nu >= 1 / d) is the mean weight's floor, divided by after the
            # spend, and the third moment's bound is cubic in doc_clip: refused before the spend
            # where either underflows (to 0: a release of sensitivity 0)
            floor = max(np.sqrt(X.shape[1] * np.finfo(float).tiny), np.finfo(float).tiny ** (1 / 3))
            if clip < floor:
                raise ValueError(f"doc_clip must be at least {floor:.3g} (doc_clip**2 / n_features "
                                 f"or doc_clip**3 underflows), got {clip!r}")
        clip = clip if np.isfinite(epsilon) else None
        # a clipped fit releases the clipping scale before the mean; M2 = E2 - c M1 M1^T
        return self._context(X, X, epsilon, clip=clip, n_first=2 if clip else 1,
                             auto_clip=auto, c=alpha0 / (alpha0 + 1.0))

    def _release_first(self, prepared, plan, rng):
        """The clipping bounds (a released scale) and the mean of the clipped ``c / l``."""
        n, d, clip = prepared["n"], prepared["d"], prepared["clip"]
        if clip and prepared["auto_clip"]:  # n: documents, or groups (public either way)
            prepared["clip"] = clip = auto_doc_clip(n, d, *self._privacy_target())
        prepared["words"] = self._whitening_size(n, d, prepared["power"])
        tau1 = tau2 = None
        if clip:
            (total,) = self._reduce(prepared, _scale_sums)
            # every ||E2(c)||_F >= 1/d (its d^2 entries sum to 1): a public floor for a noisy scale
            # each document's ||E2(c)||_F / n lies in [1 / (d n), 1 / n]
            scale, margin = self._rounding(prepared, 1.0)
            nu = max(float(release(np.float64(total / n), 1.0 / n + margin, plan.z_first[0], rng,
                                   rounding=scale)), 1.0 / d)
            # clip * clip, not clip**2: a huge doc_clip gives inf (no clipping), never OverflowError
            tau1, tau2 = min(1.0, clip * np.sqrt(nu)), min(1.0, clip * clip * nu)
        prepared["tau"] = tau = (tau1, tau2)
        dense = not prepared["power"] and prepared["words"] == d
        total, pairs = self._reduce(prepared, _moment_sums, tau, dense)
        if dense:  # computed in the same pass; released next, by Analyze Gauss
            prepared["second"] = pairs / n
        # each document's s_c c / (l n) is non-negative, of norm <= tau_1 / n
        first, margin = self._rounding(prepared, tau1 or 1.0)
        mean = release(total / n, DOCUMENT_SENSITIVITY * (tau1 or 1.0) / n + margin,
                       plan.z_first[-1], rng, rounding=first)
        # The weighted mean's entries sum to the mean weight S (every c / l sums to 1; documents
        # too short to have terms weigh 0): read off the release (exact without privacy), floored
        # (post-processing) at the least weight a document of 3 words can have (||E1||,
        # ||E2||_F <= 1), or at 1 / n. Every moment is divided by S (as of one reweighted corpus).
        if not plan.private and not np.sum(mean) > 0:  # exact without noise: no document has terms
            raise ValueError(f"no document has {MIN_DOCUMENT_LENGTH} words or more: a fit without "
                             "privacy has no moments to learn from (a private fit releases noise)")
        floor = min(tau1, tau2) if clip else 1.0 / n
        prepared["weight"] = float(np.clip(np.sum(mean), floor, 1.0))
        return mean / prepared["weight"]

    def _release_whitening(self, prepared, mean, plan, rng):
        """From the clipped pair moment: Analyze Gauss (d x d) or power steps (d x 2k, 2k x 2k)."""
        n, d, k, c = prepared["n"], prepared["d"], self.n_components, prepared["c"]
        tau, weight = prepared["tau"], prepared["weight"]
        sensitivity = DOCUMENT_SENSITIVITY * (tau[1] or 1.0) / n
        summands = PAIR_PARTS_RATIO * (tau[1] or 1.0)  # n documents' |pair summands|, over n
        if not prepared["power"]:  # released, then divided by the public weight (post-processing)
            analyze, margin = self._whitening_roundings(prepared, min(2 * k, d), summands)[0]
            sensitivity += margin
            if prepared["words"] < d:  # the columns of the most frequent words (released mean)
                return self._vocabulary(prepared, mean, plan, rng, sensitivity, analyze)
            second = release_second(prepared.pop("second"), sensitivity, plan, rng, frobenius=True,
                                    rounding=analyze) / weight
            sensitivity /= weight  # the divided matrix's, which the noise map below describes
            # off the diagonal the noise has std z s / sqrt(2), and so has each entry of E u
            noise = plan.z_second[0] * sensitivity / np.sqrt(2.0)
            if not plan.private:
                return whiten(second - c * np.outer(mean, mean), k, rng)
            # the subspace from the released E2 alone (E2 = M2 + c M1 M1^T spans the topics too), so
            # the mean's noise, on every word, never moves it; M2 is whitened inside it
            values, V = top_eigenpairs(second, k, rng)
            Vm = V.T @ mean
            return whiten(V.T @ second @ V - c * np.outer(Vm, Vm), k, rng, basis=V, noise=noise,
                          basis_values=values)
        # M2 Q = E2 Q - c m (m^T Q): the mean is released, so only E2 Q depends on the documents
        if is_dask_array(prepared["rows"]) or prepared.get("groups"):  # a reduction, or by group
            def pair(Q):
                return self._reduce(prepared, _pair_products, Q, tau)[0]
        else:  # in memory the per-document weights are computed once
            parts = _pair_parts(prepared["rows"], tau)

            def pair(Q):
                return _pair_apply(parts, Q)
        sensitivity /= weight
        operator = ImplicitMatrix(d, lambda Q: (pair(Q) / (n * weight)
                                                - c * np.outer(mean, mean @ Q)))
        # divided by the weight, and the public offset c m m^T (Frobenius norm c ||m||^2)
        _, (step, m_s), (projection, m_p) = self._whitening_roundings(
            prepared, min(2 * k, d), summands / weight, offset=c * float(mean @ mean))
        V, P = power_subspace(operator, k, plan, rng, step_sensitivity=sensitivity + m_s,
                              projection_sensitivity=sensitivity + m_p, step_rounding=step,
                              projection_rounding=projection,
                              few_passes=is_dask_array(prepared["rows"]), frobenius=True)
        # the subspace's noise is mostly the last power step's (it holds the largest share)
        return whiten(P, k, rng, basis=V,
                      noise=plan.z_second[-2] * (sensitivity + m_s) if plan.private else 0.0)

    def _vocabulary(self, prepared, mean, plan, rng, sensitivity, rounding):
        """Whitening from the pair moment's columns of the most frequent words (one release)."""
        words, weight = frequent_words(mean, prepared["words"]), prepared["weight"]
        columns = self._reduce(prepared, _column_sums, prepared["tau"], words)[0] / prepared["n"]
        if plan.private:  # a part of Analyze Gauss's release, in the same geometry and budget
            columns = release_columns(columns, words, sensitivity, plan.z_second[0], rng,
                                      rounding=rounding)
        noise = plan.z_second[0] * sensitivity / weight / np.sqrt(2.0)
        return vocabulary_whitening(columns / weight, words, mean, prepared["c"],
                                    self.n_components, rng, noise, plan.private)

    def _whitening_size(self, n, d, power):
        if not isinstance(self.whitening, str):
            return min(int(self.whitening), d)
        private = bool(np.isfinite(self._privacy_target()[0]))
        return auto_whitening_words(d) if self.whitening == "auto" and private else d

    def _whitened_third(self, prepared, whitening, mean):
        n, c, W = prepared["n"], prepared["c"], whitening.W
        k = W.shape[1]
        u = W.T @ mean
        # W^T E2 W = I + c u u^T: W whitens the released M2 = E2 - c m m^T
        Q = np.eye(k) + c * np.outer(u, u)
        # every whitened triple term has norm <= beta_c <= r^3 (r = max ||w_i||); beta_c^(1/3) is
        # about the document's mean of ||w_i|| over its words, whose mean over documents is M1 . rho
        # (a bound that varies little over documents: below doc_clip = 1 it would scale them all
        # down alike, so it stays at 1 there); the second bound's cube root is about |y| / l, of
        # root mean square sqrt(tr Q), clipped at doc_clip TRIPLE_CLIP times that
        rho = np.linalg.norm(W, axis=1)
        bound = float(np.max(rho))
        norm_bound = None
        if prepared["clip"]:
            clip = prepared["clip"]
            norm_bound = min(clip * TRIPLE_CLIP * float(np.sqrt(np.trace(Q))), bound)
            bound = min(max(clip, 1.0) * max(float(mean @ rho), float(np.min(rho))), bound)
        cube, Z, s = self._reduce(prepared, _triple_sums, W, prepared["tau"],
                                  bound**3 if prepared["clip"] else None,
                                  norm_bound**3 if prepared["clip"] else None)
        bound = min(bound, norm_bound) if prepared["clip"] else bound
        total = n * prepared["weight"]  # the weight is public: the sensitivity is divided by it too
        data = (cube - sym3(np.einsum("ia,ib,ic->abc", W, W, Z, optimize=True))
                + 2.0 * np.einsum("i,ia,ib,ic->abc", s, W, W, W, optimize=True)) / total
        a0 = float(self.alpha0)
        correction = (-a0 / (a0 + 2.0) * sym3(Q[:, :, None] * u[None, None, :])
                      + 2.0 * a0**2 / ((a0 + 1.0) * (a0 + 2.0)) * np.einsum("a,b,c->abc", u, u, u))
        sensitivity = row_sensitivity(bound, n) / prepared["weight"] if prepared["private"] else 0.0
        # a document's three parts, by absolute value, are at most TRIPLE_PARTS_RATIO bound^3
        # (at most 10 r^3 >= 10 bound^3 unclipped, S_j <= l r^j); the words' sums add 2 d steps
        parts = TRIPLE_PARTS_RATIO * bound**3 / prepared["weight"]
        third, margin = self._rounding(prepared, parts, 2 * prepared["d"])
        return data, correction, sensitivity + margin if sensitivity else 0.0, third

    def _recover(self, prepared, components, eigenvalues, whitening, mean):
        a0 = float(self.alpha0)
        lam = self._positive(eigenvalues)
        weight = (2.0 / ((a0 + 2.0) * lam)) ** 2  # alpha_i / (alpha0 (alpha0 + 1))
        scale = (a0 + 2.0) / 2.0 * lam
        topics = (scale[:, None] * components) @ whitening.unwhiten.T
        if whitening.noise and self.topic_threshold is not None:
            # an entry within a few noise deviations of 0 is indistinguishable from a word the
            # topic does not use: zeroed, it stops spreading the noise's mass over the vocabulary
            std = entry_noise_std(components, scale, whitening)
            topics = np.where(topics > self.topic_threshold * std, topics, 0.0)
        topics = np.maximum(topics, 0.0)
        sums = topics.sum(axis=1, keepdims=True)
        d = topics.shape[1]
        # a topic with no positive mass left (pure noise) becomes uniform rather than NaN
        self.components_ = np.where(sums > 0, topics / np.where(sums > 0, sums, 1.0), 1.0 / d)
        self.alpha_ = weight * a0 * (a0 + 1.0)
        self.n_iter_ = int(self.refine_iter)  # EM passes, scikit-learn's meaning (0 if private)
        self.doc_clip_ = prepared["clip"]

    _fitted_arrays = ("components_", "alpha_")

    def _refine(self, prepared, rows):
        """``refine_iter`` EM steps from the spectral topics (without privacy only).

        E-step: each document's proportions by :meth:`transform`'s fixed point with the current
        topics; M-step: ``Phi <- normalise(Phi * (theta^T (C / (theta Phi))) + 1/k)``, the
        expected topic-word counts plus scikit-learn's default topic-word prior ``1/k`` as pseudo
        counts. ``alpha_`` is kept. One pass over the documents per step (a reduction on Dask).
        """
        if not self.refine_iter:
            return
        prepared = {"rows": rows}
        Phi, alpha = self.components_, np.maximum(self.alpha_, 0.0)
        for _ in range(self.refine_iter):
            (counts,) = self._reduce(prepared, _em_sums, Phi, alpha, self.max_transform_iter)
            Phi = np.maximum(Phi, TINY) * counts + 1.0 / Phi.shape[0]
            Phi /= Phi.sum(axis=1, keepdims=True)
        self.components_ = Phi

    # -- transform ---------------------------------------------------------------------------
    def transform(self, X):
        """Document-topic proportions (rows sum to 1), by a fixed number of fixed-point steps.

        ``theta <- normalise(alpha + theta * (Phi (c / (theta Phi))))``: the expected topic counts
        of the words given the current proportions, plus the Dirichlet prior ``alpha_`` as pseudo
        counts (a MAP-like update). It reads only the released topics and the given documents.
        """
        check_is_fitted(self, "components_")
        C = _counts(self._validate(X, reset=False, fit=False))
        theta = fold_in(C, self.components_, np.maximum(self.alpha_, 0.0),
                        self.max_transform_iter)[0]
        return theta.astype(self.components_.dtype, copy=False)  # the model's, as scikit-learn's

    def score(self, X, y=None):
        """Log-likelihood of the words of X given the topics and each document's proportions from
        :meth:`transform` (higher is better)."""
        check_is_fitted(self, "components_")
        C = _counts(self._validate(X, reset=False, fit=False))
        p = fold_in(C, self.components_, np.maximum(self.alpha_, 0.0), self.max_transform_iter)[1]
        return float(np.sum(C.data * np.log(p)))

    def perplexity(self, X):
        """``exp(-score(X) / number of words)``, scikit-learn's formula (lower is better). Its
        ``score`` is a variational bound, with terms for a posterior over the topics; a moment
        fit releases point topics and no posterior, so :meth:`score` is the words' likelihood."""
        C = sp.csr_matrix(self._validate(X, reset=False, fit=False))
        return float(np.exp(-self.score(C) / C.sum()))

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        # word counts are whole numbers: declared as scikit-learn's checks know them, so that they
        # pass counts (non-negative integers) rather than refused fractional values
        tags.input_tags.categorical = True
        return tags
