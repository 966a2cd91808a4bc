r"""The topic model's whitening over its most frequent words (``whitening`` an integer m).

The pair moment's noise enters the whitening twice: in the top-k subspace, whose error grows with
the operator norm of a d x d noise (``2 sqrt(d)`` times its entries' std), and in each topic's
coordinates, one noisy value per word. Only the first grows with the vocabulary. Here the
subspace comes from the pair moment of the m words the released mean says are the most frequent
(post-processing: the choice costs nothing), where the topics' mass and second moment
concentrate, and an m x m noise (``2 sqrt(m)`` times the same std) moves it; every other word's
topic weights come from its pair moments with those m words, through the same whitening. Its
use: a vocabulary whose d x d matrix is the cost, where it is d x m numbers at Analyze Gauss's
noise per entry (where the dense release can be formed it was as good or better, measured).

One release, the m columns of the pair moment of those words: the m x m block (upper triangle)
and the (d - m) x m block beside it, in the Frobenius geometry of the whole symmetric matrix. A
document's term ``A`` has ``||A_SS||_F^2 + 2 ||A_{S'S}||_F^2 <= ||A||_F^2``, so the query
(each distinct entry of the block times the square root of its number of positions in ``A``)
has the l2 sensitivity of the d x d matrix's Frobenius norm: ``sqrt(2) tau_2 / n``, the dense
release's, at its cost; each entry's noise is the dense release's (``docs/derivations/
latent.rst``, "The whitening over the frequent words"). It is a part of Analyze Gauss's release,
never more.

With ``W_S`` whitening the released ``M2_SS = E2_SS - c m_S m_S^T`` (k columns), ``W`` is
``W_S`` on S and 0 elsewhere, so the whitened third moment reads only those words; and
``M2_{:S} W_S = sum_i sqrt(w_i) mu_i v_i^T``, which on S is the usual ``U Lambda^(1/2)`` and
outside S gives each word's row of the map back to the topics (:class:`VocabularyWhitening`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..mechanisms import Rounding, gaussian_release
from .power import MAX_DENSE_FEATURES
from .eigen import top_eigenpairs
from .moments import Whitening, topic_noise_std, whiten

__all__ = ["VocabularyWhitening", "frequent_words", "pair_columns", "column_query",
           "release_columns", "vocabulary_whitening", "entry_noise_std", "auto_whitening_words",
           "AUTO_WORDS"]


def frequent_words(mean, m: int) -> np.ndarray:
    """The ``m`` words of largest released mean frequency (ties to the lower index), ascending."""
    order = np.argsort(-np.asarray(mean, dtype=float), kind="stable")
    return np.sort(order[:int(m)])


def pair_columns(C, D, words) -> np.ndarray:
    """``sum_c D_c (c c^T - diag c)[:, words]`` (d x m, dense) for CSR counts ``C`` (n x d) and
    per-document weights ``D``: the chosen columns of the weighted pair sums, never the d x d
    matrix (one sparse product, ``sum_c nnz(c) nnz(c_S)`` work: each entry a sum over the
    documents, as the pair moment's)."""
    C = sp.csr_matrix(C)
    D = np.asarray(D, dtype=float)
    block = (C.T @ (sp.diags(D) @ C[:, words])).toarray()
    block[words, np.arange(len(words))] -= np.asarray(C.T @ D).ravel()[words]
    return block


def _query_layout(d: int, words):
    """The m x m block's upper triangle (block rows, columns), its roots, the other words."""
    rows, cols = np.triu_indices(len(words))
    return rows, cols, np.where(rows == cols, 1.0, np.sqrt(2.0)), np.setdiff1d(np.arange(d), words)


def column_query(block, words) -> np.ndarray:
    """The vector :func:`release_columns` releases: each distinct entry of the d x m columns
    ``block`` (the rows ``words``, ascending, hold the m x m block) times the square root of its
    positions in the whole symmetric d x d matrix (1 on the diagonal, else 2). Its l2 norm is at
    most the whole matrix's Frobenius norm, so it has that norm's sensitivity."""
    block, words = np.asarray(block, dtype=np.float64), np.asarray(words)
    rows, cols, root, others = _query_layout(block.shape[0], words)
    return np.concatenate([block[words[rows], cols] * root, block[others].ravel() * np.sqrt(2.0)])


def release_columns(block, words, sensitivity: float, noise_multiplier: float, rng, *,
                    rounding: Rounding | None) -> np.ndarray:
    """The d x m columns ``block`` with Gaussian noise: one release of :func:`column_query` at
    ``sensitivity`` (a bound on the whole symmetric matrix's Frobenius-norm change), divided back
    (post-processing). The m x m block comes back exactly symmetric; every entry's noise is
    Analyze Gauss's in that geometry (std ``z s`` on the diagonal, ``z s / sqrt(2)`` elsewhere)."""
    block, words = np.asarray(block, dtype=np.float64), np.asarray(words)
    d, m = block.shape
    rows, cols, root, others = _query_layout(d, words)
    noisy = gaussian_release(column_query(block, words), sensitivity, noise_multiplier, rng,
                             rounding=rounding)
    out = np.empty_like(block)
    out[others] = (noisy[len(rows):] / np.sqrt(2.0)).reshape(len(others), m)
    values = noisy[:len(rows)] / root
    out[words[rows], cols] = values
    out[words[cols], rows] = values
    return out


@dataclass(frozen=True)
class VocabularyWhitening(Whitening):
    """A :class:`~dptensor.algorithms.moments.Whitening` whose vectors are 0 outside the chosen
    words; ``outside`` (d x k, 0 on the chosen words) holds the other words' rows of the map back
    to the topics, ``M2_{S'S} W_S``, each entry with noise of std ``noise`` times the norm of
    its coefficients (``||Lambda^(-1/2) v||`` for a topic's ``v``)."""

    outside: np.ndarray | None = None
    chosen: np.ndarray | None = None  # the chosen words (a d-vector of bools)

    @property
    def unwhiten(self) -> np.ndarray:
        return self.vectors * np.sqrt(self.values) + self.outside


def vocabulary_whitening(columns, words, mean, c: float, k: int, rng, noise: float = 0.0,
                         private: bool = True) -> VocabularyWhitening:
    """The whitening of ``M2 = E2 - c m m^T`` from the released columns ``E2_{:S}`` (d x m).

    As the dense path: the subspace from the top-k eigenvectors of the released ``E2_SS`` (its
    noise never mixed with the mean's), ``M2_SS`` whitened inside it; then each other word's row
    of ``M2_{:S} W_S``. ``noise``: the std of each released entry off the diagonal."""
    words = np.asarray(words)
    d = columns.shape[0]
    inner = columns[words]
    m_s = mean[words]
    if private:
        values, V = top_eigenpairs(inner, k, rng)
        Vm = V.T @ m_s
        w = whiten(V.T @ inner @ V - c * np.outer(Vm, Vm), k, rng, basis=V, noise=noise,
                   basis_values=values)
    else:
        w = whiten(inner - c * np.outer(m_s, m_s), k, rng)
    vectors = np.zeros((d, k))
    vectors[words] = w.vectors
    W_s = w.vectors / np.sqrt(w.values)
    outside = (columns - c * np.outer(mean, m_s)) @ W_s
    outside[words] = 0.0
    chosen = np.zeros(d, dtype=bool)
    chosen[words] = True
    return VocabularyWhitening(vectors, w.values, w.noise, w.spread, outside, chosen)


def entry_noise_std(components, scale, whitening) -> np.ndarray:
    """Per topic and word (k x d, or k x 1 where every word's is the same), the first-order std
    of the whitening's noise on each topic entry (:func:`~dptensor.algorithms.moments.
    topic_noise_std`); outside the chosen words a row of ``outside`` carries its noise through
    ``Lambda^(-1/2)``."""
    inside = topic_noise_std(components, scale, whitening)[:, None]
    if not isinstance(whitening, VocabularyWhitening):
        return inside
    out = scale * whitening.noise * np.linalg.norm(
        np.asarray(components) * whitening.values**-0.5, axis=1)
    return np.where(whitening.chosen[None, :], inside, out[:, None])


#: ``whitening="auto"`` of a private topic model: the whitening over at most this many words
#: (:data:`~dptensor.algorithms.power.MAX_DENSE_FEATURES`), all of them (the dense release) on a
#: smaller vocabulary. On the grid (``benchmarks/results/latent_grid_words.md``) the dense
#: release was as good as any smaller block at 2000 words, and beyond it, where the d x d matrix
#: is the cost, the frequent words' columns beat the private power method.
AUTO_WORDS = MAX_DENSE_FEATURES


def auto_whitening_words(d: int) -> int:
    """The number of words ``whitening="auto"`` whitens a private fit over (``d``: all of them,
    the dense release), from the public vocabulary size only (:data:`AUTO_WORDS`)."""
    return int(min(int(d), AUTO_WORDS))
