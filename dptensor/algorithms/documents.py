"""One document's moment terms: its counts, their norms and the one weight that clips them.

A topic model's every moment is a sum over documents of a document's term (its word
frequencies, their pair products, their triples), each term an average over the document's
distinct word positions, scaled by one weight per document (:func:`document_weights`) so that
the clipped moments are those of one reweighted corpus (``docs/derivations/latent.rst``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["MAX_DOCUMENT_LENGTH", "MIN_DOCUMENT_LENGTH", "document_norms", "document_weights",
           "counts", "count_checks", "clip_scale", "per_document", "row_sums"]

#: A fitted document has fewer words than this. Below it float64 counts are exact whole numbers and
#: the sums of their powers that set the clipping (up to ``l^4``, and ``l^3 max ||w_i||^3`` for the
#: whitened triple term) stay finite; above it they overflow to ``inf - inf``, a NaN clipping
#: scale, and one document would decide whether the fit's releases fail.
MAX_DOCUMENT_LENGTH = 2.0**53


def counts(chunk):
    """One chunk of documents as canonical CSR float64 counts (a Dask chunk arrives dense).

    Canonical: one stored entry per (document, word). A CSR matrix may hold a count split over
    duplicate entries; products sum them, but the per-document norms that set the clipping
    (:func:`document_norms`, sums of powers of the stored entries) would come out too small, and
    a clipped term could exceed the bound its sensitivity assumes.
    """
    if not (sp.issparse(chunk) and chunk.format == "csr" and chunk.dtype == np.float64):
        chunk = sp.csr_matrix(chunk, dtype=np.float64)
    if not chunk.has_canonical_format:
        chunk = chunk.copy()  # the caller's matrix is left as it was
        chunk.sum_duplicates()
    return chunk


#: A document's terms need distinct word positions: three for the third moment. Shorter documents
#: weigh nothing in a fit (weight 0 in every moment, :func:`document_weights`), so a corpus needs
#: no filtering that would make its number of documents depend on the data.
MIN_DOCUMENT_LENGTH = 3


def per_document(values, length, positions):
    """``values / positions`` for documents of ``MIN_DOCUMENT_LENGTH`` words or more, else 0."""
    ok = length >= MIN_DOCUMENT_LENGTH
    return np.divide(values, positions, out=np.zeros(len(length)), where=ok)


def document_norms(C):
    r"""Per document: length l, ``||E1(c)||`` and ``||E2(c)||_F`` (see :func:`document_moments`).

    ``||c / l|| = sqrt(sum c^2) / l`` and ``||c c^T - diag c||_F^2 = (sum c^2)^2 - 2 sum c^3 +
    sum c^2``, so both come from three sums over each document's counts. A document of fewer
    than :data:`MIN_DOCUMENT_LENGTH` words has no terms: both norms are 0.
    """
    C = counts(C)
    x = C.data
    sq = x * x
    length, s2, s3 = row_sums(C, x), row_sums(C, sq), row_sums(C, sq * x)
    e1 = per_document(np.sqrt(s2), length, length)
    e2 = per_document(np.sqrt(np.maximum(s2 * s2 - 2.0 * s3 + s2, 0.0)), length,
                       length * (length - 1.0))
    return length, e1, e2


def row_sums(C, values):
    """``sum`` of ``values`` (aligned with ``C.data``) over each row of the CSR matrix C."""
    if not len(values):
        return np.zeros(C.shape[0])
    out = np.add.reduceat(values, np.minimum(C.indptr[:-1], len(values) - 1))
    out[np.diff(C.indptr) == 0] = 0.0  # reduceat gives an empty row the next entry, not 0
    return out


def clip_scale(norms, bound):
    """``min(1, bound / norm)`` per document (1 everywhere without a bound); 0 for a norm that
    is NaN (an overflow's): such a term is dropped rather than let through unclipped."""
    scale = np.ones_like(norms, dtype=float)
    if bound is not None:  # divided only where it clips: a zero norm (no terms) never overflows
        np.divide(bound, norms, out=scale, where=norms > bound)
        scale[np.isnan(norms)] = 0.0
    return scale


def document_weights(C, tau):
    r"""Each document's one weight ``s_c = min(1, tau_1 / ||E1(c)||, tau_2 / ||E2(c)||_F)``.

    ``tau = (tau_1, tau_2)`` (``None`` entries clip nothing). The same weight scales the document's
    term in every moment (the mean, the pair moment and, clipped further if needed, the whitened
    triple term), so the clipped moments are those of one reweighted corpus: divided by the total
    weight they keep the relations between the moments that the method relies on. Each term's norm
    is still at most its own ``tau``, so the sensitivities are those of separate clips. A document
    of fewer than :data:`MIN_DOCUMENT_LENGTH` words weighs 0 (no terms). ``(length, s)``.
    """
    length, e1, e2 = document_norms(C)
    tau1, tau2 = tau if tau is not None else (None, None)
    weight = np.minimum(clip_scale(e1, tau1), clip_scale(e2, tau2))
    return length, np.where(length >= MIN_DOCUMENT_LENGTH, weight, 0.0)


def count_checks(chunk):
    """How many entries are negative, how many fractional, how many documents too long
    (:data:`MAX_DOCUMENT_LENGTH`): input outside the data's domain."""
    C = counts(chunk)
    length = row_sums(C, C.data)
    return (int(np.sum(C.data < 0)), int(np.sum(C.data != np.round(C.data))),
            int(np.sum(length >= MAX_DOCUMENT_LENGTH)))
