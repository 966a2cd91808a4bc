"""Private hyperparameter search: the choice, its score and the refit under one accounted budget.

:class:`PrivateGridSearchCV` and :class:`PrivateRandomizedSearchCV` have scikit-learn's search
interface; the selection is Papernot & Steinke's (a random number of private runs, only the best
released), priced before the first fit (see ``docs/derivations/private_selection.rst``).
"""
from ._search import MAX_SCORE_NOISE, PrivateGridSearchCV, PrivateRandomizedSearchCV
from ._selection import DISTRIBUTIONS

__all__ = ["PrivateGridSearchCV", "PrivateRandomizedSearchCV", "DISTRIBUTIONS", "MAX_SCORE_NOISE"]
