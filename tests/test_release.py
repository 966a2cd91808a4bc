"""Attacks on what a fitted estimator releases: pickles, seeds, searches, refusals.

Each test plays an adversary against the workflows people really run (saving a model, seeding a
search, sweeping epsilon) and says in its docstring what the code leaked before each spend drew its
own noise stream. The pickle audit is general: it walks every object a pickle (or a joblib dump)
reaches and compares every array and float in it, by value, with the training rows and with
unnoised statistics computed here, so it also catches leaks nobody listed.
"""
from __future__ import annotations

import copy
import io
import math
import pickle
import pickletools
import re
import warnings

import joblib
import numpy as np
import pytest

import dptensor
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from dptensor import (AdaptivePrivatePCA, BudgetExceededError, PrivacyAccountant, PrivacyWarning, PrivatePCA,
                      PrivateTensorCompletion, PrivateTensorDecomposition, StreamingTensorPower)
from dptensor import _base
from dptensor.algorithms.exact import grid_rows, row_sum
from dptensor.algorithms.operators import moment_tensor
from dptensor.datasets import make_low_rank_tensor
from dptensor.mechanisms import clip_rows, gaussian_release, grid_step
from dptensor.algorithms.streaming_tensor import block_statistics
from dptensor.algorithms.power import center_and_clip, covariance_sensitivity
from expected_warnings import COMPLETION_NOISE, noise_dominated

# A private fit on a small fixture, for its accounting, plumbing or what it keeps (not its
# accuracy): at that size its weaker components are noise, as the fit says.
_SMALL_PRIVATE = noise_dominated()


pytestmark = [pytest.mark.filterwarnings("ignore::dptensor.PrivacyWarning"), *COMPLETION_NOISE]

N, D, B = 600, 6, 1.5          # rows, features, the public row bound
FORBIDDEN = (np.random.Generator, np.random.BitGenerator, np.random.RandomState, np.random.SeedSequence)


def _rows(seed=0, n=N, d=D):
    """Heavy-tailed rows with a clear top direction: many rows are longer than ``B`` (so clipping
    changes them) and the spectrum is well separated (so a private fit has something to find)."""
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d)) * np.r_[1.2, 0.6, 0.4, 0.3, 0.2, 0.1][:d]
    return X * g.standard_t(3, size=(n, 1)) + 0.1


X_ROWS = _rows()


# ---------------------------------------------------------------------------------------------
# The audit: everything a pickle reaches
# ---------------------------------------------------------------------------------------------

class _Walker(pickle.Pickler):
    """Pickles normally, and on the way records every array and every random generator it reaches."""

    def __init__(self, file):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays, self.generators = [], []

    def reducer_override(self, obj):
        if isinstance(obj, FORBIDDEN):
            self.generators.append(type(obj).__name__)
        elif isinstance(obj, (np.ndarray, np.generic)):
            self.arrays.append(np.array(obj, copy=True))
        return NotImplemented  # pickle it as usual (and walk into it)


def _walk(obj):
    """``(arrays, floats, big_ints, generators, blob)`` of everything ``pickle`` reaches from ``obj``."""
    buf = io.BytesIO()
    walker = _Walker(buf)
    walker.dump(obj)
    blob = buf.getvalue()
    floats, big = [], []
    for op, arg, _ in pickletools.genops(blob):
        if op.name in ("BINFLOAT", "FLOAT"):
            floats.append(arg)
        elif isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) >= 2**64:
            big.append(arg)  # 128-bit seed entropy would look like this
    return walker.arrays, floats, big, walker.generators, blob


def _numeric(arrays):
    for a in arrays:
        if a.dtype.kind in "fc":
            yield np.real(a).astype(np.float64)
        elif a.dtype == object:
            yield from _numeric([np.asarray(v) for v in a.ravel() if isinstance(v, (np.ndarray, float))])


def _lines(a, d):
    """Every 1-D line of length ``d`` along any axis of ``a`` (rows, columns, tensor fibres)."""
    for axis in range(a.ndim):
        if a.shape[axis] == d:
            yield np.moveaxis(a, axis, -1).reshape(-1, d)


def _line_matches(secret_rows, arrays):
    """How many secret rows appear, up to a scalar factor, as a line of some array reached."""
    S = np.asarray(secret_rows, dtype=np.float64)
    S = S[np.linalg.norm(S, axis=1) > 1e-12]
    S = S / np.linalg.norm(S, axis=1, keepdims=True)
    found = np.zeros(len(S), dtype=bool)
    for a in _numeric(arrays):
        for L in _lines(a, S.shape[1]):
            L = L[np.linalg.norm(L, axis=1) > 1e-12]
            if not len(L):
                continue
            cos = np.abs((L / np.linalg.norm(L, axis=1, keepdims=True)) @ S.T)
            found |= np.any(cos > 1 - 1e-9, axis=0)
    return int(found.sum())


def _value_matches(secret_values, numbers, rtol=1e-9):
    """How many (non-zero) secret scalars appear among the numbers reached, to ``rtol``."""
    s = np.unique(np.abs(np.ravel(np.asarray(secret_values, dtype=np.float64))))
    s = s[s > 1e-12]
    if not len(s) or not len(numbers):
        return 0
    v = np.unique(np.abs(numbers))
    pos = np.clip(np.searchsorted(v, s), 1, len(v) - 1)
    near = np.minimum(np.abs(v[pos] - s), np.abs(v[pos - 1] - s))
    return int(np.sum(near <= rtol * s))


def audit(obj, *, rows=(), lines=(), values=(), label=""):
    """Assert that nothing reachable from ``obj`` by pickle is a generator, a big seed-like int, a
    training row (``rows``: raw bytes and values), or an unnoised statistic (``lines``: d-vectors
    matched up to scale; ``values``: scalars matched to 1e-9)."""
    arrays, floats, big, generators, blob = _walk(obj)
    found = [f"generators {generators}"] if generators else []
    found += ["a seed-sized integer"] if big else []
    numbers = np.concatenate([a.ravel() for a in _numeric(arrays)] + [np.asarray(floats, dtype=float)])
    for name, R in rows:
        R = np.asarray(R)
        for dtype in (np.float64, np.float32):
            hits = sum(r.tobytes() in blob for r in np.ascontiguousarray(R, dtype=dtype))
            found += [f"{hits} {name} rows stored verbatim ({np.dtype(dtype).name})"] if hits else []
        lines = [*lines, (name, R)]
    for name, S in lines:
        hits = _line_matches(S, arrays)
        found += [f"{hits} lines of {name}"] if hits else []
    for name, S in values:
        hits = _value_matches(S, numbers)
        found += [f"{hits} values of {name}"] if hits else []
    assert not found, f"{label} holds: " + "; ".join(found)


def audit_everywhere(est, tmp_path, **secrets):
    """The pickle, a joblib dump reloaded, and the estimator's repr all pass :func:`audit`."""
    audit(est, label="pickle", **secrets)
    path = tmp_path / "model.joblib"
    joblib.dump(est, path)
    raw = path.read_bytes()
    for name, R in secrets.get("rows", ()):
        for dtype in (np.float64, np.float32):
            assert not any(r.tobytes() in raw for r in np.ascontiguousarray(R, dtype=dtype)), \
                f"joblib file stores {name} rows"
    audit(joblib.load(path), label="joblib", **secrets)
    text = repr(est) + repr(getattr(est, "privacy_cost_", ""))
    assert not re.search(r"\bstate\b|bit_generator|PCG64\(", text), text
    numbers = r"-?\d+\.\d+(?:e-?\d+)?"
    # the parameters are public (an accountant's epsilon of 10 once matched a secret to 6e-6)
    public = {float(t) for t in re.findall(numbers, repr(clone(est)))}
    shown = [float(t) for t in re.findall(numbers, text) if float(t) not in public]
    for name, S in secrets.get("values", ()):
        assert _value_matches(S, np.asarray(shown), rtol=1e-6) == 0, f"repr shows {name}"


def _pca_secrets(X, est, *, centered_with=None):
    """Unnoised statistics of a row-level PCA fit: the clipped (centred) rows' X^T X, its products
    with the released components, its eigenvalues and trace, and the exact clipped mean."""
    Xc = clip_rows(X, B)
    mean = Xc.mean(axis=0)
    rows = [("raw", X), ("clipped", Xc)]
    if centered_with is not None:
        Xc = center_and_clip(Xc, centered_with, B)
        rows.append(("centred", Xc))
    C = Xc.T @ Xc
    V = est.components_ if hasattr(est, "components_") else np.eye(X.shape[1])[:1]
    w = np.linalg.eigvalsh(C)
    scale = max(X.shape[0] - 1, 1)
    return dict(rows=rows,
                lines=[("X^T X", C), ("X^T X V", (C @ V.T).T), ("exact mean", mean[None, :])],
                values=[("eigenvalues", np.r_[w, w / scale]), ("trace", [np.trace(C), np.trace(C) / scale]),
                        ("V^T X^T X V", V @ C @ V.T), ("exact mean", mean)])


# ---------------------------------------------------------------------------------------------
# 1. Pickle walk, every estimator and mode
# ---------------------------------------------------------------------------------------------

PRIVATE = dict(epsilon=2.0, data_norm=B)


@pytest.mark.parametrize("method", ["power", "analyze_gauss"])
@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("seed", [None, 3, "generator", "randomstate"])
def test_private_pca_fit_pickles_only_releases(tmp_path, method, centered, seed):
    """A private PCA fit pickles only its noisy releases.

    Before: a ``random_state`` Generator (even one seeded from fresh OS entropy) was pickled with
    the model; stepping it back two outputs gave the fit's noise, hence the exact clipped mean.
    """
    random_state = {"generator": np.random.default_rng(),
                    "randomstate": np.random.RandomState(5)}.get(seed, seed)
    acc = PrivacyAccountant(10.0)
    est = PrivatePCA(2, method=method, centered=centered, accountant=acc, random_state=random_state,
                     **PRIVATE).fit(X_ROWS)
    secrets = _pca_secrets(X_ROWS, est, centered_with=None if centered else est.mean_)
    audit(vars(est) | {"random_state": None}, label="live", **secrets)
    audit_everywhere(est, tmp_path, **secrets)


def _symmetric(d=D, seed=1):
    """A public-shaped symmetric matrix with a clear top-2 spectrum (an entry-level input)."""
    g = np.random.default_rng(seed)
    U = np.linalg.qr(g.standard_normal((d, d)))[0]
    A = (U * np.r_[40.0, -25.0, 3.0, 2.0, 1.0, 0.5][:d] * math.pi) @ U.T  # no round eigenvalue
    return (A + A.T) / 2


@pytest.mark.parametrize("method", ["power", "analyze_gauss"])
def test_private_pca_precomputed_pickles_only_releases(tmp_path, method):
    """Entry-level PCA of a precomputed matrix: no entry row of A, no A V, no eigenvalue of A is kept.

    Before: the model file carried its ``random_state`` Generator, hence the noise of every release.
    """
    A = _symmetric()
    est = PrivatePCA(2, method=method, input="precomputed", epsilon=2.0,
                     random_state=np.random.default_rng(1)).fit(A)
    w = np.linalg.eigvalsh(A)
    secrets = dict(rows=[("A", A)], lines=[("A V", (A @ est.components_.T).T)],
                   values=[("eigenvalues of A", w), ("trace", [np.trace(A)])])
    audit(vars(est) | {"random_state": None}, label="live", **secrets)
    audit_everywhere(est, tmp_path, **secrets)


def _stream(est, X, chunk):
    for start in range(0, X.shape[0], chunk):
        est.partial_fit(X[start:start + chunk])
    return est


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_rows,centered", [(70, False), (210, False), (70, True), (250, True)])
@pytest.mark.parametrize("epsilon", [2.0, np.inf])
def test_streaming_pca_mid_block_pickles_no_working_state(tmp_path, n_rows, centered, epsilon, dtype):
    """A PCA stream pickled in the middle of a block (the mean block, or a power block).

    Before: the pickle held the stream's generator (stepping it back gave the noise of the released
    mean), its unnoised running sums (the unfinished block's clipped row sum, or ``C^T C X``) and,
    through them, the unfinished block's rows.
    """
    X = X_ROWS[:n_rows].astype(dtype)
    est = _stream(PrivatePCA(2, epsilon=epsilon, data_norm=B, centered=centered, block_size=100,
                             random_state=2), X, 70)
    live = est._stream
    assert live._count > 0  # rows of an unfinished block are waiting
    Xc = clip_rows(X.astype(np.float64), B)
    start = n_rows - live._count
    lines = []
    if math.isfinite(epsilon) or (live.mean is None and not centered):  # else the exact mean is released
        lines += [("the mean block's clipped sum", Xc[:min(100, n_rows)].sum(0)[None, :]),
                  ("the exact mean", Xc[:min(100, n_rows)].mean(0)[None, :])]
    if live.mean is not None:  # inside a power block: its unnoised product with the current basis
        Cb = center_and_clip(Xc[start:], live.mean, B)
        lines.append(("the unfinished block's C^T C X", (Cb.T @ (Cb @ live.basis.astype(np.float64))).T))
    secrets = dict(rows=[("raw", X), ("clipped", Xc)], lines=lines)
    audit_everywhere(est, tmp_path, **secrets)
    with pytest.raises(RuntimeError, match="pickled or copied while its stream was open"):
        pickle.loads(pickle.dumps(est)).partial_fit(X[:5])


def test_pickling_mid_stream_leaves_the_live_stream_running():
    """Pickling (or copying) a stream must not close the live one: the pickle leaves the stream
    behind, the estimator that was pickled continues it exactly as if nothing had happened.

    The first version of stream-free pickles cleared the stream in the instance's own ``__dict__``
    (on Python >= 3.11 the inherited state is that very dict), so saving a checkpoint mid-stream
    ended the stream it meant to save; before it, the pickle carried the stream and its generator.
    """
    import copy

    twins = [PrivatePCA(2, epsilon=2.0, data_norm=B, block_size=100, random_state=4),
             StreamingTensorPower(2, n_restarts=3, n_iter=3, batch_size=100, random_state=4, **PRIVATE)]
    for est in twins:
        ref = clone(est)
        est.partial_fit(X_ROWS[:250])
        ref.partial_fit(X_ROWS[:250])
        pickle.dumps(est)
        joblib.dump(est, io.BytesIO())
        copy.deepcopy(est)
        est.partial_fit(X_ROWS[250:])
        ref.partial_fit(X_ROWS[250:])
        np.testing.assert_array_equal(est.components_, ref.components_)


def _stp_secrets(X, est):
    """Rows, and the exact third-moment contractions at the released components (all rows and each
    block of 100)."""
    Xc = clip_rows(X, B)
    V = est.components_
    lines, values = [], []
    for part in [Xc] + [Xc[i:i + 100] for i in range(0, len(Xc), 100)]:
        if len(part) and len(V):
            TU, tu = block_statistics(part, V.T)
            lines.append(("exact T(I, v, v)", TU.T))
            values.append(("exact T(v, v, v)", tu))
    return dict(rows=[("raw", X), ("clipped", Xc)], lines=lines, values=values)


@pytest.mark.parametrize("epsilon", [2.0, np.inf])
def test_streaming_tensor_power_fit_pickles_only_releases(tmp_path, epsilon):
    """A stream that ``fit`` finished: components and eigenvalues only.

    Before: the pickle held the stream's generator, and a non-private stream its raw rows.
    """
    est = StreamingTensorPower(2, n_restarts=3, n_iter=3, batch_size=100, epsilon=epsilon, data_norm=B,
                               random_state=np.random.default_rng(5)).fit(X_ROWS)
    assert est.n_components_done_ == 2
    secrets = _stp_secrets(X_ROWS, est)
    if math.isfinite(epsilon):
        audit(vars(est) | {"random_state": None}, label="live", **secrets)
    else:
        secrets = dict(rows=secrets["rows"])
    audit_everywhere(est, tmp_path, **secrets)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("epsilon", [2.0, np.inf])
def test_streaming_tensor_power_mid_stream_pickles_no_buffer(monkeypatch, tmp_path, epsilon, dtype):
    """``partial_fit`` in 70-row chunks leaves raw rows in the stream's buffer and, with micro-blocks
    of 30 rows, the unnoised moments of the unfinished block's first rows in its accumulators.

    Before: a private stream fed 700-row chunks pickled every buffered row, unclipped, and its
    unnoised partial sums.
    """
    import dptensor.algorithms.streaming_tensor as stp

    monkeypatch.setattr(stp, "MICRO_BLOCK_BYTES", 30 * D * np.dtype(dtype).itemsize)
    X = X_ROWS[:250].astype(dtype)
    est = _stream(StreamingTensorPower(2, n_restarts=3, n_iter=3, batch_size=100, epsilon=epsilon,
                                       data_norm=B, random_state=6), X, 70)
    live = est._stream
    assert live.fill > 0 and 0 < live.rows_in_block  # raw rows in the buffer, moments accumulated
    Xc = clip_rows(X.astype(np.float64), B)
    U = live.U.astype(np.float64)
    start = len(X) - live.fill - live.rows_in_block
    TU, tu = block_statistics(Xc[start:start + live.rows_in_block], U)   # what the accumulators hold
    TUb, tub = block_statistics(Xc[len(X) - live.fill:], U)               # what the buffer would add
    secrets = dict(rows=[("raw", X), ("clipped", clip_rows(X, B))],
                   lines=[("the unfinished block's T(I, u, u)", TU.T), ("the buffer's T(I, u, u)", TUb.T)],
                   values=[("the unfinished block's T(u, u, u)", np.r_[tu, tu * live.rows_in_block / 100]),
                           ("the buffer's T(u, u, u)", tub)])
    audit_everywhere(est, tmp_path, **secrets)


def _tensor_secrets(T, est, rows=()):
    V = est.components_
    TIvv = np.einsum("abc,kb,kc->ka", T, V, V)
    return dict(rows=[*rows, ("tensor fibres", T.reshape(-1, T.shape[0]))],
                lines=[("exact T(I, v, v)", TIvv)], values=[("exact T(v, v, v)", np.sum(TIvv * V, axis=1))])


@_SMALL_PRIVATE
@pytest.mark.parametrize("method", ["power", "input_perturbation", None])
@pytest.mark.parametrize("tensor_input", [False, True])
def test_tensor_decomposition_pickles_only_releases(tmp_path, method, tensor_input):
    """Private tensor power method, input perturbation, and the non-private fit; data or a tensor.

    Before: the model file carried its ``random_state`` Generator, hence the noise of every query.
    """
    if tensor_input:
        T, rows = moment_tensor(_rows(7, 400)), ()
        X = T
    else:
        X = X_ROWS
        T, rows = moment_tensor(clip_rows(X, B)), [("raw", X), ("clipped", clip_rows(X, B))]
    kw = dict(epsilon=np.inf) if method is None else dict(epsilon=2.0, method=method)
    est = PrivateTensorDecomposition(2, n_restarts=3, n_iter=5,  # a tensor's entries: no bound
                                     data_norm=None if tensor_input else B,
                                     random_state=np.random.default_rng(8), **kw).fit(X)
    secrets = _tensor_secrets(T, est, rows)
    if method is None:
        secrets = dict(rows=secrets["rows"])
    audit(vars(est) | {"random_state": None}, label="live", **secrets)
    audit_everywhere(est, tmp_path, **secrets)


@_SMALL_PRIVATE
@pytest.mark.parametrize("epsilon", [1.0, np.inf])
def test_adaptive_pca_pickles_only_releases(tmp_path, epsilon):
    """AdaptivePrivatePCA: components and the released thresholds; no row, no exact ``A^T A v``.

    Before: the model file carried its ``random_state`` RandomState (whose MT19937 state can be
    run backwards), hence the AboveThreshold and Gaussian noise of every round.
    """
    est = AdaptivePrivatePCA(2, epsilon=epsilon, data_norm=B, random_state=np.random.RandomState(9))
    est.fit(X_ROWS)
    Xc = clip_rows(X_ROWS, B)
    C = Xc.T @ Xc
    V = est.components_
    secrets = dict(rows=[("raw", X_ROWS), ("clipped", Xc)], lines=[("A^T A v", (C @ V.T).T)],
                   values=[("eigenvalues", np.linalg.eigvalsh(C)), ("v^T A^T A v", V @ C @ V.T)])
    if not math.isfinite(epsilon):
        secrets = dict(rows=secrets["rows"])
    audit(vars(est) | {"random_state": None}, label="live", **secrets)
    audit_everywhere(est, tmp_path, **secrets)
    assert isinstance(est.random_state, np.random.RandomState)  # the caller's object stays


COMPLETION = make_low_rank_tensor(shape=(8, 7, 6), rank=2, snr=2.0, random_state=3)


@pytest.mark.parametrize("perturbation,fit_intercept", [("input", True), ("gradient", True),
                                                        ("gradient", False), (None, True), ("output", True)])
def test_completion_pickles_only_releases(tmp_path, perturbation, fit_intercept):
    """Private completion keeps no observed value, no exact mean, no training loss.

    Before: a private fit kept its unnoised training loss, and every fit pickled its generator.
    """
    X, y = COMPLETION["indices"], COMPLETION["values"]
    private = perturbation in ("input", "gradient")
    est = PrivateTensorCompletion(rank=2, perturbation=perturbation, epsilon=2.0 if perturbation else np.inf,
                                  value_range=(0.0, 1.0), fit_intercept=fit_intercept, verbose=1,
                                  random_state=np.random.default_rng(10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    inside = (y > 0) & (y < 1)  # a clipped value equals a public bound: not a secret
    yc = np.clip(y, 0, 1)
    secrets = dict(values=[("observed values", y[inside]), ("centred values", (y - 0.5)[inside])])
    if private:
        loss = np.sqrt(np.mean((est.predict(X) - yc) ** 2))
        secrets["values"] += [("training loss", [loss, loss / 1.0, loss ** 2]), ("exact mean", [yc.mean()]),
                              ("exact row means", [np.bincount(X[:, m], yc) / np.bincount(X[:, m])
                                                   for m in range(3)][0])]
        assert not hasattr(est, "train_rmse_")
    audit(vars(est) | {"random_state": None}, label="live", **secrets)
    audit_everywhere(est, tmp_path, **secrets)


@pytest.mark.parametrize("make", [
    lambda: PrivatePCA(2, method="power", random_state=np.random.default_rng(12), **PRIVATE),
    lambda: PrivatePCA(2, method="analyze_gauss", random_state=np.random.default_rng(12), **PRIVATE),
    lambda: PrivateTensorDecomposition(2, **SMALL, random_state=np.random.default_rng(12), **PRIVATE),
    lambda: StreamingTensorPower(2, batch_size=100, **SMALL, random_state=np.random.default_rng(12), **PRIVATE),
], ids=["pca-power", "pca-analyze_gauss", "tensor", "stream"])
@_SMALL_PRIVATE
def test_dask_fits_pickle_only_releases(tmp_path, make):
    """Rows on Dask: the fitted model holds no chunk, no generator, no unnoised X^T X."""
    da = pytest.importorskip("dask.array")
    est = make().fit(da.from_array(X_ROWS, chunks=(150, D)))
    audit_everywhere(est, tmp_path, **_pca_secrets(X_ROWS, est))


# ---------------------------------------------------------------------------------------------
# 2. Stepping a pickled generator back
# ---------------------------------------------------------------------------------------------

class _Grab(pickle.Pickler):
    """Collects the generators a pickle reaches (what an attacker would search a model file for)."""

    def __init__(self):
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found = []

    def reducer_override(self, obj):
        if isinstance(obj, np.random.Generator):
            self.found.append(obj)
        return NotImplemented


def _step_back_attack(model_bytes, redraw, recovers, max_back=256):
    """Load a model file, find every Generator in it, step each back 0..max_back outputs and redraw
    the noise with ``redraw(generator)``; return True if ``recovers(noise)`` holds for any of them."""
    grab = _Grab()
    grab.dump(pickle.loads(model_bytes))
    for g in grab.found:
        for back in range(max_back):
            h = np.random.Generator(type(g.bit_generator)())
            h.bit_generator.state = g.bit_generator.state
            h.bit_generator.advance(-back)
            if recovers(redraw(h)):
                return True
    return False


def _grid_mean(X):
    """The mean a private PCA fit releases: that of the rows on its grid, summed exactly."""
    return row_sum(grid_rows(X, B), B / len(X)).value()


@_SMALL_PRIVATE
def test_generator_step_back_has_nothing_to_work_on():
    """The issue's attack: step a pickled PCG64 back and regenerate the noise of the released mean.

    Before: ``PrivatePCA.partial_fit`` pickled its stream's generator; stepping it back 8 draws gave
    the unnoised mean to 2.8e-17. The attack is shown to work on that object (the stream as the old
    pickle held it), then to find no generator at all in today's model files.
    """
    X = X_ROWS[:150]
    est = PrivatePCA(2, epsilon=2.0, data_norm=B, block_size=100, random_state=None).partial_fit(X)
    true_mean = _grid_mean(X[:100])
    z = est.privacy_cost_.noise_multiplier
    scale = z * 2.0 * B / 100

    def redraw(h):  # the release's noise: what it adds to a value on its grid (0 here)
        return gaussian_release(np.zeros(D), 2.0 * B / 100, z, h)

    def recovers(noise):  # to within the grid step (scale 2**-30): the value rounded to the grid
        return np.max(np.abs(est.mean_ - noise - true_mean)) < scale * 2.0**-29

    assert np.max(np.abs(est.mean_ - true_mean)) > 1e-3 * scale  # the mean is noised...
    assert _step_back_attack(pickle.dumps(est._stream), redraw, recovers)  # ...but the old pickle undid it
    assert not _step_back_attack(pickle.dumps(est), redraw, recovers)
    assert _Walker(io.BytesIO()).dump(est) is None  # (the file pickles)
    # A generator given as random_state: the model file does not carry it either.
    gen = PrivatePCA(2, epsilon=2.0, data_norm=B, method="analyze_gauss",
                     random_state=np.random.default_rng())
    gen.fit(X)
    assert isinstance(gen.random_state, np.random.Generator)  # the caller's object is untouched
    assert pickle.loads(pickle.dumps(gen)).random_state is None
    import copy
    assert copy.deepcopy(gen).random_state is None and copy.copy(gen).random_state is None
    assert isinstance(clone(gen).random_state, np.random.Generator)  # clone copies parameters, as before
    assert not _step_back_attack(pickle.dumps(gen), lambda h: None, lambda noise: True)


# ---------------------------------------------------------------------------------------------
# 3-4. Noise recovered from releases: clones, searches, epsilon grids
# ---------------------------------------------------------------------------------------------

def _sphere_rows(n=3000, d=8, seed=11):
    """Rows of norm <= 1 spread over all directions: every eigenvalue of X^T X is ~ n/d, far above
    the Analyze Gauss noise, so the noisy matrix is rebuilt exactly from a full release."""
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True) * g.uniform(0.5, 1.0, size=(n, 1))


XS = _sphere_rows()
DS = XS.shape[1]
IU = np.triu_indices(DS)


def _released_matrix(est):
    """The noisy X^T X an Analyze Gauss fit with n_components = d released (post-processing)."""
    ev = est.explained_variance_ * (est.n_samples_ - 1)
    assert np.all(ev > 0), "a floored eigenvalue: the test data are not well conditioned enough"
    return (est.components_.T * ev) @ est.components_


def _noise(est, X):
    """The Analyze Gauss noise of ``est`` fitted on ``X``, in units of its standard deviation."""
    C = X.T @ X  # rows have norm <= 1 = data_norm: clipping does nothing
    std = est.privacy_cost_.noise_multiplier * covariance_sensitivity(1.0)
    return (_released_matrix(est) - C)[IU] / std


def _ag(**kw):
    return PrivatePCA(DS, method="analyze_gauss", centered=True, data_norm=1.0, **kw)


def _assert_independent(noises, what):
    E = np.array(noises)
    assert E.shape[0] >= 2
    sd = E.std(axis=1)
    assert np.all((sd > 0.6) & (sd < 1.6)), f"{what}: recovered noise has the wrong scale {sd}"
    R = np.corrcoef(E)
    off = np.abs(R[~np.eye(len(E), dtype=bool)])
    assert off.max() < 0.8, f"{what}: correlated noise between spends (|corr| up to {off.max():.3f})"


@pytest.mark.parametrize("seed", ["generator", "randomstate", "int"])
def test_clones_under_one_accountant_draw_independent_noise(seed):
    """Two clones of one seeded estimator fitted under one accountant.

    Before: ``clone`` deep-copied a Generator or RandomState, so both clones released bit-identical
    output (and an int seed gave the same draws) while the ledger composed them as independent.
    """
    random_state = {"generator": np.random.default_rng(123), "randomstate": np.random.RandomState(123),
                    "int": 123}[seed]
    acc = PrivacyAccountant(10.0)
    base = _ag(epsilon=1.0, accountant=acc, random_state=random_state)
    fits = [clone(base).fit(XS) for _ in range(3)]
    assert len(acc.history()) == 3
    assert not np.allclose(fits[0].components_, fits[1].components_)
    _assert_independent([_noise(f, XS) for f in fits], f"clones ({seed})")


def _score_released_matrix(est, X, y=None):
    """A scorer that reports the fitted candidate's released matrix (so it survives a process pool)."""
    R = _released_matrix(est)[IU]
    return {f"r{i}": float(v) for i, v in enumerate(R)} | {"n": float(est.n_samples_)}


def _grid_noises(search, X, splits):
    """Every spend's noise recovered from ``cv_results_``, in standard deviations."""
    res = search.cv_results_
    out = []
    for c, params in enumerate(res["params"]):
        z = clone(search.estimator).set_params(**params, accountant=None, random_state=0)
        z = z.fit(X[:50]).privacy_cost_.noise_multiplier  # the multiplier depends on public values only
        for j, (train, _) in enumerate(splits):
            R = np.array([res[f"split{j}_test_r{i}"][c] for i in range(len(IU[0]))])
            C = X[train].T @ X[train]
            out.append((R - C[IU]) / (z * covariance_sensitivity(1.0)))
    return out


@_SMALL_PRIVATE
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_search_with_repeated_candidates_draws_independent_noise(tmp_path, n_jobs):
    """GridSearchCV over a grid with identical candidates (epsilon 1, 1, 2), one seed.

    n_jobs=1 with a memory ledger and a Generator seed, n_jobs=2 with a SQLite ledger and an int
    seed. Before: every candidate started from the same deep-copied generator (or the same int), so
    the identical candidates released identical noise and the epsilon=2 one proportional noise.
    """
    if n_jobs == 1:
        acc, random_state = PrivacyAccountant(50.0), np.random.default_rng(0)
    else:
        acc, random_state = PrivacyAccountant(50.0, ledger=tmp_path / "budget.sqlite"), 7
    splits = list(KFold(3, shuffle=True, random_state=0).split(XS))
    search = GridSearchCV(_ag(accountant=acc, random_state=random_state), {"epsilon": [1.0, 1.0, 2.0]},
                          scoring=_score_released_matrix, refit=False, cv=splits, n_jobs=n_jobs)
    search.fit(XS)
    assert len(acc.history()) == 9
    _assert_independent(_grid_noises(search, XS, splits), f"search n_jobs={n_jobs}")
    audit(search, rows=[("training", XS)], label="the search")  # its estimator's generator stays behind


@pytest.mark.parametrize("with_accountant", [False, True])
def test_epsilon_grid_does_not_cancel_the_noise(with_accountant):
    """Fits at epsilon=1 and epsilon=2 with one int seed.

    Before: the same draws scaled by two multipliers, so ``(z2 R1 - z1 R2) / (z2 - z1)`` rebuilt the
    noiseless clipped X^T X to 2.7e-13. Now the combination is as noisy as the releases.
    """
    acc = PrivacyAccountant(10.0) if with_accountant else None
    fits = [_ag(epsilon=eps, accountant=acc, random_state=0).fit(XS) for eps in (1.0, 2.0)]
    (R1, z1), (R2, z2) = [(_released_matrix(f), f.privacy_cost_.noise_multiplier) for f in fits]
    C = XS.T @ XS
    rebuilt = (z2 * R1 - z1 * R2) / (z2 - z1)
    err = np.sqrt(np.mean((rebuilt - C)[IU] ** 2))
    noise = min(z1, z2) * covariance_sensitivity(1.0)
    assert err > 0.5 * noise, f"the grid cancelled the noise: error {err:.3g}, noise std {noise:.3g}"
    _assert_independent([_noise(f, XS) for f in fits], "epsilon grid")


# ---------------------------------------------------------------------------------------------
# 5. epsilon = inf costs infinity
# ---------------------------------------------------------------------------------------------

XC, YC = COMPLETION["indices"], COMPLETION["values"]
SMALL = dict(n_restarts=2, n_iter=2)

#: (name, estimator factory, how to fit it, the module whose data-touching helpers must not run)
NON_PRIVATE = [
    ("PrivatePCA.fit", lambda **kw: PrivatePCA(2, **kw), lambda e: e.fit(X_ROWS), "pca"),
    ("PrivatePCA.partial_fit", lambda **kw: PrivatePCA(2, **kw), lambda e: e.partial_fit(X_ROWS), "pca"),
    ("AdaptivePrivatePCA", lambda **kw: AdaptivePrivatePCA(2, epsilon=np.inf, **kw), lambda e: e.fit(X_ROWS),
     "adaptive_pca"),
    ("PrivateTensorDecomposition(data)", lambda **kw: PrivateTensorDecomposition(2, **SMALL, **kw),
     lambda e: e.fit(X_ROWS), "tensor_decomposition"),
    ("PrivateTensorDecomposition(tensor)", lambda **kw: PrivateTensorDecomposition(2, **SMALL, **kw),
     lambda e: e.fit(moment_tensor(X_ROWS)), "tensor_decomposition"),
    ("StreamingTensorPower.fit", lambda **kw: StreamingTensorPower(2, batch_size=100, **SMALL, **kw),
     lambda e: e.fit(X_ROWS), "streaming_tensor_power"),
    ("StreamingTensorPower.partial_fit", lambda **kw: StreamingTensorPower(2, batch_size=100, **SMALL, **kw),
     lambda e: e.partial_fit(X_ROWS), "streaming_tensor_power"),
    ("PrivateTensorCompletion", lambda **kw: PrivateTensorCompletion(rank=2, **kw), lambda e: e.fit(XC, YC),
     "completion"),
]


def _untouchable(monkeypatch, module):
    """Make the module's first step on the data values fail (clipping; for completion, whose public
    positions are indexed before the spend, the solvers' set-up)."""
    import importlib

    mod = importlib.import_module(f"dptensor.{module}")

    def touched(*args, **kwargs):
        raise AssertionError(f"dptensor.{module} computed on the data before the budget refused the fit")

    for name in ("clip_rows", "clip_chunks", "moment_tensor", "_blas_controller", "StreamingPowerMethod",
                 "_Stream", "TensorPowerStream"):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, touched)


@pytest.mark.parametrize("name,make,fit,module", NON_PRIVATE, ids=[c[0] for c in NON_PRIVATE])
def test_epsilon_inf_is_refused_by_a_finite_budget(monkeypatch, tmp_path, name, make, fit, module):
    """Forgetting epsilon under a finite budget: refused before touching the data, ledger unchanged.

    Before: ``PrivatePCA(2, data_norm=1.0, accountant=PrivacyAccountant(1.0)).fit(X)`` ran the exact
    method and recorded nothing (``spent() == (0, 0)``).
    """
    from dptensor.accounting import GaussianEvent

    for acc in (PrivacyAccountant(1.0), PrivacyAccountant(1.0, ledger=tmp_path / f"{module}.sqlite")):
        acc.spend(GaussianEvent(20.0), label="an earlier fit")
        before = acc.history()
        est = make(accountant=acc, random_state=0)
        with monkeypatch.context() as m:
            _untouchable(m, module)
            with pytest.raises(BudgetExceededError, match="no privacy guarantee.*finite epsilon"):
                fit(est)
        assert acc.history() == before
        fitted = {k for k in vars(est) if k.endswith("_") and not k.startswith("_")}
        assert fitted <= {"n_features_in_", "feature_names_in_"}, f"a refused fit left {fitted}"


@pytest.mark.parametrize("name,make,fit,module", NON_PRIVATE, ids=[c[0] for c in NON_PRIVATE])
def test_epsilon_inf_runs_warns_and_is_recorded_as_not_private(name, make, fit, module):
    """Without an accountant the fit runs, warns, and says it is not private; an infinite accountant
    records a "none" entry of epsilon inf. Before: nothing was recorded and no warning was given."""
    with pytest.warns(PrivacyWarning, match="without a privacy guarantee"):
        est = fit(make(random_state=0))
    assert est.privacy_cost_.epsilon == math.inf and not est.privacy_cost_.private
    acc = PrivacyAccountant()
    with pytest.warns(PrivacyWarning):
        fit(make(accountant=acc, random_state=0))
    (entry,) = acc.history()
    assert entry.mechanism == "none" and entry.epsilon == math.inf and acc.spent()[0] == math.inf


# ---------------------------------------------------------------------------------------------
# 6. Every invalid parameter is refused before the spend
# ---------------------------------------------------------------------------------------------

P = dict(epsilon=1.0, data_norm=B)
BAD_SEEDS = [dict(random_state="x"), dict(random_state=-1), dict(random_state=1.5), dict(random_state=True),
             dict(random_state=np.int64(-3)), dict(random_state=[1, 2]),
             dict(random_state=np.random.SeedSequence(1))]
BAD_PRIVACY = [dict(epsilon=0), dict(epsilon=-1.0), dict(epsilon=float("nan")), dict(epsilon="1"),
               dict(epsilon=True), dict(delta=-0.1), dict(delta=1.0), dict(delta="x"), dict(delta=0.0)]
BAD_NORM = [dict(data_norm=None), dict(data_norm=-1.0), dict(data_norm=0), dict(data_norm=np.inf),
            dict(data_norm="1")]

INVALID = (
    [("PrivatePCA", PrivatePCA, dict(n_components=2, **P), kw, m)
     for m in ("fit", "partial_fit")
     for kw in BAD_SEEDS + BAD_PRIVACY + BAD_NORM + [
         dict(n_components=0), dict(n_components=7), dict(n_components=2.5), dict(n_components="2"),
         dict(method="pow"), dict(input="rows"), dict(neighbors="cell"), dict(neighbors="entry"),
         dict(calibration="approx"), dict(n_iter=0), dict(n_iter="many"), dict(n_iter=2.0),
         dict(n_oversamples=-1), dict(n_oversamples=5, method="power"), dict(whiten="yes"),
         dict(centered="no"),
         dict(accountant="budget")]]
    + [("PrivatePCA", PrivatePCA, dict(n_components=2, **P), kw, "partial_fit")
       for kw in (dict(block_size=0), dict(block_size=2.5), dict(method="analyze_gauss"),
                  dict(calibration="paper"), dict(input="precomputed"))]
    + [("AdaptivePrivatePCA", AdaptivePrivatePCA, dict(n_components=2, **P), kw, "fit")
       for kw in BAD_SEEDS + BAD_PRIVACY + BAD_NORM + [
           dict(n_components=0), dict(n_components=7), dict(n_iter=0), dict(n_iter=True), dict(beta=0),
           dict(beta=1), dict(beta="x"), dict(svt_fraction=0.0), dict(svt_fraction=1.5)]]
    + [("PrivateTensorDecomposition", PrivateTensorDecomposition, dict(n_components=2, **SMALL, **P), kw,
        "fit")
       for kw in BAD_SEEDS + BAD_PRIVACY + BAD_NORM + [
           dict(n_components=0), dict(n_components=7), dict(n_restarts=0), dict(n_iter=0), dict(method="svd"),
           dict(calibration="x"), dict(moment="sparse"), dict(symmetrize="yes"), dict(verbose="x")]]
    + [("StreamingTensorPower", StreamingTensorPower, dict(n_components=2, batch_size=100, **SMALL, **P),
        kw, m)
       for m in ("fit", "partial_fit")
       for kw in BAD_SEEDS + BAD_PRIVACY + BAD_NORM + [
           dict(n_components=0), dict(n_components=7), dict(n_restarts=0), dict(n_iter=0),
           dict(batch_size=0), dict(batch_size=1.5), dict(verbose="x")]]
    + [("StreamingTensorPower", StreamingTensorPower, dict(n_components=2, batch_size=100, **SMALL, **P),
        kw, "fit")
       for kw in (dict(max_passes=0), dict(max_passes=2), dict(batch_size=400))]  # 400: too few rows
    + [("PrivateTensorCompletion", PrivateTensorCompletion,
        dict(rank=2, perturbation="gradient", epsilon=1.0, value_range=(0, 1)), kw, "fit")
       for kw in BAD_SEEDS + BAD_PRIVACY + [
           dict(rank=0), dict(rank=1.5), dict(decomposition="parafac"), dict(perturbation="laplace"),
           dict(solver="sgd"), dict(solver="als"), dict(batch_size=10), dict(learning_rate=0),
           dict(learning_rate=float("nan")), dict(n_iter=0), dict(reg=-1.0), dict(reg="x"),
           dict(reg_core=-1.0), dict(clip_norm=0), dict(value_range=None), dict(value_range=(1, 0)),
           dict(value_range=(0, np.inf)), dict(value_range="ab"), dict(shape=(3, 3, 3)), dict(tol=-1.0),
           dict(perturbation=None)]]
)


def _data_for(name):
    return (XC, YC) if name == "PrivateTensorCompletion" else (X_ROWS,)


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory):
    """A memory ledger and a file ledger, each holding one earlier spend."""
    from dptensor.accounting import GaussianEvent

    accs = (PrivacyAccountant(100.0),
            PrivacyAccountant(100.0, ledger=tmp_path_factory.mktemp("ledger") / "budget.sqlite"))
    for acc in accs:
        acc.spend(GaussianEvent(20.0), label="an earlier fit")
    return accs


@pytest.mark.parametrize("name,cls,base,bad,method", INVALID,
                         ids=[f"{c[0]}.{c[4]}-{next(iter(c[3].items()))}" for c in INVALID])
def test_invalid_parameters_are_refused_before_any_spend(ledgers, name, cls, base, bad, method):
    """Every invalid parameter raises a clear error naming it, and the ledger is unchanged.

    Before: ``PrivatePCA.fit``/``partial_fit`` recorded the spend and only then validated
    ``random_state`` (``"x"`` or ``-1`` raised after spending), and ``StreamingTensorPower.fit``
    on too few rows spent and left an unusable model.
    """
    key, value = next(iter(bad.items()))
    for acc in ledgers:
        params = base | {"accountant": acc, "random_state": 0} | bad
        before = acc.history()
        with pytest.raises((ValueError, TypeError)) as err:
            getattr(cls(**params), method)(*_data_for(name))
        assert acc.history() == before, f"{name}({key}={value!r}) spent before refusing"
        if key in ("random_state", "epsilon", "delta", "data_norm", "n_components", "method", "beta",
                   "svt_fraction", "rank", "block_size", "max_passes", "value_range", "decomposition"):
            assert key in str(err.value) or (key == "batch_size" and "rows" in str(err.value)), str(err.value)


@pytest.mark.parametrize("name", ["PrivatePCA", "AdaptivePrivatePCA", "PrivateTensorDecomposition",
                                  "StreamingTensorPower", "PrivateTensorCompletion"])
@pytest.mark.parametrize("bad", ["nan", "3d", "empty"])
def test_invalid_data_is_refused_before_any_spend(ledgers, name, bad):
    """Malformed data (NaN, wrong shape, no rows) never costs budget."""
    cls = dict((c[0], (c[1], c[2])) for c in INVALID)[name]
    acc = ledgers[1]
    before = acc.history()
    est = cls[0](**cls[1], accountant=acc, random_state=0)
    if name == "PrivateTensorCompletion":
        X, y = XC.copy(), YC.copy()
        data = {"nan": (X, np.where(np.arange(len(y)) == 3, np.nan, y)), "3d": (X[:, :, None], y),
                "empty": (X[:0], y[:0])}[bad]
    else:
        data = ({"nan": np.where(X_ROWS == X_ROWS[5, 2], np.nan, X_ROWS), "3d": X_ROWS[:, :, None][:, :2],
                 "empty": X_ROWS[:0]}[bad],)
        if name == "PrivateTensorDecomposition" and bad == "3d":
            data = (np.ones((3, 4, 5)),)
    with pytest.raises((ValueError, TypeError)):
        est.fit(*data)
    assert acc.history() == before


# ---------------------------------------------------------------------------------------------
# 7. Reproducible, and never a shared stream
# ---------------------------------------------------------------------------------------------

def _script(acc, seed=11):
    """A session of fits of every estimator, some repeated identically."""
    fits = [
        PrivatePCA(2, method="analyze_gauss", accountant=acc, random_state=seed, **PRIVATE).fit(X_ROWS),
        PrivatePCA(2, method="analyze_gauss", accountant=acc, random_state=seed, **PRIVATE).fit(X_ROWS),
        PrivatePCA(2, method="power", accountant=acc, random_state=seed, **PRIVATE).fit(X_ROWS),
        PrivatePCA(2, block_size=100, accountant=acc, random_state=seed, **PRIVATE).partial_fit(X_ROWS),
        AdaptivePrivatePCA(2, accountant=acc, random_state=seed, **PRIVATE).fit(X_ROWS),
        PrivateTensorDecomposition(2, accountant=acc, random_state=seed, **SMALL, **PRIVATE).fit(X_ROWS),
        StreamingTensorPower(2, batch_size=100, accountant=acc, random_state=seed, **SMALL,
                             **PRIVATE).fit(X_ROWS),
        PrivateTensorCompletion(rank=2, perturbation="gradient", epsilon=2.0, value_range=(0, 1),
                                accountant=acc, random_state=seed).fit(XC, YC),
    ]
    return [np.concatenate([np.ravel(a) for a in (f.factors_ if hasattr(f, "factors_") else [f.components_])])
            for f in fits]


def _spy(monkeypatch):
    """Record the starting state of every spend's noise generator."""
    starts = []
    real = _base.spend_generator

    def spy(*args, **kwargs):
        g = real(*args, **kwargs)
        starts.append(g.bit_generator.state["state"]["state"])
        return g

    monkeypatch.setattr(_base, "spend_generator", spy)
    return starts


@_SMALL_PRIVATE
def test_same_script_same_seed_reproduces_and_no_two_spends_share_a_stream(monkeypatch):
    """The same fits with the same seed under two fresh accountants give identical outputs; within
    one ledger every spend (even an identical refit) draws its own stream.

    Before: the identical refit drew the same noise as the first fit and the ledger composed them
    as two independent releases.
    """
    starts = _spy(monkeypatch)
    first = _script(PrivacyAccountant(100.0))
    n = len(starts)
    second = _script(PrivacyAccountant(100.0))
    assert starts[:n] == starts[n:] and len(set(starts[:n])) == n
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # the identical refit released fresh noise
    _script(PrivacyAccountant(100.0), seed=12)  # another seed: other streams
    assert not set(starts[2 * n:]) & set(starts[:n])


@_SMALL_PRIVATE
def test_a_fixed_seed_repeats_noise_only_for_the_same_fit_of_the_same_data(monkeypatch):
    """Without an accountant a spend has no ledger position: its stream is keyed by the seed and the
    fit's public description. Different estimators, parameters or data shapes never share a stream.

    Two fits with the same seed and the same public description would start from the same
    stream without an accountant or under two fresh accountants (same ledger position), so a
    seeded fit keys its stream by a digest of its data too: only the same fit of the same data
    repeats its noise (tested for every estimator in ``test_workflow_privacy``).
    """
    starts = _spy(monkeypatch)
    pca = dict(method="analyze_gauss", random_state=5, **PRIVATE)
    PrivatePCA(2, **pca).fit(X_ROWS)
    PrivatePCA(2, **pca).fit(_rows(seed=99))       # other data, same shape and description
    PrivatePCA(3, **pca).fit(X_ROWS)               # another parameter
    PrivatePCA(2, **pca | {"epsilon": 1.0}).fit(X_ROWS)
    PrivatePCA(2, **pca).fit(X_ROWS[:-1])          # another shape
    AdaptivePrivatePCA(2, random_state=5, **PRIVATE).fit(X_ROWS)
    PrivateTensorDecomposition(2, random_state=5, **SMALL, **PRIVATE).fit(X_ROWS)
    PrivatePCA(2, **pca | {"random_state": None}).fit(X_ROWS)
    PrivatePCA(2, **pca | {"random_state": None}).fit(X_ROWS)
    assert len(set(starts)) == len(starts)  # other data (the second fit) included
    PrivatePCA(2, **pca).fit(X_ROWS)
    assert starts[-1] == starts[0]  # the same seeded fit of the same data: the same stream
    fresh = [PrivatePCA(2, **pca, accountant=PrivacyAccountant(5.0)).fit(X) for X in (X_ROWS, _rows(seed=99))]
    assert starts[-2] != starts[-1]  # two ledgers, one position: the data tell them apart
    assert not np.allclose(fresh[0].components_, fresh[1].components_)


# ---------------------------------------------------------------------------------------------
# 8. What a plain search releases
# ---------------------------------------------------------------------------------------------

def test_plain_grid_search_scores_are_not_private():
    """A plain ``GridSearchCV`` over private estimators: its fitted models are private, its scores
    are not.

    This documents a limitation, it is not a guarantee: ``cv_results_``, ``best_score_`` and
    ``best_params_`` are computed from the raw values of the validation folds, without noise and
    without any entry in the ledger. Changing one observed value in a validation fold moves
    ``split0_test_score`` while the fitted models and the ledger stay exactly the same. A search
    whose scores and choice are private is what ``dptensor.model_selection`` is for.
    """
    splits = list(KFold(3, shuffle=True, random_state=0).split(XC))
    changed = YC.copy()
    changed[splits[0][1][0]] += 5.0  # one value of the first validation fold

    def model(est, X, y):  # what the fitted candidate released, reported beside its score
        return float(sum(np.sum(F) for F in est.factors_) + np.sum(est.intercept_))

    results, ledgers = [], []
    for y in (YC, changed):
        acc = PrivacyAccountant(20.0)
        est = PrivateTensorCompletion(rank=2, perturbation="input", epsilon=1.0, value_range=(0, 1),
                                      accountant=acc, random_state=0)
        search = GridSearchCV(est, {"rank": [1, 2]}, cv=splits, refit=False,
                              scoring={"mse": "neg_mean_squared_error", "model": model})
        results.append(search.fit(XC, y).cv_results_)
        ledgers.append([(e.label, e.event, e.epsilon) for e in acc.history()])
    assert ledgers[0] == ledgers[1] and len(ledgers[0]) == 6
    # Split 0 trains on the same rows with the same noise: the same released models...
    np.testing.assert_array_equal(results[0]["split0_test_model"], results[1]["split0_test_model"])
    # ...yet its score moved by about 25 / n_test, a function of one raw validation value.
    before, after = results[0]["split0_test_mse"], results[1]["split0_test_mse"]
    assert np.all(np.abs(after - before) > 10.0 / len(splits[0][1]))


# ---------------------------------------------------------------------------------------------
# The record shows what was charged
# ---------------------------------------------------------------------------------------------

DELTA_MISMATCH = [
    lambda **kw: PrivatePCA(2, **kw).fit(X_ROWS),
    lambda **kw: PrivatePCA(2, block_size=100, **kw).partial_fit(X_ROWS),
    lambda **kw: AdaptivePrivatePCA(2, **kw).fit(X_ROWS),
    lambda **kw: PrivateTensorDecomposition(2, **SMALL, **kw).fit(X_ROWS),
    lambda **kw: StreamingTensorPower(2, batch_size=100, **SMALL, **kw).fit(X_ROWS),
    lambda **kw: PrivateTensorCompletion(rank=2, perturbation="gradient", value_range=(0, 1),
                                         **{k: v for k, v in kw.items() if k != "data_norm"}).fit(XC, YC),
]


@_SMALL_PRIVATE
@pytest.mark.parametrize("fit", DELTA_MISMATCH)
def test_a_looser_estimator_delta_is_charged_at_the_accountant_delta(fit):
    """``PrivatePCA(epsilon=1, delta=1e-2)`` under an accountant at delta=1e-5.

    Before: charged epsilon 2.14 while the ledger line read ``eps=1 delta=0.01`` and
    ``privacy_cost_.epsilon`` was 1. Now the entry and ``privacy_cost_`` show the charge, at the
    accountant's delta, and a warning says so.
    """
    acc = PrivacyAccountant(10.0, delta=1e-5)
    with pytest.warns(PrivacyWarning, match="accountant enforces delta=1e-05"):
        est = fit(epsilon=1.0, delta=1e-2, data_norm=B, accountant=acc, random_state=0)
    (entry,) = acc.history()
    assert entry.delta == est.privacy_cost_.delta == 1e-5
    assert entry.epsilon == est.privacy_cost_.epsilon == pytest.approx(acc.spent()[0])
    assert entry.epsilon > 1.5  # looser delta, same noise: more epsilon at the accountant's delta
    assert f"eps={entry.epsilon:.4g} delta=1e-05" in str(acc)


def test_an_int_seed_is_not_saved_with_a_private_model():
    """Before: the int seed was pickled with the model and, with the ledger position and the public
    description, keyed the noise, so anyone holding the file regenerated it and removed it (the
    exact clipped mean, from a private fit's ``mean_``). Now a privately fitted model leaves its seed
    behind: the reloaded copy has ``random_state=None``, and the same attack with the seed it no
    longer has (tried here with the true one, which the file does not hold) is the only way in."""
    from dptensor.mechanisms.randomness import data_digest, fingerprint, spend_generator

    acc = PrivacyAccountant(10.0)
    fitted = PrivatePCA(2, method="analyze_gauss", accountant=acc, random_state=42, **PRIVATE).fit(X_ROWS)
    blob = pickle.dumps(fitted)
    model = pickle.loads(blob)
    assert fitted.random_state == 42 and model.random_state is None  # the live object keeps its seed
    buffer = io.BytesIO()
    joblib.dump(fitted, buffer)
    buffer.seek(0)
    assert joblib.load(buffer).random_state is None and copy.deepcopy(fitted).random_state is None
    # Control: the seed, if it had been saved, regenerates the noise exactly.
    params = {k: v for k, v in model.get_params(deep=False).items()
              if k not in ("accountant", "random_state", "verbose")}
    cost = model.privacy_cost_
    key = fingerprint("PrivatePCA", params, (model.n_samples_, model.n_features_in_), repr(cost.event),
                      cost.delta) + data_digest(X_ROWS)
    rng = spend_generator(42, spend_index=len(model.accountant.history()) - 1, key=key)
    z_mean = model.privacy_cost_.event.events[0].noise_multiplier
    recovered = model.mean_ - gaussian_release(np.zeros(D), 2 * B / N, z_mean, rng)  # the release's noise
    # the clipped mean, to within the release's grid step (2**-30 of the noise scale)
    np.testing.assert_allclose(recovered, _grid_mean(X_ROWS), rtol=0,
                               atol=float(grid_step(z_mean * 2 * B / N)))
    # An unfitted estimator (e.g. sent to a search's worker) keeps its seed: nothing was released.
    assert pickle.loads(pickle.dumps(PrivatePCA(2, random_state=42, **PRIVATE))).random_state == 42


@pytest.mark.parametrize("make", [
    lambda acc: dptensor.PrivatePCA(2, epsilon=5.0, data_norm=1.0, accountant=acc),
    lambda acc: dptensor.AdaptivePrivatePCA(2, epsilon=5.0, data_norm=1.0, accountant=acc),
    lambda acc: dptensor.PrivateTensorDecomposition(1, epsilon=5.0, data_norm=1.0,
                                                    accountant=acc),
])
def test_a_fit_refused_for_its_budget_leaves_the_estimator_unfitted(make):
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted
    acc = dptensor.PrivacyAccountant(epsilon=1.0, delta=1e-5)
    est = make(acc)
    with pytest.raises(dptensor.BudgetExceededError):
        est.fit(np.random.default_rng(0).standard_normal((200, 4)))
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    assert not hasattr(est, "n_features_in_") and acc.spent()[0] == 0.0
