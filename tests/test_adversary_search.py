"""Adversarial checks of a private search's guarantee: what a pipeline may bring in that learns,
shows or refuses something the noise does not cover, after the spend."""
import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.kernel_approximation import AdditiveChi2Sampler
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Normalizer

from dptensor import PrivacyAccountant, PrivatePCA
from dptensor.model_selection import PrivateGridSearchCV

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(3)
    return np.abs(rng.standard_normal((1500, 4))) / 4


def _pca():
    return PrivatePCA(n_components=2, data_norm=1.0)


def _refused_before_spend(search, X, match, y=None, **fit_params):
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-5)
    search.set_params(accountant=budget)
    with pytest.raises((TypeError, ValueError), match=match):
        search.fit(X, y, **fit_params)
    assert budget.history() == []


def test_a_step_that_refuses_some_rows_is_refused_before_the_spend(X):
    # AdditiveChi2Sampler is stateless but refuses negative values: run after the spend, whether
    # the search raised would tell whether any row is negative, a bit the noise does not cover
    neighbour = X.copy()
    neighbour[7, 0] = -0.1
    pipe = Pipeline([("chi2", AdditiveChi2Sampler()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0,
                                 random_state=0)
    _refused_before_spend(search, neighbour, "steps before the learner")
    # and on rows it takes, the search runs
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-5)
    search.set_params(accountant=budget).fit(X)
    assert len(budget.history()) == 1


def test_a_step_whose_output_the_learner_would_refuse_is_refused_before_the_spend(X):
    class Blowup(TransformerMixin, BaseEstimator):  # stateless, row by row, but overflows
        def fit(self, X, y=None):
            return self

        def transform(self, X):
            with np.errstate(over="ignore"):
                return np.exp(np.asarray(X) * 1e4)

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.requires_fit = False
            return tags

    pipe = Pipeline([("blow", Blowup()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0,
                                 random_state=0)
    _refused_before_spend(search, X, "steps before the learner")


def test_a_step_that_is_no_transformer_is_refused_before_the_spend(X):
    # its tags say it needs no fit, but a pipeline cannot run it before the learner: the
    # pipeline's own refusal came in the first run, after the spend
    pipe = Pipeline([("gp", GaussianProcessRegressor()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "not a transformer")


@pytest.mark.parametrize("where", ["estimator", "grid"])
def test_a_pipeline_memory_is_refused_before_the_spend(X, tmp_path, where):
    # joblib's cache keeps each run's transformed training rows on disk: which candidates ran,
    # and how many runs there were, are secret
    pipe = Pipeline([("norm", Normalizer()), ("pca", _pca())],
                    memory=str(tmp_path) if where == "estimator" else None)
    grid = {"norm__norm": ["l1", "l2", "max"]}
    if where == "grid":
        grid["memory"] = [str(tmp_path)]
    search = PrivateGridSearchCV(pipe, grid, epsilon=2.0, random_state=0)
    _refused_before_spend(search, X, "memory")
    assert list(tmp_path.iterdir()) == []


def test_a_pipeline_transform_input_is_refused_before_the_spend(X):
    pipe = Pipeline([("norm", Normalizer()), ("pca", _pca())], transform_input=["groups"])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "transform_input")


def test_groups_in_a_pipeline_with_metadata_routing_are_refused_before_the_spend(X):
    pipe = Pipeline([("norm", Normalizer()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    with sklearn.config_context(enable_metadata_routing=True):
        _refused_before_spend(search, X, "metadata routing", groups=np.arange(len(X)) // 3)


def test_heads_of_equal_repr_but_different_widths_are_told_apart(X):
    # scikit-learn's repr elides the steps after the first thirty: two heads that give the
    # learner different numbers of features printed alike, and only the first was measured
    steps = [(f"n{i}", Normalizer()) for i in range(40)]
    steps.insert(35, ("chi2", AdditiveChi2Sampler(sample_steps=1)))
    pipe = Pipeline(steps + [("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"chi2__sample_steps": [1, 3]}, epsilon=2.0)
    heads = [repr(pipe.set_params(chi2__sample_steps=s)[:-1]) for s in (1, 3)]
    assert heads[0] == heads[1]  # the premise: they print alike
    _refused_before_spend(search, X, "different numbers of features")


def test_randomized_searches_of_distributions_that_describe_alike_draw_independent_noise(
        X, monkeypatch):
    # a scipy rv_discrete is described (in the key of a seeded spend's noise) by its class alone:
    # two searches sampling different candidates shared one stream, split and score noise, and
    # the difference of their released scores cancelled the noise
    import scipy.stats as st

    from dptensor.model_selection import PrivateRandomizedSearchCV, _search

    splits, split_units = [], _search.split_units

    def recorded(*args, **kwargs):  # the validation rows each search draws
        out = split_units(*args, **kwargs)
        splits.append(out[1])
        return out
    monkeypatch.setattr(_search, "split_units", recorded)

    def search(value):
        law = st.rv_discrete(values=([value], [1.0]))
        return PrivateRandomizedSearchCV(_pca(), {"n_oversamples": law}, n_iter=1,
                                         epsilon=2.0, refit=False, random_state=0).fit(X)
    search(0), search(0), search(3)
    assert np.array_equal(splits[0], splits[1])  # the same search replays its noise
    assert not np.array_equal(splits[0], splits[2])


def test_a_pickled_randomized_search_drops_its_seed_everywhere(X):
    # a pickle drops a private fit's seed (it regenerates the noise): the randomized search also
    # held it in the key of its sampled candidates
    import pickle

    from dptensor.model_selection import PrivateRandomizedSearchCV

    seed = 987654
    search = PrivateRandomizedSearchCV(_pca(), {"n_oversamples": [0, 1, 2]}, n_iter=2,
                                       epsilon=2.0, random_state=seed).fit(X)
    dump = pickle.dumps(search)
    assert b"J" + seed.to_bytes(4, "little") not in dump  # BININT, as pickle writes the int
    again = pickle.loads(dump)
    assert again.random_state is None
    assert again._candidates() == search._candidates()  # its candidates, as a search of None's


def test_a_head_that_cannot_take_a_zero_row_is_priced_at_the_width_it_gives_x(X):
    # a zero row prices the learner's width; a step that refuses it was taken to keep X's
    # width, and candidates were priced (and their events composed) at a width they never saw
    class Doubler(TransformerMixin, BaseEstimator):  # stateless, row by row
        def fit(self, X, y=None):
            return self

        def transform(self, X):
            X = np.asarray(X)
            if not X.any():
                raise ValueError("no zero rows")
            return np.hstack([X, X]) / np.sqrt(2)

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.requires_fit = False
            return tags

    pipe = Pipeline([("double", Doubler()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "features")


def test_a_swapped_in_completion_with_another_shape_is_refused_before_the_spend():
    # X is checked against the template's shape before the spend; a grid that sets 'shape' is
    # refused, but one that swaps in a learner with its own shape refused X in a run
    from dptensor import PrivateTensorCompletion

    rng = np.random.default_rng(5)
    X = np.c_[rng.integers(0, 50, 4000), rng.integers(0, 40, 4000)]
    y = rng.uniform(1.0, 5.0, 4000)

    def completion(shape):
        return PrivateTensorCompletion(value_range=(1.0, 5.0), shape=shape, rank=2)
    pipe = Pipeline([("head", "passthrough"), ("tc", completion((50, 40)))])
    search = PrivateGridSearchCV(pipe, {"tc": [completion((10, 10))]}, epsilon=2.0)
    budget = PrivacyAccountant(epsilon=100.0, delta=1e-5)
    with pytest.raises(ValueError, match="shape"):
        search.set_params(accountant=budget).fit(X, y)
    assert budget.history() == []


def test_functions_as_parameters_are_described_by_name():
    # a seeded spend's noise is keyed by its public description: every function described as
    # 'function' let two searches of steps applying different functions share their noise
    from dptensor.mechanisms.randomness import fingerprint

    assert fingerprint({"f": np.sqrt}) != fingerprint({"f": np.cbrt})  # ufuncs
    assert fingerprint({"f": np.linalg.norm}) != fingerprint({"f": np.linalg.det})
    assert fingerprint({"f": np.sqrt}) == fingerprint({"f": np.sqrt})
    square, cube = (lambda x: x ** 2), (lambda x: x ** 3)
    assert fingerprint({"f": square}) != fingerprint({"f": cube})

    def power(k):  # one factory: its closures differ only in what they captured
        return lambda x: x ** k
    assert fingerprint({"f": power(2)}) != fingerprint({"f": power(3)})
    assert fingerprint({"f": power(2)}) == fingerprint({"f": power(2)})


def test_other_objects_as_parameters_are_described_by_their_attributes():
    # an object that is no estimator, function or frozen distribution was described by its class
    # alone: two seeded searches of grids holding different ones shared their noise
    import scipy.stats as st

    from dptensor.mechanisms.randomness import fingerprint

    def law(values):
        return st.rv_discrete(values=(values, [0.5, 0.5]))
    assert fingerprint({"g": [law([1, 2])]}) != fingerprint({"g": [law([1, 3])]})
    assert fingerprint({"g": [law([1, 2])]}) == fingerprint({"g": [law([1, 2])]})
    loop = type("Loop", (), {})()
    loop.me = loop  # a cycle ends at a depth, described alike every time
    assert fingerprint({"g": loop}) == fingerprint({"g": loop})


def test_a_head_that_changes_the_number_of_rows_is_refused_before_the_spend(X):
    # one unit must stay one row: a step that repeats rows (or drops some) gives one unit
    # several rows in the learner's fit, whose guarantee covers one
    class Repeat(TransformerMixin, BaseEstimator):  # stateless, but not one row a row
        def fit(self, X, y=None):
            return self

        def transform(self, X):
            return np.repeat(np.asarray(X), 2, axis=0)

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.requires_fit = False
            return tags

    pipe = Pipeline([("repeat", Repeat()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "rows")


def test_a_step_that_says_it_needs_no_fit_but_learns_is_refused_before_the_spend(X):
    # its tags are taken at their word, but what it gives a part of X must be what it gives
    # those rows in all of X: a step that learns (here the columns' means) fails that
    class Centre(TransformerMixin, BaseEstimator):  # says stateless; centres on its fit's rows
        def fit(self, X, y=None):
            self.mean_ = np.asarray(X).mean(axis=0)
            return self

        def transform(self, X):
            return np.asarray(X) - self.mean_

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.requires_fit = False
            return tags

    pipe = Pipeline([("centre", Centre()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "row by row")


@pytest.mark.parametrize("in_pipeline", [False, True])
def test_a_search_whose_learner_needs_y_is_refused_without_it_before_the_spend(in_pipeline):
    from dptensor import PrivateTensorCompletion

    rng = np.random.default_rng(6)
    X = np.c_[rng.integers(0, 50, 4000), rng.integers(0, 40, 4000)]
    est = PrivateTensorCompletion(value_range=(1.0, 5.0), shape=(50, 40), rank=2)
    if in_pipeline:
        est = Pipeline([("head", "passthrough"), ("tc", est)])
    grid = {("tc__" if in_pipeline else "") + "reg": [0.1, 1.0]}
    _refused_before_spend(PrivateGridSearchCV(est, grid, epsilon=2.0), X, "needs y")


def test_heads_are_checked_with_y_as_the_runs_fit_them(X):
    class NoTargets(TransformerMixin, BaseEstimator):  # stateless, but refuses a y
        def fit(self, X, y=None):
            if y is not None:
                raise ValueError("no y here")
            return self

        def transform(self, X):
            return np.asarray(X)

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.requires_fit = False
            return tags

    pipe = Pipeline([("plain", NoTargets()), ("pca", _pca())])
    search = PrivateGridSearchCV(pipe, {"pca__centered": [False, True]}, epsilon=2.0)
    _refused_before_spend(search, X, "steps before the learner", y=np.zeros(len(X)))


def test_an_expected_number_of_runs_beyond_max_runs_is_refused_before_the_spend(X):
    # n_runs=1e15 was priced and charged, then hung building its list of runs after the spend
    from dptensor.model_selection._search import MAX_RUNS

    for n_runs in (1e15, 10 * MAX_RUNS):
        search = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), {"n_components": [1, 2]},
                                     epsilon=2.0, n_runs=n_runs)
        _refused_before_spend(search, X, r"n_runs .* must be a number in \[1, 100000\]")
    cost = PrivateGridSearchCV(PrivatePCA(data_norm=1.0), {"n_components": [1, 2]}, epsilon=2.0,
                               n_runs=MAX_RUNS).privacy_cost(*X.shape)
    assert cost.epsilon <= 2.0
