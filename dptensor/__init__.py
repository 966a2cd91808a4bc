"""dptensor: private and streaming spectral learning as scikit-learn estimators.

Every estimator (the five spectral ones and the two latent variable models of
:mod:`dptensor.latent`) shares one :class:`PrivacyAccountant`; see the user guide for the privacy
model.
Estimators are imported lazily so that ``import dptensor`` stays cheap.
"""
from importlib import import_module

from ._base import NoisePreview, PrivacyCost
from .exceptions import PrivacyWarning
from ._memory import MemoryRefusedError
from .accounting import (BudgetExceededError, LedgerError, LedgerNotSharedError, PrivacyAccountant,
                         PrivacyAccountingError)

__version__ = "0.1.0"

# public name -> module that defines it
_ESTIMATORS = {
    "PrivateTensorDecomposition": "tensor_decomposition",
    "StreamingTensorPower": "streaming_tensor_power",
    "PrivatePCA": "pca",
    "AdaptivePrivatePCA": "adaptive_pca",
    "PrivateTensorCompletion": "completion",
    "PrivateGaussianMixture": "latent",
    "PrivateLatentDirichletAllocation": "latent",
}

__all__ = ["PrivacyAccountant", "BudgetExceededError", "LedgerError", "LedgerNotSharedError",
           "MemoryRefusedError", "NoisePreview", "PrivacyAccountingError", "PrivacyCost",
           "PrivacyWarning",
           "__version__", *_ESTIMATORS]


def __getattr__(name):
    if name in _ESTIMATORS:
        return getattr(import_module(f".{_ESTIMATORS[name]}", __name__), name)
    raise AttributeError(f"module 'dptensor' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
