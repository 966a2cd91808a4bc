"""The docstring examples' expected warnings (setup.cfg runs them with ``--doctest-modules``).

An example that shows the exact algorithm fits at ``epsilon=np.inf``, and that fit says it has no
privacy guarantee, as every such fit must; the filter names that warning alone (the one
``tests/expected_warnings.py`` calls ``NON_PRIVATE``), for the examples listed here.
"""
import pytest

_NON_PRIVATE = r"ignore:\w+ released its fit without a privacy guarantee:dptensor.PrivacyWarning"

#: The docstring examples that fit without privacy, on purpose: each shows what the algorithm
#: recovers exactly.
_EXACT_EXAMPLES = {
    "dptensor.completion.PrivateTensorCompletion",
    "dptensor.latent.gaussian_mixture.PrivateGaussianMixture",
    "dptensor.streaming_tensor_power.StreamingTensorPower",
    "dptensor.tensor_decomposition.PrivateTensorDecomposition",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.name in _EXACT_EXAMPLES:
            item.add_marker(pytest.mark.filterwarnings(_NON_PRIVATE))
