"""What a private search may fit: its learner, and each candidate the grid builds from it.

A search's guarantee rests on one learning step, the last, being a dptensor estimator whose
fit is private, every earlier step being stateless. A grid value may replace a step (or the
whole ``steps`` list), so each candidate is built and checked as the template is, before any
spend: a grid that swaps in ``StandardScaler()`` would otherwise learn from the data unnoised.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import get_tags

from .._base import PrivateEstimatorMixin
from .._guards import silenced
from ..exceptions import integer_scalar

__all__ = ["SET_BY_SEARCH", "SCORE_SCALE", "check_learner", "check_candidates", "learner_width",
           "check_heads", "check_candidate_unit", "check_n_iter"]

#: Parameters the search sets on every candidate itself; a grid may not contain them.
SET_BY_SEARCH = ("epsilon", "delta", "accountant", "random_state")

#: Parameters that set the scale of an estimator's score (its per-unit range is normalised by
#: them): candidates that differ in one would be ranked on different scales.
SCORE_SCALE = ("data_norm", "value_range")


def check_learner(est):
    """``(prefix, learner)``: the dptensor estimator, alone or the last step of a pipeline whose
    earlier steps are stateless; anything else is refused."""
    if isinstance(est, Pipeline):
        _check_pipeline(est)
        *head, (name, last) = est.steps
        for step_name, step in head:
            _check_step(step_name, step)
        prefix, learner = f"{name}__", last
    else:
        prefix, learner = "", est
    if not (isinstance(learner, PrivateEstimatorMixin) and hasattr(learner, "privacy_cost")
            and hasattr(learner, "_score_units")):
        why = ("its score (for the latent models, a log-likelihood) has no public per-unit "
               "bound, so it cannot be released privately"
               if isinstance(learner, PrivateEstimatorMixin)
               else "it is not a dptensor estimator")
        raise TypeError(f"{type(learner).__name__} cannot be searched privately: {why}. A "
                        "private search fits and scores a dptensor estimator whose score has "
                        "a public per-unit bound, alone or as the last step of a pipeline")
    return prefix, learner


def _check_pipeline(pipe):
    """Refuse what a pipeline does beyond running its steps that the noise does not cover."""
    if pipe.memory is not None:
        raise ValueError(
            "the pipeline has a memory (a cache): it would keep each run's transformed "
            "training rows on disk, and which candidates ran, and how many runs there were, "
            "are secret. Set memory=None (its steps are stateless: there is nothing to cache)")
    if getattr(pipe, "transform_input", None) is not None:
        raise ValueError("the pipeline has a transform_input: a private search passes no "
                         "metadata through the steps before the learner; set "
                         "transform_input=None")


def _check_step(step_name, step):
    if step is None or step == "passthrough":
        return
    if isinstance(step, PrivateEstimatorMixin):
        raise ValueError(f"pipeline step {step_name!r} is a dptensor estimator that is not the "
                         "last step: a private search supports one learning step, the last, "
                         "which fits and scores (earlier steps must be stateless)")
    if isinstance(step, FunctionTransformer):
        raise TypeError(
            f"pipeline step {step_name!r} is a FunctionTransformer: its function may mix rows "
            "(say subtract the column means), which breaks the per-row bounds the search's "
            "guarantee rests on, and that cannot be checked. Apply a row-by-row transform to X "
            "before the search instead")
    if not (hasattr(step, "fit") and hasattr(step, "transform")):
        raise TypeError(f"pipeline step {step_name!r} ({type(step).__name__}) is not a "
                        "transformer (it has no fit and transform): a pipeline runs it on the "
                        "rows before the learner, so it must be a stateless transformer")
    if get_tags(step).requires_fit:
        raise TypeError(
            f"pipeline step {step_name!r} ({type(step).__name__}) learns from the data without "
            "privacy: a private search needs every step that learns to be a dptensor estimator "
            "(stateless transformers such as Normalizer are fine)")


def check_candidates(template, grid, prefix, learner) -> list[dict]:
    """The grid's candidates, each built from ``template`` and checked as the template is: the
    same learner class at the same place, stateless earlier steps, no parameter the search sets
    itself, and one score scale (``data_norm``, ``value_range``) for all. No data is read."""
    candidates = [dict(c) for c in grid]
    if not candidates:
        raise ValueError("the search has no candidates: the grid is empty")
    scales = set()
    for c in candidates:
        for key in c:
            if key.removeprefix(prefix) in SET_BY_SEARCH:
                raise ValueError(
                    f"the grid sets {key!r}, which the search sets on every candidate itself: "
                    "each candidate's epsilon is calibrated so that the whole search meets "
                    "the search's (epsilon, delta); vary the other hyperparameters")
        built = clone(template).set_params(**clone(c, safe=False))
        try:
            where, own = check_learner(built)
        except (TypeError, ValueError) as error:
            raise type(error)(f"candidate {c}: {error}") from None
        if where != prefix or type(own) is not type(learner):
            raise ValueError(f"candidate {c} replaces the learning step ({type(learner).__name__}"
                             f" at {prefix[:-2] or 'the estimator'!r}): a grid may vary its "
                             "hyperparameters and the stateless steps before it; search each "
                             "learner on its own")
        params = own.get_params(deep=False)
        scales.add(tuple(repr(params.get(name)) for name in SCORE_SCALE))
    if len(scales) > 1:
        raise ValueError(f"the grid varies {' or '.join(map(repr, SCORE_SCALE))}, which sets the "
                         "scale of the score (each unit's score is normalised by it): "
                         "candidates would be ranked on different scales. Fix it in the "
                         "estimator and search the other hyperparameters")
    return candidates


def distinct_heads(template, candidates):
    """``(candidate, head)`` for each distinct head (the pipeline's steps before the learner) the
    candidates build: one per set of grid values outside the learner, told apart by the very
    objects (a repr elides long pipelines, and two heads that print alike may differ)."""
    prefix = template.steps[-1][0] + "__"
    seen = set()
    for c in candidates:
        key = tuple(sorted((k, id(v)) for k, v in c.items() if not k.startswith(prefix)))
        if key not in seen:
            seen.add(key)
            built = clone(template).set_params(**clone(c, safe=False))
            yield c, (built[:-1] if len(built.steps) > 1 else None)


def learner_width(template, candidates, n_features: int) -> int:
    """The number of features the learner sees: a pipeline's stateless steps (the template's
    or a candidate's) may change it, so each distinct head is run on one zero row of the public
    width (no data is read). Candidates whose learners would see different widths are refused:
    their costs and scores would not be comparable."""
    if not isinstance(template, Pipeline):
        return n_features
    widths = {n_features if head is None else _head_width(head, n_features)
              for _, head in distinct_heads(template, candidates)}
    if len(widths) > 1:
        raise ValueError(f"the grid's steps give the learner different numbers of features "
                         f"({sorted(widths)}): candidates must see one width")
    return widths.pop()


def check_heads(template, candidates, X, y, check, width: int) -> None:
    """Run each distinct head on all of ``X`` (with ``y``, as a run fits it) before the spend,
    and ``check`` what it gives the learner: a stateless step that refuses some rows
    (``AdditiveChi2Sampler`` a negative value), or gives the learner rows its fit refuses (an
    overflow to infinity), would otherwise raise in a run, after the spend, and whether it raised
    would tell something of the data. It must keep X's rows (one unit, one row), give the
    ``width`` the search was priced at (from a zero row, or X's own when a step refused that
    row), and act on each row alone: what it gives the first half of the rows must be what it
    gives them in all of X (a step whose tags say it needs no fit, but which learns or mixes
    rows, fails this; one that hides it better is the user's to answer for)."""
    if not isinstance(template, Pipeline):
        return
    half = np.shape(X)[0] // 2
    for c, head in distinct_heads(template, candidates):
        if head is None:
            continue
        try:
            with silenced():
                Xt = head.fit_transform(X, y)
                check(Xt)
                part = head.fit_transform(X[:half], None if y is None else y[:half]) if half \
                    else None  # as a run fits it on its part
        except Exception as error:
            raise ValueError(f"candidate {c}: the pipeline's steps before the learner refuse "
                             f"X, or give the learner rows its fit refuses "
                             f"({type(error).__name__}); a run would raise after the spend. "
                             "Run them on X yourself to see why, and pass X they take") from error
        if np.shape(Xt)[0] != np.shape(X)[0]:  # one unit, one row: the fit's guarantee
            raise ValueError(f"candidate {c}: the pipeline's steps before the learner turn X's "
                             f"{np.shape(X)[0]} rows into {np.shape(Xt)[0]}: the learner's fit "
                             "protects one row, so each step must give one row for each row")
        if half and not _same_rows(part, Xt[:half]):
            raise ValueError(f"candidate {c}: the pipeline's steps before the learner do not act "
                             "on each row alone: what they give the first half of X's rows "
                             "differs from what they give those rows in all of X (a step learns "
                             "from the rows it is fitted on, or mixes them), and the runs fit "
                             "them on parts of X. Use stateless row by row steps (Normalizer), "
                             "or transform X before the search")
        got = np.shape(Xt)[1] if np.ndim(Xt) == 2 else f"{np.ndim(Xt)}-D rows, not 2-D; no"
        if got != width:
            raise ValueError(f"candidate {c}: the pipeline's steps before the learner give it "
                             f"{got} features on X, but the search was priced at "
                             f"{width} (what they give one zero row, or X's width when they "
                             "refuse it): give the learner rows of a width the steps keep")


def _same_rows(a, b) -> bool:
    """Whether two transforms of the same rows agree (up to floating-point order of sums)."""
    if sp.issparse(a) and sp.issparse(b):
        if a.shape != b.shape:
            return False
        diff, scale = abs(a - b).max(), abs(b).max()
    else:
        a, b = (np.asarray(v.toarray() if sp.issparse(v) else v, dtype=np.float64)
                for v in (a, b))
        if a.shape != b.shape:
            return False
        diff, scale = (np.max(np.abs(a - b)), np.max(np.abs(b))) if a.size else (0.0, 0.0)
    return bool(diff <= 1e-9 * scale)


def _head_width(head, n_features):
    try:
        with silenced():
            out = head.fit_transform(np.zeros((1, n_features)))
        return int(np.shape(out)[1])
    except Exception:  # a step that cannot take a zero row: the data's own width
        return n_features


def check_candidate_unit(params, unit, searched):
    """Refuse a candidate whose fit protects another unit than the one the search splits and
    scores by: its guarantee would not be the search's (a user-level completion scored per
    observed value protects one value in the search, not the user). A cost naming no unit (an
    estimator from outside the library) is taken at the search's."""
    if unit is not None and unit != searched:
        raise ValueError(f"candidate {params} protects one {unit}, but the search splits and "
                         f"scores by {searched}: its score would not protect a whole {unit}. "
                         f"Search the estimator at its {searched} unit, or fit it on its own")


def check_n_iter(n_iter) -> int:
    """A randomized search's ``n_iter``, the number of candidates it samples: an int >= 1 (a
    NumPy integer too; not a bool, a float or a string, which ``ParameterSampler`` would take
    as a count or fail on in words that name no parameter; a 0-d array of an int is that int)."""
    shown, n_iter = n_iter, integer_scalar(n_iter)
    if isinstance(n_iter, (bool, np.bool_)) or not isinstance(n_iter, numbers.Integral):
        raise TypeError(f"n_iter (the number of candidates sampled) must be an int >= 1, got "
                        f"{shown!r} of type {type(shown).__name__}: pass a whole number, "
                        "say n_iter=10")
    if n_iter < 1:
        raise ValueError(f"n_iter (the number of candidates sampled) must be >= 1, got "
                         f"{shown!r}: a search needs at least one candidate")
    return int(n_iter)
