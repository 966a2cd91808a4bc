"""Latent variable models learned by the method of moments, private end to end.

Estimate the first two moments, whiten with the top-k eigenpairs of the second, decompose the
whitened third moment (a k x k x k tensor, never d x d x d) with the tensor power method, and map
back (Anandkumar, Ge, Hsu, Kakade & Telgarsky 2014):

* :class:`PrivateGaussianMixture` -- a spherical Gaussian mixture (Hsu & Kakade 2013);
* :class:`PrivateLatentDirichletAllocation` -- an LDA topic model on word counts (Anandkumar et al.
  2012).
"""
from ..algorithms.moments import match_rows
from .gaussian_mixture import PrivateGaussianMixture
from .lda import PrivateLatentDirichletAllocation

__all__ = ["PrivateGaussianMixture", "PrivateLatentDirichletAllocation", "match_rows"]
