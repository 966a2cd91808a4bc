"""The topic model's bound on a document's whitened triple term from its whitened sum ``y``.

``_triple_norm_bound``: ``||E3(c)(W, W, W)||_F <= a (sqrt(|y|^6 + 9 S2^2 |y|^2) + 2 S3)``
(``a = 1 / (l (l-1) (l-2))``), checked against brute-force averages over position triples, its
tightness where claimed, the clipped terms' spread (the third moment's sensitivity ``2 b^3``) and
the computed terms where ``y`` cancels in floating point.
"""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import dptensor.latent._base as base
from dptensor.algorithms.documents import document_weights
from dptensor.algorithms.moments import Whitening, sym3
from dptensor.algorithms.tensor_power import row_sensitivity
from dptensor.latent.lda import PrivateLatentDirichletAllocation as LDA
from dptensor.latent.lda import TRIPLE_PARTS_RATIO, _triple_norm_bound, _triple_sums


def brute_triple(doc):
    """The average of e_a (x) e_b (x) e_c over the document's ordered distinct position triples."""
    words = np.repeat(np.arange(len(doc)), doc.astype(int))
    d = len(doc)
    E3 = np.zeros((d, d, d))
    triples = list(itertools.permutations(range(len(words)), 3))
    for p, q, r in triples:
        E3[words[p], words[q], words[r]] += 1.0 / len(triples)
    return E3


def docs_up_to(d, max_len, min_len=3):
    for length in range(min_len, max_len + 1):
        for combo in itertools.combinations_with_replacement(range(d), length):
            yield np.bincount(combo, minlength=d).astype(float)


def sums(C, W):
    rho = np.linalg.norm(W, axis=1)
    S1, S2, S3 = (np.asarray(C @ rho**j).ravel() for j in (1, 2, 3))
    length = np.asarray(C.sum(axis=1)).ravel()
    return np.asarray(C @ W), S1, S2, S3, 1.0 / (length * (length - 1) * (length - 2))


def chunk_term(C, W, tau, bound, norm_bound=None):
    """The computed (clipped) data part of one chunk, as the fit sums it."""
    cube, Z, s = _triple_sums(C, W, tau, bound, norm_bound)
    return cube - sym3(np.einsum("ia,ib,ic->abc", W, W, Z)) + 2 * np.einsum("i,ia,ib,ic->abc", s, W, W, W)


def rows(kind, rng):
    if kind == "gaussian":
        return rng.standard_normal((4, 3))
    if kind == "orthogonal":  # four words, each along its own axis (four topics)
        return np.eye(4) * np.array([1.0, 2.0, 0.5, 1.5])
    return np.array([[1.0, 0.0], [-1.0, 1e-3], [0.0, 1.0], [1e-3, -1.0]])  # pairs that cancel


@pytest.mark.parametrize("kind", ["gaussian", "orthogonal", "opposite"])
def test_triple_norm_bound_brute_force(kind):
    """Every document of length 3..8 over 4 words: the bound is at least the brute-force norm of
    ``E3(c)(W, W, W)`` (never below it, even by rounding); where the rows spread, it is below the
    triangle inequality's ``a (S1^3 - 3 S1 S2 + 2 S3)`` for some documents."""
    W = rows(kind, np.random.default_rng(11))
    docs = np.array(list(docs_up_to(4, 8)))
    C = sp.csr_matrix(docs)
    Y, S1, S2, S3, a = sums(C, W)
    bound = a * _triple_norm_bound(Y, S1, S2, S3, 0.0)
    triangle = a * (S1**3 - 3 * S1 * S2 + 2 * S3)
    exact = np.array([np.linalg.norm(np.einsum("abc,ai,bj,ck->ijk", brute_triple(c), W, W, W)) for c in docs])
    assert np.all(exact <= bound * (1 + 1e-12))
    assert np.all(exact <= triangle * (1 + 1e-12))
    assert np.any(bound < 0.6 * triangle) and np.mean(bound < triangle) > 0.4


def test_triple_norm_bound_tight_where_claimed():
    """One word repeated l times: the term is ``w^(x)3`` (norm ``rho^3``) and the bound tends to it
    (1 + O(1 / l)), as the triangle one is exact; a document spread evenly over k orthogonal rows
    of norm 1: the norm is about ``(|y| / l)^3 = k^(-3/2)``, which the bound reaches to
    1 + O(1 / l) while the triangle inequality stays at 1 (k^(3/2) = 8 times over)."""
    W = np.eye(4)
    for length in (400.0, 4000.0):
        one = sp.csr_matrix(np.array([[length, 0, 0, 0]]))
        spread = sp.csr_matrix(np.full((1, 4), length / 4))
        for C, norm in ((one, 1.0), (spread, None)):
            Y, S1, S2, S3, a = sums(C, W)
            bound = float(a[0] * _triple_norm_bound(Y, S1, S2, S3, 0.0)[0])
            exact = norm if norm is not None else float(np.linalg.norm(chunk_term(C, W, None, None)))
            assert exact <= bound <= exact * (1 + 40.0 / length)
            if norm is None:
                assert exact == pytest.approx(4**-1.5, rel=10.0 / length)
                triangle = float(a[0] * (S1**3 - 3 * S1 * S2 + 2 * S3)[0])
                assert triangle == pytest.approx(1.0, rel=10.0 / length)


@pytest.mark.parametrize("kind", ["gaussian", "orthogonal", "opposite"])
@pytest.mark.parametrize("tau", [None, (0.7, 0.5)])
def test_clipped_triple_terms_within_the_sensitivity(kind, tau):
    """Each document of length 3..8 over 4 words as its own chunk, its second bound clipped at
    ``b^3`` below most terms' (``norm_bound``; no triangle clip): every computed term has norm at
    most ``b^3``, so two differ by at most ``2 b^3`` (``row_sensitivity(b, 1)``); the clip keeps
    more of a document's weight than the triangle inequality's at the same ``b^3`` (never less);
    with both clips the term is within the lesser bound; the chunk sums are the terms' sum."""
    W = rows(kind, np.random.default_rng(3))
    docs = np.array(list(docs_up_to(4, 8)))
    C = sp.csr_matrix(docs)
    Y, S1, S2, S3, a = sums(C, W)
    cube = 0.3 * float(np.median(a * _triple_norm_bound(Y, S1, S2, S3, 0.0)))
    terms = np.array([chunk_term(C[i], W, tau, None, cube) for i in range(len(docs))])
    norms = np.linalg.norm(terms.reshape(len(docs), -1), axis=1)
    assert np.all(norms <= cube * (1 + 1e-12))
    T = terms.reshape(len(docs), -1)
    widest = np.max(np.linalg.norm(T[:, None, :] - T[None, :, :], axis=2))
    assert widest <= row_sensitivity(cube ** (1 / 3), 1) * (1 + 1e-12)
    weight = document_weights(C, tau)[1]
    exact = np.array([np.linalg.norm(np.einsum("abc,ai,bj,ck->ijk", brute_triple(c), W, W, W)) for c in docs])
    # the triangle inequality's clip, with the same cap on the parts (TRIPLE_PARTS_RATIO)
    triangle = a * np.maximum(S1**3 - 3 * S1 * S2 + 2 * S3, (S1**3 + 3 * S1 * S2 + 2 * S3) / TRIPLE_PARTS_RATIO)
    old = np.minimum(weight, np.divide(cube, triangle, out=np.ones_like(triangle), where=triangle > cube))
    assert np.all(norms >= old * exact * (1 - 1e-9))  # at least the triangle clip's weight
    assert np.any(norms > 1.5 * old * exact)
    np.testing.assert_allclose(chunk_term(C, W, tau, None, cube), terms.sum(axis=0), atol=1e-10)
    for first in (2 * cube, 0.5 * cube):  # both clips: the term is within the lesser
        both = np.array([chunk_term(C[i], W, tau, first, cube) for i in range(len(docs))])
        assert np.all(np.linalg.norm(both.reshape(len(docs), -1), axis=1) <= min(first, cube) * (1 + 1e-12))
        assert np.all(np.abs(both).reshape(len(docs), -1).sum(axis=1) <= np.abs(terms).reshape(len(docs), -1).sum(axis=1) + 1e-12)


@pytest.mark.parametrize("count", [1e3, 1e6, 1e9])
def test_triple_bound_holds_where_y_cancels(count):
    """Rows that nearly cancel (w and -w + 1e-9), each many times: ``y`` is computed from terms
    far larger than itself. The computed clipped term stays within the bound it was clipped to."""
    W = np.array([[1.0, 0.3], [-1.0, -0.3 + 1e-9], [1e-9, 1e-9]])
    C = sp.csr_matrix(np.array([[count, count, 1.0], [count, count + 1.0, 1.0]]))
    Y, S1, S2, S3, a = sums(C, W)
    for i in range(2):
        bound = float(a[i] * _triple_norm_bound(Y[i:i + 1], S1[i:i + 1], S2[i:i + 1], S3[i:i + 1], 0.0)[0])
        for scale in (1.0, 1e-3):
            term = chunk_term(C[i], W, None, None, scale * bound)
            assert np.linalg.norm(term) <= scale * bound * (1 + 1e-9)


# The fit's wiring: the clip the sensitivity assumes is the one applied (neighbouring corpora
# through the fit, the releases before the third moment fixed).
class _Captured(Exception):
    pass


def _fit_third(monkeypatch, X, W, mean, clip, tau, weight, groups=None):
    orig = LDA._release_first

    def first(self, prepared, plan, rng):
        orig(self, prepared, plan, rng)
        prepared.update(clip=clip, tau=tau, weight=weight)
        return mean

    def whitening(self, prepared, mean, plan, rng):
        prepared.pop("second", None)
        return Whitening(W.copy(), np.ones(W.shape[1]))

    def decompose(tensor, correction, k, *, sensitivity, rounding, **kw):
        raise _Captured(tensor, sensitivity)

    monkeypatch.setattr(LDA, "_release_first", first)
    monkeypatch.setattr(LDA, "_release_whitening", whitening)
    monkeypatch.setattr(base, "decompose_whitened", decompose)
    with pytest.raises(_Captured) as info:
        model = LDA(W.shape[1], epsilon=1.0, delta=1e-6, doc_clip=clip, whitening="dense",
                    random_state=0)
        model.fit(X) if groups is None else model.fit(X, groups=groups)
    return info.value.args


@pytest.mark.parametrize("clip", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("grouped", [False, True])
def test_fit_third_moment_change_within_its_sensitivity(monkeypatch, clip, grouped):
    """Rows in +/- pairs: one word repeated gives +b^3 or -b^3, so the spread 2 b^3 / (n w) is
    reached; the change must never exceed the sensitivity the fit passes to the release."""
    rng = np.random.default_rng(0)
    # rows far over b_2: the second clip binds
    w = rng.standard_normal((3, 2)) * np.array([[30.0], [10.0], [3.0]])
    W = np.vstack([w, -w])
    d = W.shape[0]
    mean = rng.dirichlet(np.ones(d))
    others = np.array([np.bincount(rng.integers(0, d, 8), minlength=d) for _ in range(9)], float)
    groups = np.arange(10) if not grouped else np.concatenate([[0, 0], np.arange(1, 9)])
    if grouped:
        others = others[1:]
    widest = 0.0
    for i, j in itertools.product(range(d), repeat=2):
        x, z = np.zeros(d), np.zeros(d)
        x[i], z[j] = 10**6, 10**6
        lead = 2 if grouped else 1
        fits = [_fit_third(monkeypatch, sp.csr_matrix(np.vstack([np.tile(v, (lead, 1)), others])),
                           W, mean, clip, (1.0, 1.0), 0.4, groups if grouped else None)
                for v in (x, z)]
        (t1, s1), (t2, s2) = fits
        assert s1 == s2
        widest = max(widest, np.linalg.norm(t1 - t2) / s1)
    assert widest <= 1.0
    assert widest > 0.99  # reached: the test would see a missing clip


def test_second_bound_where_y_cancels_and_cubes_do_not():
    """Rows 120 degrees apart, one of each: y = 0 but the term is sum w_i^(x)3 / 3."""
    t = 2 * np.pi / 3 * np.arange(3)
    W = np.stack([np.cos(t), np.sin(t)], axis=1)
    C = sp.csr_matrix(np.ones((1, 3)))
    rho = np.linalg.norm(W, axis=1)
    S1, S2, S3 = (np.asarray(C @ rho**j).ravel() for j in (1, 2, 3))
    exact = np.linalg.norm(sum(np.einsum("a,b,c->abc", W[p], W[q], W[r])
                               for p, q, r in itertools.permutations(range(3))) / 6)
    assert exact == pytest.approx(0.5)
    assert exact <= _triple_norm_bound(np.asarray(C @ W), S1, S2, S3, 0.0)[0] / 6


def test_a_nan_norm_is_clipped_to_nothing():
    """A term whose norm bound overflowed to NaN (inf - inf) is dropped, never let through."""
    from dptensor.algorithms.documents import clip_scale

    np.testing.assert_array_equal(clip_scale(np.array([np.nan, 2.0, 0.5, 0.0]), 1.0),
                                  [0.0, 0.5, 1.0, 1.0])
    np.testing.assert_array_equal(clip_scale(np.array([np.nan, 2.0]), None), [1.0, 1.0])
