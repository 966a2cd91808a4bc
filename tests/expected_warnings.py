"""The warnings a test provokes on purpose, each as a filter that names it precisely.

A test marked with one of these expects that warning from its fits and lets nothing else by: any
other warning still reaches the suite's summary (or fails it, for the categories setup.cfg turns
into errors). The library's own tests of each warning assert it with ``pytest.warns``.
"""
import pytest

# Parsed by pytest as "action:message:category": a message is a regex matched at the start of
# the warning's text, and may not hold a colon.
_NON_PRIVATE = r"ignore:\w+ released its fit without a privacy guarantee:dptensor.PrivacyWarning"
_NOISE = (r"ignore:the released {} of component\(s\) \[[\d, ]+\] is below twice its noise level"
          ":UserWarning")
_OFFSETS = (r"ignore:the released offsets_rms_ of mode\(s\) \[[\d, ]+\] is below its noise level"
            ":UserWarning")
_DELTA = (r"ignore:delta=[\d.e+-]+ is not below 1/n = 1/\d+ .* for these n=\d+ {}s"
          ":dptensor.PrivacyWarning")

#: A fit at epsilon=np.inf (a reference fit, or a test of the exact algorithm) is told that it
#: has no privacy guarantee, as every such fit must be.
NON_PRIVATE = pytest.mark.filterwarnings(_NON_PRIVATE)


def noise_dominated(attribute=r"\w+"):
    """A private fit on data too small for its epsilon, on purpose (a brute-force audit of a
    release's sensitivity, a test of what a fit on tiny data does, scikit-learn's checks on their
    few rows): the released ``attribute`` (by default any estimator's) is below twice its noise
    level, and the fit says so."""
    return pytest.mark.filterwarnings(_NOISE.format(attribute))


def delta_not_below_one_over_n(unit="row"):
    """A test whose ``delta`` is not below 1/n on purpose (a large delta that makes a rare case
    likely, a small n that a brute force can enumerate): the fit says so."""
    return pytest.mark.filterwarnings(_DELTA.format(unit))


#: A completion fit on data too small for its epsilon, or without row effects, on purpose (the
#: audits' tiny tensors, scikit-learn's checks): its released components and offsets are below
#: their noise levels, and the fit says so (``tests/test_completion_noise.py`` asserts it).
COMPLETION_NOISE = [noise_dominated("component_rms_"), pytest.mark.filterwarnings(_OFFSETS)]


def completion_noise(test):
    """``COMPLETION_NOISE`` for one test: a completion fit on a tensor too small for its epsilon,
    on purpose (its accounting, plumbing or messages are under test, not its accuracy)."""
    for mark in reversed(COMPLETION_NOISE):
        test = mark(test)
    return test
