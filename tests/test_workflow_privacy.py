"""Workflow attacks of the second round: folds, floating-point settings, printed output.

Each test reproduces an attack that broke the guarantee without touching a formula, and failed on
the code before its fix.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.model_selection import KFold, cross_validate

from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from expected_warnings import COMPLETION_NOISE, NON_PRIVATE, noise_dominated

# The attacks fit private estimators on small folds: their weaker components are noise, and the
# fits say so.
pytestmark = [*COMPLETION_NOISE, noise_dominated()]

N_FOLDS = 5


def _near_copies(block, seed, scale=1e-9):
    """``N_FOLDS`` copies of one block, each moved by a tiny amount: the folds' training sets
    differ, but their exact statistics nearly agree. Noise shared between folds would make their
    releases nearly agree too; independent noise makes them differ by the noise."""
    g = np.random.default_rng(seed)
    return np.vstack([block + scale * g.standard_normal(block.shape) for _ in range(N_FOLDS)])


def _rows(n=60, d=4, seed=0):
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d)) * np.r_[1.0, 0.5, 0.3, 0.2][:d]
    return _near_copies(X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True)), seed + 1)


def _counts(n=40, d=12, seed=0):
    g = np.random.default_rng(seed)
    C = g.poisson(2.0, size=(n, d)).astype(float)
    copies = np.vstack([C] * N_FOLDS)
    copies[np.arange(N_FOLDS) * n, np.arange(N_FOLDS)] += 1  # one word more in one document of each copy
    return copies


def _completion(seed=0):
    """The same ratings pattern for five groups of users (their positions differ, as public ones
    do), with nearly the same ratings."""
    g = np.random.default_rng(seed)
    X = np.stack(np.unravel_index(g.choice(8 * 6, 30, replace=False), (8, 6)), axis=1)
    y = np.clip(3 + g.normal(size=30), 1, 5)
    blocks = [X + [8 * j, 0] for j in range(N_FOLDS)]
    return np.vstack(blocks), _near_copies(y[:, None], seed + 1)[:, 0]


_CASES = {
    "PCA analyze_gauss": (lambda rs: PrivatePCA(4, epsilon=1.0, data_norm=1.0, method="analyze_gauss",
                                                random_state=rs), _rows, "components_"),
    "PCA power": (lambda rs: PrivatePCA(2, epsilon=1.0, data_norm=1.0, method="power", random_state=rs),
                  _rows, "components_"),
    "AdaptivePrivatePCA": (lambda rs: AdaptivePrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=rs),
                           _rows, "components_"),
    "PrivateTensorDecomposition": (lambda rs: PrivateTensorDecomposition(
        2, epsilon=1.0, data_norm=1.0, n_restarts=3, n_iter=5, random_state=rs), _rows, "components_"),
    "StreamingTensorPower": (lambda rs: StreamingTensorPower(
        2, epsilon=1.0, data_norm=1.0, batch_size=40, n_iter=3, n_restarts=2, random_state=rs),
        _rows, "components_"),
    "PrivateGaussianMixture": (lambda rs: PrivateGaussianMixture(
        2, epsilon=1.0, data_norm=1.0, random_state=rs), _rows, "means_"),
    "PrivateLatentDirichletAllocation": (lambda rs: PrivateLatentDirichletAllocation(
        2, epsilon=1.0, random_state=rs), _counts, ("components_", "alpha_", "m2_eigenvalues_")),
    "PrivateTensorCompletion": (lambda rs: PrivateTensorCompletion(
        epsilon=1.0, value_range=(1, 5), rank=2, shape=(8 * N_FOLDS, 6), random_state=rs), _completion, None),
}

_STATES = {
    "None": lambda: None,
    "int": lambda: 3,
    "Generator": lambda: np.random.default_rng(),          # fresh OS entropy: no user reads it as a seed
    "RandomState": lambda: np.random.RandomState(7),
}


def _released(est, attribute):
    if attribute is None:  # completion: its intercept, offsets and factors
        parts = [est.intercept_, *est.biases_, *est.factors_]
        return np.concatenate([np.ravel(p) for p in parts if p is not None])
    names = (attribute,) if isinstance(attribute, str) else attribute
    return np.concatenate([np.ravel(getattr(est, name)) for name in names]).astype(float)


def _zero_score(est, X, y=None):
    return 0.0


@pytest.mark.parametrize("n_jobs", [1, 2])
@pytest.mark.parametrize("state", list(_STATES))
@pytest.mark.parametrize("case", list(_CASES))
def test_cross_validation_folds_draw_independent_noise(case, state, n_jobs):
    """``cross_validate`` clones the estimator for every fold, and ``clone`` deep-copies a
    Generator: a Generator from fresh OS entropy became a fixed seed shared by the folds, and an
    int seed was one already. Without an accountant, every fold has the same public description,
    so the folds drew the same noise, and two folds' releases differed by exactly the difference
    of their data (PCA's released second moments to 3e-9 against a noise std of 6.5). Here the
    folds' data nearly agree: shared noise would make their releases agree to ~1e-6."""
    make, data, attribute = _CASES[case]
    args = data()
    if case == "PrivateGaussianMixture":
        args = args * 3  # well inside the row bound of the mixture's moments is not needed
    args = args if isinstance(args, tuple) else (args,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cross_validate(make(_STATES[state]()), *args, cv=KFold(N_FOLDS), return_estimator=True,
                             scoring=_zero_score, n_jobs=n_jobs, error_score="raise")
    released = [_released(est, attribute) for est in out["estimator"]]
    gaps = [np.max(np.abs(released[i] - released[j]))
            for i in range(N_FOLDS) for j in range(i + 1, N_FOLDS)]
    assert min(gaps) > 1e-4, f"two folds' releases agree to {min(gaps):.2g}: their noise was shared"


def test_the_same_script_with_the_same_seed_reproduces_its_folds():
    X = _rows()
    runs = [cross_validate(PrivatePCA(2, epsilon=1.0, data_norm=1.0, method="analyze_gauss",
                                      random_state=11), X, cv=KFold(N_FOLDS), return_estimator=True,
                           scoring=_zero_score)["estimator"] for _ in range(2)]
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a.components_, b.components_)


# ---------------------------------------------------------------------------------------------
# The user's floating-point settings
# ---------------------------------------------------------------------------------------------

def _with_tiny_row(sign):
    X = _rows()[:200] * 0.9
    X[17] = sign * 1e-200
    return X


_ROW_ESTIMATORS = {
    "PrivatePCA power": lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, method="power", random_state=0),
    "PrivatePCA analyze_gauss": lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, method="analyze_gauss",
                                                   random_state=0),
    "AdaptivePrivatePCA": lambda: AdaptivePrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0),
    "PrivateTensorDecomposition": lambda: PrivateTensorDecomposition(2, epsilon=1.0, data_norm=1.0,
                                                                     random_state=0),
    "StreamingTensorPower": lambda: StreamingTensorPower(2, epsilon=1.0, data_norm=1.0, batch_size=20,
                                                         n_iter=5, random_state=0),
    "PrivateGaussianMixture": lambda: PrivateGaussianMixture(2, epsilon=1.0, data_norm=1.0,
                                                             random_state=0),
}


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("name", list(_ROW_ESTIMATORS))
def test_a_tiny_row_fits_under_the_callers_raise_setting(name, sign):
    """Under ``np.errstate(all="raise")``, a common debugging setting, one row of +-1e-200 made
    adaptive PCA, the tensor methods and the mixture raise FloatingPointError after the spend
    (an underflow), where the neighbour without it fits: a data-dependent error. Every entry
    point now runs under the library's own settings; the caller's are restored after."""
    with np.errstate(all="raise"):
        _ROW_ESTIMATORS[name]().fit(_with_tiny_row(sign))
        neighbour = _with_tiny_row(sign)
        neighbour[17] = neighbour[18]
        _ROW_ESTIMATORS[name]().fit(neighbour)
        assert np.geterr()["under"] == "raise"


def test_completion_and_the_accountant_work_under_the_callers_raise_setting():
    """Every completion fit failed under ``all="raise"`` before spending, for any data: an
    underflow in the accountant's composition."""
    from dptensor import PrivacyAccountant

    X, y = _completion()
    acc = PrivacyAccountant(10.0)
    with np.errstate(all="raise"):
        PrivateTensorCompletion(epsilon=1.0, value_range=(1, 5), rank=2, accountant=acc,
                                random_state=0).fit(X, y)
        assert 0 < acc.spent()[0] <= 10.0 and acc.remaining()[0] < 10.0


_FITTED_METHODS = ("transform", "inverse_transform", "score", "score_samples", "predict",
                   "predict_proba", "bic", "aic")


@pytest.mark.parametrize("name", list(_ROW_ESTIMATORS))
def test_a_fitted_model_computes_alike_under_the_callers_raise_setting(name):
    """A fitted model's methods ran under the caller's settings: on rows (or projections) of
    1e-320 they raised FloatingPointError under ``all="raise"`` (an underflow), where they
    returned under the default settings. They run under the library's, as fit does."""
    model = _ROW_ESTIMATORS[name]().fit(_rows())
    for method in (m for m in _FITTED_METHODS if hasattr(model, m)):
        tiny = 1e-320 * (model.transform(_rows()[:20]) if method == "inverse_transform"
                         else _rows()[:20])
        expected = getattr(model, method)(tiny)
        with np.errstate(all="raise"):
            got = getattr(model, method)(tiny)
            assert np.geterr()["under"] == "raise"
        np.testing.assert_array_equal(got, expected, err_msg=method)


@NON_PRIVATE
@pytest.mark.parametrize("decomposition", ["cp", "tucker"])
def test_completion_predicts_and_scores_alike_under_the_callers_raise_setting(decomposition):
    """Fitted without privacy on values near 1e-300 (or 1e-320), predict and score raised
    FloatingPointError under ``all="raise"`` (an underflow in the model's products)."""
    X, y = _completion()
    for tiny in (y * 1e-300, y * 1e-320):
        model = PrivateTensorCompletion(2, decomposition=decomposition, random_state=0)
        model.fit(X, tiny)
        expected = model.predict(X), model.score(X, tiny)
        with np.errstate(all="raise"):
            got = model.predict(X), model.score(X, tiny)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]


def test_the_bi_scaler_works_alike_under_the_callers_raise_setting():
    """BiScaler's fit on values near 1e-300 (an underflow in a square) and its transform and
    inverse_transform at 1e-320 raised FloatingPointError under ``all="raise"``."""
    from dptensor.preprocessing import BiScaler

    X, y = _completion()
    X = np.column_stack([X, X[:, 0] % 2])  # three index columns, two slices along axis 2
    for tiny in (y * 1e-300, y * 1e-320):
        expected = BiScaler().fit(X, tiny)
        expected = expected.transform(X, tiny), expected.inverse_transform(X, tiny)
        with np.errstate(all="raise"):
            scaler = BiScaler().fit(X, tiny)
            got = scaler.transform(X, tiny), scaler.inverse_transform(X, tiny)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)


def test_lda_fits_under_the_callers_raise_setting():
    with np.errstate(all="raise"):
        PrivateLatentDirichletAllocation(2, epsilon=1.0, random_state=0).fit(_counts())


@pytest.mark.parametrize("make", [
    lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, block_size=60, random_state=5),
    lambda: StreamingTensorPower(1, epsilon=1.0, data_norm=1.0, batch_size=60, n_iter=5,
                                 random_state=5),
], ids=["PrivatePCA", "StreamingTensorPower"])
def test_seeded_streams_on_different_rows_draw_independent_noise(make):
    """Two streams with one seed share their stream; a block's noise is keyed by every row read up
    to it, so a stream whose later rows differ (by 1e-9) draws other noise from there on, while
    the same rows cut into other chunks draw the same noise."""
    X = _rows(n=60)[:300]
    Y = X.copy()
    Y[200:] += 1e-9
    a, b, c = make(), make(), make()
    for chunk in np.array_split(X, 7):
        a.partial_fit(chunk)
    b.partial_fit(Y)
    c.partial_fit(X)
    np.testing.assert_array_equal(a.components_, c.components_)  # chunking changes nothing
    assert np.max(np.abs(a.components_ - b.components_)) > 1e-4


# ---------------------------------------------------------------------------------------------
# The noise key: an adversarial review's attacks on it
# ---------------------------------------------------------------------------------------------

def test_two_accountants_deltas_do_not_scale_one_noise():
    """One seed, one data set, two fresh accountants whose deltas differ: the noise multipliers
    differ, the ledger position does not, and the stream was keyed by neither, so the two
    releases carried one noise at two scales, which a public ratio of the two cancels (the
    clipped mean came back to 1e-10 against a noise of 0.07)."""
    from dptensor import PrivacyAccountant

    X = _rows()[:200] * 0.9
    means = [PrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=12345,
                        accountant=PrivacyAccountant(10.0, delta=delta)).fit(X).mean_
             for delta in (1e-5, 1e-9)]
    ratio = (means[0] - X.mean(0)) / (means[1] - X.mean(0))
    assert np.std(ratio) > 0.05, ratio  # one noise at two scales has a constant ratio


def test_a_dask_array_is_digested_by_its_content_not_its_name():
    """``from_array(X, name="train")`` and its neighbour under the same name: digested by the
    name, the two fits drew one noise, and their difference was the data's to 1.8e-11."""
    da = pytest.importorskip("dask.array")
    X = _rows()[:200] * 0.9
    Y = X.copy()
    Y[0] = -Y[0]
    fits = [PrivatePCA(2, epsilon=1.0, data_norm=1.0, method="analyze_gauss", random_state=0).fit(
        da.from_array(A, chunks=(50, 4), name="train")) for A in (X, Y)]
    gap = (fits[0].mean_ - fits[1].mean_) - (X.mean(0) - Y.mean(0))
    assert np.max(np.abs(gap)) > 1e-4


def test_a_stream_digest_names_what_it_hashes():
    """A float32 stream fed float64 chunks hashed their raw bytes: two different row sets whose
    bytes agree drew one noise. The stream now computes in its dtype and hashes rows cast to it."""
    from dptensor.mechanisms.randomness import RowDigest

    wide = np.arange(8, dtype=np.float64).reshape(2, 4)
    narrow = wide.view(np.float32).reshape(2, 8)[:, :4].copy()  # other numbers...
    same_bytes = np.frombuffer(wide.tobytes(), dtype=np.float32).reshape(4, 4)  # ...one buffer
    a, b = RowDigest(np.float32, 4), RowDigest(np.float32, 4)
    a.update(wide)
    b.update(same_bytes)
    assert a.words() != b.words()
    c, e = RowDigest(np.float32, 4), RowDigest(np.float32, 4)
    c.update(narrow.astype(np.float64))  # the same numbers held wider: the same rows
    e.update(narrow)
    assert c.words() == e.words()


def test_the_data_digest_reads_any_layout_without_a_copy_and_before_the_spend():
    """An F-ordered array was copied whole after the spend, and a seeded search over an object
    array recorded its spend, then failed to digest it (the budget lost)."""
    import tracemalloc

    from dptensor import PrivacyAccountant
    from dptensor.mechanisms.randomness import data_digest
    from dptensor.model_selection import PrivateGridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer

    X = np.random.default_rng(0).standard_normal((80000, 50))  # 32 MB
    F = np.asfortranarray(X)
    tracemalloc.start()
    assert data_digest(F) == data_digest(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < X.nbytes / 3  # a block of rows at a time
    acc = PrivacyAccountant(100.0)
    search = PrivateGridSearchCV(make_pipeline(Normalizer(), PrivatePCA(1, data_norm=1.0)),
                                 {"privatepca__n_components": [1, 2]}, epsilon=5.0,
                                 accountant=acc, random_state=3)
    search.fit(X[:2000].astype(object))
    assert len(acc.history()) == 1


def test_an_inherited_fit_transform_runs_under_the_library_settings():
    """``fit_transform`` inherited from scikit-learn was not wrapped: a Pipeline calls it, and one
    row of 1e-308 raised FloatingPointError after the spend (an underflow in the transform)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X = _rows()[:200] * 0.9
    X[5] = 1e-308
    for est in (PrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0),
                AdaptivePrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0)):
        with np.errstate(all="raise"):
            est.fit_transform(X)
            make_pipeline(est, FunctionTransformer()).fit(X)


def test_text_in_a_later_chunk_of_a_private_stream_is_a_zero_row():
    """A later chunk holding "n/a" raised after the spend where one holding None was mapped."""
    X = _rows()[:300] * 0.9
    for make in (lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, block_size=100, random_state=0),
                 lambda: StreamingTensorPower(1, epsilon=1.0, data_norm=1.0, batch_size=60, n_iter=4,
                                              random_state=0)):
        bad, zero = X[120:].astype(object), X[120:].copy()
        bad[3, 1], bad[5, 0], zero[[3, 5]] = "n/a", None, 0.0
        a, b = make().partial_fit(X[:120]), make().partial_fit(X[:120])
        a.partial_fit(bad)
        b.partial_fit(zero)
        np.testing.assert_array_equal(a.components_, b.components_)


def test_float32_clipping_stays_inside_the_bound():
    from dptensor.mechanisms import clip_rows

    g = np.random.default_rng(1)
    X = (g.standard_normal((20000, 30)) * g.exponential(50, size=(20000, 1))).astype(np.float32)
    C = clip_rows(X, 1.0).astype(np.float64)
    assert np.sqrt(np.einsum("ij,ij->i", C, C)).max() <= 1.0


class _Repeat:
    """A stateless per-row step that widens each row (repeats its features)."""

    def __init__(self, times=3):
        self.times = times

    def get_params(self, deep=True):
        return {"times": self.times}

    def set_params(self, **params):
        self.times = params.get("times", self.times)
        return self

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return np.tile(np.asarray(X), self.times) / np.sqrt(self.times)

    def fit_transform(self, X, y=None):
        return self.transform(X)

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags, TransformerTags
        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(), requires_fit=False)


def test_a_search_prices_and_sizes_its_runs_at_the_width_its_pipeline_makes(monkeypatch):
    """A stateless step that widened the rows (100 to 50,000 features) made a run's own memory
    check refuse after the search's spend (the search sized its runs at the raw width); and a
    step taking 1 feature to 3 made n_components=2 fail the search's own plan."""
    from sklearn.pipeline import make_pipeline

    from dptensor import MemoryRefusedError, PrivacyAccountant
    from dptensor.model_selection import PrivateGridSearchCV

    X = _rows()[:, :1] * 0.9
    acc = PrivacyAccountant(10.0)
    search = PrivateGridSearchCV(make_pipeline(_Repeat(3), PrivatePCA(2, data_norm=1.0)),
                                 {"privatepca__method": ["power", "analyze_gauss"]}, epsilon=5.0,
                                 accountant=acc, random_state=0)
    search.fit(X)
    assert search.best_estimator_[-1].components_.shape == (2, 3) and len(acc.history()) == 1
    monkeypatch.setattr("dptensor._memory.available_bytes", lambda: 200 << 20)
    wide = PrivateGridSearchCV(make_pipeline(_Repeat(2000), PrivatePCA(2, data_norm=1.0,
                                                                       method="analyze_gauss")),
                               {"privatepca__n_iter": [3, 4]}, epsilon=5.0, accountant=acc,
                               random_state=0)
    with pytest.raises(MemoryRefusedError):
        wide.fit(_rows()[:100])
    assert len(acc.history()) == 1  # refused before its spend
