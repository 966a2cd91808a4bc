"""PrivatePCA's probabilistic model (scikit-learn's ``get_covariance``, ``get_precision``,
``score_samples``) on its released parameters: post-processing, read off
:mod:`dptensor.algorithms.pca_model`."""
from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._validation import validate_private_data
from .algorithms.pca_model import log_likelihood, model_covariance, model_precision
from .algorithms.sparse import map_row_blocks

__all__ = ["ProbabilisticPCAMixin"]


class ProbabilisticPCAMixin:
    """The model of :class:`~dptensor.PrivatePCA`'s released ``components_``,
    ``explained_variance_``, ``noise_variance_`` and ``mean_``; rows dense or sparse."""

    def _validate_rows(self, X):
        """Rows to project or score (dense, or sparse CSR/CSC read a dense block at a time)."""
        return validate_private_data(self, X, dtype=[np.float64, np.float32], reset=False,
                                     accept_sparse=("csr", "csc"))

    def _model(self):
        """The released parameters scikit-learn's model reads; refused where no total was
        released (no ``noise_variance_``) or the input was a precomputed matrix."""
        check_is_fitted(self, "components_")
        if not hasattr(self, "noise_variance_"):
            raise AttributeError(
                "this fit released no total variance (or had no rows), so noise_variance_ and "
                "the probabilistic model are not available: fit rows with "
                "calibration='exact' (see the noise_variance_ attribute)")
        return self.components_, self.explained_variance_, self.noise_variance_

    def get_covariance(self):
        """The model's covariance, scikit-learn's ``components_.T * (lambda - sigma^2)_+ *
        components_ + sigma^2 I`` (with its scaling of the components when ``whiten``) on the
        released ``components_``, ``explained_variance_`` and ``noise_variance_``:
        post-processing, no cost. ``AttributeError`` where ``noise_variance_`` is not set."""
        return model_covariance(*self._model(), whiten=self.whiten)

    def get_precision(self):
        """The inverse of :meth:`get_covariance`, by the matrix inversion lemma (post-processing).
        ``ValueError`` when the covariance is singular (``noise_variance_ == 0``, k < d)."""
        return model_precision(*self._model(), whiten=self.whiten)

    def score_samples(self, X):
        """Each row's log-likelihood under the model (scikit-learn's ``score_samples``):
        ``X - mean_`` scored with :meth:`get_precision`, all released parameters. Like
        :meth:`score`, it reads ``X`` exactly and is not a release. Not the per-row form of
        :meth:`score` (captured variance)."""
        precision = self.get_precision()
        X = self._validate_rows(X)
        return map_row_blocks(lambda R: log_likelihood(R - self.mean_, precision), X)
