"""Private hyperparameter search: scikit-learn's interface, one accounted (epsilon, delta)."""
from __future__ import annotations

import math
import numbers
import os
from copy import deepcopy
from dataclasses import dataclass

import numpy as np
import sklearn
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import ParameterGrid, ParameterSampler
from sklearn.pipeline import Pipeline
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _get_feature_names, check_is_fitted

from .._base import FitData, FitPlan, PrivateEstimatorMixin
from .._guards import say as _say, silenced
from .._memory import FLOAT, prechecked
from ..algorithms.exact import exact_gaussian_release
from ..mechanisms.randomness import keyed_generator, rekey_words
from ._parallel import in_parallel
from ._search_doc import SEARCH_DOC as _SEARCH_DOC
from .._validation import check_groups, check_positive_int
from ..exceptions import real_scalar
from ._candidates import (check_candidate_unit, check_candidates, check_heads, check_learner,
                          check_n_iter, learner_width)
from ._accountants import accountant_keys, find_accountants, without_accountants
from ._selection import calibrate_search, check_distribution, draw_n_runs
from ._units import (as_units, check_sparse_units, check_units, public_overrides,
                     score_statistic, search_tag, split_units, units_nbytes, user_codes)

__all__ = ["PrivateGridSearchCV", "PrivateRandomizedSearchCV", "MAX_SCORE_NOISE", "MAX_RUNS"]

#: A validation part is too small when the released score's noise std would exceed this share of
#: one unit's score range (``z * range / n_val > MAX_SCORE_NOISE * range``): the scores would then
#: say little about the candidates, and the search refuses before spending.
MAX_SCORE_NOISE = 0.1

#: The largest expected number of runs: the runs are drawn and made after the spend, and a
#: search of more would not finish (n_runs=1e15 was charged, then hung building its list).
MAX_RUNS = 1e5

def _delegate(method):
    def check(self):
        _check_refit(self, method)
        est = self.best_estimator_ if hasattr(self, "best_estimator_") else self.estimator
        return hasattr(est, method)
    return check


def _check_refit(search, method):
    """scikit-learn's answer for a search that did not refit: the method does not exist, and
    the message says why and what to do."""
    if not search.refit:
        raise AttributeError(
            f"This {type(search).__name__} has refit=False: {method} is available only after "
            "refitting on the best parameters. Set refit=True, or fit an estimator on "
            "best_params_ yourself (a new private fit, with its own budget)")


@dataclass(frozen=True)
class SearchSettings:
    """What a search decides before its spend, from public values: the learner (``prefix`` its
    parameters' prefix in a pipeline), the checked ``candidates``, the training and validation
    sizes, each candidate's ``epsilon`` at ``delta``, the law of the number of runs
    (``distribution``, ``mean``), the whole search's ``event`` and the learner's input ``width``."""

    prefix: str
    learner: object
    candidates: list
    n_train: int
    n_val: int
    epsilon: float
    delta: float
    distribution: str
    mean: float
    event: object
    width: int


class _PrivateSearch(PrivateEstimatorMixin, MetaEstimatorMixin, BaseEstimator):
    """What the private grid and randomized searches share; subclasses give the candidates."""
    _sparse_as_dense = True  # sparse X keys the noise as its dense rows: the same search

    def _candidates(self) -> list[dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ checks (no data, no spend)
    def _learner(self):
        """``(prefix, learner)``: the dptensor estimator, alone or the last step of a pipeline."""
        return check_learner(self.estimator)

    def _checked_candidates(self, prefix) -> list[dict]:
        return check_candidates(self.estimator, self._candidates(), prefix, self._learner()[1])

    def _target(self):
        epsilon, delta = self._privacy_target()
        if not math.isfinite(epsilon):
            raise ValueError(f"epsilon must be finite for a private search, got {self.epsilon!r}; "
                             "use scikit-learn's GridSearchCV for a search without privacy")
        return epsilon, delta

    def _n_runs(self, n_candidates) -> float:
        mean = n_candidates if self.n_runs is None else real_scalar(self.n_runs)
        if isinstance(mean, bool) or not isinstance(mean, numbers.Real) \
                or not (math.isfinite(mean) and 1 <= mean <= MAX_RUNS):
            # beyond MAX_RUNS the runs drawn after the spend would not finish (or fit in memory)
            raise ValueError(f"n_runs (the expected number of runs; None: one per candidate) "
                             f"must be a number in [1, {MAX_RUNS:g}], got {mean!r}")
        return float(mean)

    def _sizes(self, n_samples):
        frac = real_scalar(self.validation_fraction)
        if isinstance(frac, bool) or not isinstance(frac, numbers.Real) or not 0 < frac < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {frac!r}")
        n_val = int(round(frac * n_samples))
        if n_val < 1 or n_samples - n_val < 1:
            raise ValueError(f"n_samples = {n_samples} is too few (the units split: rows, "
                             f"groups when searched by group, users by user): validation_fraction="
                             f"{frac:g} leaves an empty part ({n_samples - n_val} to train, "
                             f"{n_val} to score)")
        return n_samples - n_val, n_val

    def _candidate(self, prefix, params, epsilon, delta, seed, overrides=()):
        # the grid's values cloned too (as GridSearchCV does): setting a candidate's epsilon
        # must not change an estimator the user put in the grid
        est = clone(self.estimator).set_params(**clone(params, safe=False))
        est.set_params(**{prefix + "epsilon": epsilon, prefix + "delta": delta,
                          prefix + "random_state": seed, **dict(overrides)})
        est = without_accountants(est)
        # a run spends the plan privacy_cost priced, from the sizes alone: an estimator's "auto"
        # that may read more of the data (completion's public positions) is held to that plan
        (est[-1] if isinstance(est, Pipeline) else est)._priced_by_sizes = True
        return est

    def _charged_accountant(self):
        """The one accountant the search charges: its own, or the one held anywhere in what it
        searches (the estimator, a step, an estimator held as a parameter, a grid value). Two
        different ones are refused, before any spend."""
        found = {}
        for where, accountant in self._held_accountants():
            found.setdefault(id(accountant), (where, accountant))
        own = self.accountant
        others = [where for where, accountant in found.values() if accountant is not own]
        if len(others) > (own is None):
            first = "the search's accountant" if own is not None else others.pop(0)
            raise ValueError(f"{first} and {others[0]} are different accountants: a search is one "
                             "spend, recorded with one accountant. Give the same PrivacyAccountant "
                             "everywhere, or one to the search (accountant=...) and none elsewhere")
        return own if own is not None else next((a for _, a in found.values()), None)

    def _held_accountants(self):
        yield from find_accountants(self.estimator, "estimator")
        for params in self._candidates():
            for key, value in params.items():
                yield from find_accountants(value, f"the grid's {key!r}")

    def _settings(self, n_samples, n_features, grouped=False) -> "SearchSettings":
        """Everything the search decides and prices before the first fit (no data read); each
        candidate priced by its own preview, of a fit given groups when searched by group."""
        prefix, learner = self._learner()
        candidates = self._checked_candidates(prefix)
        epsilon, delta = self._target()
        if self.refit not in (True, False):
            raise ValueError(f"refit must be True or False, got {self.refit!r}")
        if self.n_jobs is not None and (isinstance(self.n_jobs, bool) or not isinstance(
                self.n_jobs, numbers.Integral) or self.n_jobs == 0):
            raise ValueError(f"n_jobs must be None or a nonzero int, got {self.n_jobs!r}")
        mean = self._n_runs(len(candidates))
        shapes = check_distribution(self.distribution, mean)
        n_train, n_val = self._sizes(n_samples)
        width = learner_width(self.estimator, candidates, n_features)

        def learner_of(est):
            return est[-1] if isinstance(est, Pipeline) else est
        by_group = {"groups": True} if grouped else {}
        searched = "group of rows" if grouped else search_tag(learner).unit

        # each candidate built once: a clone per candidate and per round of the calibration's
        # root search was most of a large randomized search's preview
        learners = [learner_of(self._candidate(prefix, params, epsilon, delta, 0))
                    for params in candidates]
        if search_tag(learner).indices and any(repr(est.shape) != repr(learner.shape)
                                               for est in learners):
            # X is checked against the estimator's shape before the spend (and by user its
            # first side counts the units): a candidate's own (set by the grid, or on a learner
            # the grid swaps in) could refuse X after it
            raise ValueError("the grid sets 'shape' (the index space X is checked against "
                             "before the spend), or swaps in a learner with another: set it on "
                             "the estimator")

        def events_at(e):
            events = []
            for params, est in zip(candidates, learners):
                est.epsilon = e  # what set_params does, without its signature inspection
                for n in ((n_train, n_samples) if self.refit else (n_train,)):
                    cost = est.privacy_cost(n, width, **by_group)
                    if not cost.private:
                        raise ValueError(f"candidate {params} has no finite privacy "
                                         f"cost ({cost.event}): a private search "
                                         "needs every candidate to be private")
                    check_candidate_unit(params, cost.unit, searched)
                    events.append(cost.event)
            return events

        e, name, event = calibrate_search(events_at, epsilon, delta, mean, shapes, bool(self.refit))
        # the score's noise std, in units of one unit's score range
        span_noise = event.score.noise_multiplier / n_val
        if span_noise > MAX_SCORE_NOISE:
            need = math.ceil(event.score.noise_multiplier / MAX_SCORE_NOISE)
            raise ValueError(f"the validation part ({n_val} units) is too small to "
                             "score privately: the score's noise std would be "
                             f"{span_noise:.3g} of one unit's score range (at most "
                             f"{MAX_SCORE_NOISE:g}); it needs at least {need} units. "
                             "Raise validation_fraction or epsilon, or pass more data")
        return SearchSettings(prefix=prefix, learner=learner, candidates=candidates,
                              n_train=n_train, n_val=n_val, epsilon=e, delta=delta,
                              distribution=name, mean=mean, event=event, width=width)

    def _plan(self, shape, overrides=None, nbytes=None, n_rows=None, names=None,
              grouped=False) -> FitPlan:
        """The search's :class:`~dptensor._base.FitPlan`: its one event (the candidates, the
        score, the law of the number of runs, the refit), priced from public values: the units'
        shape (groups, when searched by group; the public ``shape[0]`` users, by user), the
        public overrides (a completion's index space), the units' bytes and rows (``names``, the
        columns, price nothing)."""
        n_samples, n_features = int(shape[0]), int(shape[1]) if len(shape) > 1 else 1
        settings = self._settings(n_samples, n_features, grouped)
        overrides = {} if overrides is None else overrides
        nbytes = n_samples * n_features * FLOAT if nbytes is None else nbytes
        return FitPlan(event=settings.event, delta=settings.delta,
                       noise_multiplier=settings.event.score.noise_multiplier,
                       n_queries=len(settings.candidates), calibration="exact",
                       memory=self._memory(settings, (n_rows or n_samples, n_features), nbytes,
                                           overrides),
                       settings=settings,
                       unit="group of rows" if grouped else search_tag(settings.learner).unit)

    # ------------------------------------------------------------------ public
    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The search's cost on ``n_samples`` units of ``n_features`` columns, before any data.

        Returns a :class:`~dptensor.PrivacyCost` whose ``event`` is the
        :class:`~dptensor.accounting.PrivateSelectionEvent` a ``fit`` would record (candidates,
        score, law of the number of runs, refit) and whose ``noise_multiplier`` is the score's.
        Nothing is read or spent. ``groups=True``: preview a search given groups; ``n_samples`` is
        then the number of groups (each candidate priced as a fit given groups, the unit a group
        of rows). A search by user (a user-level completion) counts users, with no flag.
        """
        if not isinstance(groups, (bool, np.bool_)):
            raise TypeError("privacy_cost's groups is a flag (True: preview a search given "
                            "groups; n_samples is then the number of groups), not labels")
        if groups:
            self._check_groupable(self._learner()[1])
        shape = check_positive_int(n_samples, "n_samples"), check_positive_int(n_features,
                                                                               "n_features")
        return self._preview_plan(self._plan(shape, grouped=bool(groups)))

    def fit(self, X, y=None, *, groups=None):
        """Run the private search on ``X`` (rows, or index tuples of observed entries) and ``y``.

        ``groups`` (one label a row; rows sharing one are one person): the unit becomes a group
        of rows. The split keeps each group whole, each candidate is fitted with the training
        rows' groups, and the released score is the mean over validation groups of each group's
        mean score (one value in the score's range per group), over the public number of groups;
        ``privacy_cost(n_samples, ...)`` then counts groups. Only estimators whose ``fit`` bounds a
        group and whose ``score`` is bounded (the PCAs, the tensor estimators) can be searched so;
        others are refused before any spend.

        A user-level completion (``PrivateTensorCompletion(privacy_unit="user")``, its public
        ``shape`` set) is searched by user, with no ``groups``: a user is mode 0 of the index
        tuples and their number is ``shape[0]`` (``privacy_cost(n_samples, ...)`` counts users).
        The split keeps each user's ratings on one side; each validation user's ratings are split
        by a public keyed hash of their positions into a history and targets, her targets
        predicted from her own history (``predict(X, history=...)``), and her score is her mean
        per-rating score in its range (``-1`` with no target); the released score is the mean over
        the ``shape[0]`` minus training users, with one user's score range as its sensitivity.

        Prices the whole search, records it as one event with the accountant (the search's, or the
        one found in the estimator: refused with :class:`~dptensor.BudgetExceededError` before
        any fit if over budget), then runs it, silenced: only the search's own messages print.
        """
        return self._fit_private(X, y, groups)

    def _check_data(self, X, y=None, groups=None) -> FitData:
        names = _get_feature_names(X)  # a DataFrame's columns: public, the refit gets them back
        X, y = as_units(X, y, alone=not isinstance(self.estimator, Pipeline))
        if y is not None and len(y) != X.shape[0]:
            raise ValueError(f"y has {len(y)} values but X has {X.shape[0]} units")
        prefix, learner = self._learner()
        check_sparse_units(self.estimator, learner, X, groups)
        check_units(learner, X, y)
        overrides = public_overrides(prefix, learner, X)
        public = dict(overrides=overrides, nbytes=units_nbytes(X), n_rows=X.shape[0], names=names)
        if search_tag(learner).users:  # the units: the public shape[0] users, each row's its code
            codes, n_users = user_codes(learner, X, groups, isinstance(self.estimator, Pipeline))
            return FitData(arrays=(X, y), shape=(n_users, X.shape[1]), extra=codes,
                           public=public)
        if groups is None:
            return FitData(arrays=(X, y), shape=X.shape, public=public)
        self._check_groupable(learner)
        if isinstance(self.estimator, Pipeline) and sklearn.get_config()["enable_metadata_routing"]:
            raise ValueError("a private search with groups routes them to the pipeline's last "
                             "step, which scikit-learn's metadata routing (enabled) refuses: "
                             "search with groups outside config_context(enable_metadata_routing="
                             "True)")
        codes, n_groups = check_groups(groups, X.shape[0])
        # the codes are digested with the rows (a seeded search's noise is keyed by what it
        # reads): two groupings of one X score differently and must not share the scores' noise
        return FitData(arrays=(X, y, codes), shape=(n_groups,) + X.shape[1:], extra=codes,
                       public={**public, "grouped": True})

    @staticmethod
    def _check_groupable(learner):
        if not search_tag(learner).groups:
            raise ValueError(f"{type(learner).__name__} cannot be searched by group: its fit "
                             "does not bound a group of rows. Search without groups, or search "
                             "an estimator whose fit takes them (PrivatePCA, AdaptivePrivatePCA, "
                             "PrivateTensorDecomposition, StreamingTensorPower)")

    def _before_spend(self, data, plan):
        # a pipeline's stateless steps run on all of X, as the runs will run them on its parts:
        # a step (or the learner's fit after it) that refuses some rows is refused here
        X, y = data.arrays[:2]
        check_heads(self.estimator, plan.settings.candidates, X, y,
                    lambda Xt: check_units(plan.settings.learner, Xt, y), plan.settings.width)
        return data

    def _spend_plan(self, plan, data):
        settings = plan.settings
        if self.verbose:  # public: the plan's own numbers, before the spend
            cost = self._preview_plan(plan)
            _say(f"[{type(self).__name__}] {len(settings.candidates)} candidates, "
                 f"{settings.mean:g} expected runs ({settings.distribution}), each candidate at "
                 f"epsilon={settings.epsilon:.4g}; the whole search"
                 f"{' and refit' if self.refit else ''} costs epsilon={cost.epsilon:.4g} at "
                 f"delta={cost.delta:g}")
        return super()._spend_plan(plan, data)

    def _release(self, data, plan, rng):
        (X, y), settings, overrides = data.arrays[:2], plan.settings, data.public["overrides"]
        names = data.public["names"]
        codes, users = data.extra, search_tag(settings.learner).users
        # Runs and refit run user code (a step's verbose, an estimator or a library that prints,
        # warns or logs). A run's output would count the runs, whose number is secret, and tell
        # what each saw; the refit's would tell what the data made it do (a warning, a value
        # printed). So none of it reaches the user; the refit's existence is public (refit=True).
        # The worst candidate's memory was checked before the spend: a run's own check would
        # refuse after it (and how many runs there were is secret).
        with silenced(), prechecked():
            best_index, best_score = self._run(X, y, settings, overrides, rng, codes)
            best_params = settings.candidates[best_index]
            if self.refit:
                est = self._candidate(settings.prefix, best_params, settings.epsilon,
                                      settings.delta, _seed(rng), overrides)
                # on the columns as the user named them (the same numbers: the same fit), so
                # the model has their feature_names_in_ and checks them when it transforms
                rows = X if names is None else _frame(X, names)
                self.best_estimator_ = _fit_run(est, rows, y, np.arange(X.shape[0]),
                                                None if users else codes)
        if self.refit:
            # The refit's seed was drawn from the search's own stream: with it (and the public
            # description) anyone regenerates the refit's noise, so it never stays on the model.
            # The accountants taken off for the search go back: a later fit is charged to them.
            taken = accountant_keys(clone(self.estimator).set_params(**best_params))
            self.best_estimator_.set_params(**{settings.prefix + "random_state": None, **taken})
        self.best_index_ = best_index
        self.best_params_ = dict(best_params)
        self.best_score_ = best_score
        self.candidate_epsilon_ = settings.epsilon
        self.distribution_ = settings.distribution
        self.cv_results_ = _results(settings.candidates, best_index, best_score)
        self.n_splits_ = 1  # one train/validation split (see the class Notes)
        if self.refit:
            self._apply_output_config()
        if self.verbose:
            _say(f"[{type(self).__name__}] chose {self.best_params_} (released score "
                 f"{best_score:.4g})")

    def _memory(self, settings, shape, nbytes, overrides):
        """``(bytes, advice)``: the largest peak of any candidate's fit (on the training part, and
        on all the ``n_units`` for the refit), each estimated by the learner from public
        quantities, plus the search's own copies of the parts (``nbytes`` the units')."""
        n_units, n_features = shape
        sizes = (settings.n_train, n_units) if self.refit else (settings.n_train,)
        if search_tag(settings.learner).users:  # n_train counts users; a fit's estimate, entries
            sizes = (n_units,)
        worst, advice = 0, ""
        for params in settings.candidates:
            est = self._candidate(settings.prefix, params, settings.epsilon, settings.delta, 0,
                                  overrides)
            learner = est[-1] if isinstance(est, Pipeline) else est
            # a learner of the user's may have no estimate
            estimate = getattr(learner, "_memory_estimate", None)
            for n in sizes if estimate is not None else ():
                need, why = estimate(n, settings.width)
                if need > worst:
                    worst, advice = need, f"The largest is candidate {params}: {why}"
        # its own copies of the parts, and the pipeline's transformed parts; n_jobs runs at once
        # each hold a fit and a copy of the parts (a bound whatever the number of runs drawn)
        jobs = self._n_workers()
        transformed = 2 * n_units * settings.width * FLOAT if settings.width != n_features else 0
        return jobs * (worst + transformed) + (1 + jobs) * nbytes, advice

    def _run(self, X, y, settings, overrides, rng, codes=None):
        """The selection: ``(best index, released score)``. Everything it draws comes from ``rng``,
        the spend's generator, in one fixed order before any run: the split, the number of runs,
        then each run's candidate, its fit's seed and its score's noise generator (128 bits of
        ``rng`` keyed by the run's position). So the runs' noise is the same whether they run one
        after another or ``n_jobs`` at a time, no two runs share a stream, and the best run (the
        first of the highest released scores) is the same. Only the best run leaves. A search by
        user (``codes`` each row's user) draws after the split the public seed of its validation
        users' history/target hash."""
        users = search_tag(settings.learner).users
        train, val, val_codes = split_units(rng, settings.n_train + settings.n_val,
                                            settings.n_train, codes)
        target_seed = _seed(rng) if users else None
        event = settings.event
        n_runs = draw_n_runs(event.shape, event.mean, rng)
        # each run's noise generator drawn here in order (its words), built when it runs: a
        # tuple a run, not a generator's state, however many runs were drawn
        runs = [(int(rng.integers(len(settings.candidates))), _seed(rng), (i, rekey_words(rng)))
                for i in range(n_runs)]
        parts = (X, y, train, val, val_codes, None if users else codes, target_seed)

        def one(run):
            index, seed, (i, words) = run
            return self._one_run(parts, settings, overrides, index, seed,
                                 keyed_generator(words, (i,)))
        scores = in_parallel(one, runs, self._n_workers(n_runs))
        best_index, best_score = None, -math.inf
        for (index, _, _), score in zip(runs, scores):
            if score > best_score:
                best_index, best_score = index, score
        if best_index is None:  # no run (a Poisson law drew 0): a data-independent choice
            return int(rng.integers(len(settings.candidates))), math.nan
        return best_index, best_score

    def _n_workers(self, n_runs=None) -> int:
        """Threads for the runs: ``n_jobs`` (``None``: 1; -1: every CPU, -2: all but one, as
        joblib counts), at most one a run."""
        if self.n_jobs is None:
            return 1
        jobs = self.n_jobs if self.n_jobs > 0 else (os.cpu_count() or 1) + 1 + self.n_jobs
        return max(1, int(jobs) if n_runs is None else min(int(jobs), n_runs))

    def _one_run(self, parts, settings, overrides, index, seed, noise_rng) -> float:
        """One run: candidate ``index`` fitted privately (``seed``) on the training part, its
        score on the validation part released with ``noise_rng``'s noise."""
        X, y, train, val, val_codes, codes, target_seed = parts
        est = self._candidate(settings.prefix, settings.candidates[index], settings.epsilon,
                              settings.delta, seed, overrides)
        est = _fit_run(est, X, y, train, codes)
        learner, Xv = est, X[val]
        if isinstance(est, Pipeline):
            learner, Xv = est[-1], est[:-1].transform(Xv)
        mean, sensitivity = score_statistic(learner, Xv, None if y is None else y[val],
                                            val_codes, settings.n_val, target_seed)
        return float(exact_gaussian_release(mean, sensitivity,
                                            settings.event.score.noise_multiplier, noise_rng))

    # ------------------------------------------------------------------ delegation
    @available_if(_delegate("predict"))
    def predict(self, X):
        """``best_estimator_.predict(X)``."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    @available_if(_delegate("transform"))
    def transform(self, X):
        """``best_estimator_.transform(X)``."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.transform(X)

    @available_if(_delegate("transform"))
    def fit_transform(self, X, y=None, **fit_params):
        """``fit(X, y)``, then ``best_estimator_.transform(X)``."""
        return self.fit(X, y, **fit_params).transform(X)

    @available_if(_delegate("inverse_transform"))
    def inverse_transform(self, X):
        """``best_estimator_.inverse_transform(X)``."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.inverse_transform(X)

    @available_if(_delegate("transform"))
    def set_output(self, *, transform=None):
        """scikit-learn's ``set_output``: the container ``transform`` returns (``"pandas"``,
        ``"polars"``, ``"default"``), set on ``best_estimator_`` now and after every refit."""
        if transform is not None:
            self._sklearn_output_config = {"transform": transform}  # kept by clone
            self._apply_output_config()
        return self

    def _apply_output_config(self):
        transform = getattr(self, "_sklearn_output_config", {}).get("transform")
        if transform is not None and hasattr(self, "best_estimator_"):
            self.best_estimator_.set_output(transform=transform)

    @available_if(_delegate("get_feature_names_out"))
    def get_feature_names_out(self, input_features=None):
        """``best_estimator_.get_feature_names_out(input_features)``."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.get_feature_names_out(input_features)

    @property
    def feature_names_in_(self):
        """The column names of the DataFrame fitted on, from ``best_estimator_`` (as
        scikit-learn's searches); ``AttributeError`` when it had none."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.feature_names_in_

    def score(self, X, y=None):
        """``best_estimator_.score(X, y)``: not private (it reads ``X`` and ``y`` exactly)."""
        _check_refit(self, "score")
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score(X, y) if y is not None else self.best_estimator_.score(X)

    @property
    def n_features_in_(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.n_features_in_

    def __sklearn_tags__(self):
        # scikit-learn's searches take their searched estimator's kind and input tags; a search
        # of a transformer also takes its transformer tags, since it delegates transform
        tags = super().__sklearn_tags__()
        sub = get_tags(self.estimator)
        tags.estimator_type = sub.estimator_type
        tags.classifier_tags = deepcopy(sub.classifier_tags)
        tags.regressor_tags = deepcopy(sub.regressor_tags)
        tags.transformer_tags = deepcopy(sub.transformer_tags)
        tags.target_tags.required = sub.target_tags.required
        tags.input_tags = deepcopy(sub.input_tags)  # sparse rows split as dense rows do
        return tags


class PrivateGridSearchCV(_PrivateSearch):
    __doc__ = ("""Private search over a hyperparameter grid, with scikit-learn's interface.
""" + _SEARCH_DOC.format(grid="""param_grid : dict or list of dicts
        As in ``GridSearchCV``: every combination is a candidate."""))

    def __init__(self, estimator, param_grid, *, epsilon, delta=None, n_runs=None,
                 validation_fraction=0.2, distribution="auto", refit=True, accountant=None,
                 random_state=None, n_jobs=None, verbose=0):
        self.estimator = estimator
        self.param_grid = param_grid
        self.epsilon = epsilon
        self.delta = delta
        self.n_runs = n_runs
        self.validation_fraction = validation_fraction
        self.distribution = distribution
        self.refit = refit
        self.accountant = accountant
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _candidates(self):
        return list(ParameterGrid(self.param_grid))


class PrivateRandomizedSearchCV(_PrivateSearch):
    __doc__ = ("""Private search over ``n_iter`` sampled settings, with scikit-learn's interface.

    The ``n_iter`` candidates are drawn first from ``param_distributions`` with
    ``ParameterSampler``, seeded by ``random_state``'s entropy (public, independent of the data);
    the search then runs as :class:`PrivateGridSearchCV` over them.
""" + _SEARCH_DOC.format(grid="""param_distributions : dict or list of dicts
        As in ``RandomizedSearchCV``: lists are sampled uniformly, distributions by ``rvs``.
    n_iter : int, default=10
        Number of candidates sampled."""))

    def __init__(self, estimator, param_distributions, *, n_iter=10, epsilon, delta=None,
                 n_runs=None, validation_fraction=0.2, distribution="auto", refit=True,
                 accountant=None, random_state=None, n_jobs=None, verbose=0):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_iter = n_iter
        self.epsilon = epsilon
        self.delta = delta
        self.n_runs = n_runs
        self.validation_fraction = validation_fraction
        self.distribution = distribution
        self.refit = refit
        self.accountant = accountant
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _public_description(self):
        # the sampled candidates too: a distribution may be described by its class alone (a
        # scipy rv_discrete), and two searches sampling different candidates would share noise
        return {**super()._public_description(), "candidates": self._candidates()}

    def _candidates(self):
        # Sampled once per search object and seed, so privacy_cost and fit see the same candidates.
        n_iter = check_n_iter(self.n_iter)
        key = (repr(self.param_distributions), n_iter, _public_seed(self.random_state))
        if getattr(self, "_sampled_key", None) != key:
            seed = key[2] if key[2] is not None else int(np.random.SeedSequence().entropy % 2**32)
            self._sampled = list(ParameterSampler(self.param_distributions, n_iter,
                                                  random_state=seed))
            self._sampled_key = key
        return self._sampled

    def __getstate__(self):
        state = super().__getstate__()
        key = state.get("_sampled_key")
        if state.get("random_state") is None and key is not None and key[2] is not None:
            # the seed is dropped (it regenerates the noise), and so is its copy in the key: the
            # reloaded search keeps its candidates, as a search of random_state=None does
            state["_sampled_key"] = key[:2] + (None,)
        return state


def _public_seed(random_state):
    return int(random_state) % 2**32 if isinstance(random_state, numbers.Integral) else None


def _seed(rng) -> int:
    """A fresh 63-bit seed for one candidate's fit, from the search's own generator."""
    return int(rng.integers(2**63 - 1))


def _fit_run(est, X, y, rows, codes):
    """A candidate's fit on ``rows``, with their groups when searched by group (a pipeline routes
    them to its last step)."""
    name = est.steps[-1][0] + "__groups" if isinstance(est, Pipeline) else "groups"
    kwargs = {} if codes is None else {name: codes[rows]}
    Xr = X.iloc[rows] if hasattr(X, "iloc") else X[rows]  # a DataFrame (the refit) by position
    args = (Xr,) if y is None else (Xr, y[rows])
    return est.fit(*args, **kwargs)


def _frame(X, names):
    """The units as a DataFrame with the user's column names (no copy of the numbers)."""
    import pandas as pd  # a DataFrame was given, so pandas is there

    return pd.DataFrame(X, columns=names, copy=False)


def _results(candidates, best_index, best_score) -> dict:
    m = len(candidates)
    results = {"params": [dict(c) for c in candidates]}
    for name in sorted({k for c in candidates for k in c}):
        values = np.ma.masked_all(m, dtype=object)
        for i, c in enumerate(candidates):
            if name in c:
                values[i] = c[name]
        results[f"param_{name}"] = values
    scores = np.full(m, np.nan)
    scores[best_index] = best_score
    results["split0_test_score"] = scores  # the one split's released score
    results["mean_test_score"] = scores.copy()  # a mean over the one split
    spread = np.full(m, np.nan)
    spread[best_index] = 0.0  # one split: no spread (and not a noise estimate)
    results["std_test_score"] = spread
    ranks = np.full(m, 2, dtype=np.int32)
    ranks[best_index] = 1
    results["rank_test_score"] = ranks
    return results
