"""Attacks on the whole-group unit (``fit(X, groups=...)``): each test is a concrete way an
adversary could make a group count for more than one unit, or make two releases share noise."""
import numpy as np

import dptensor.algorithms.streaming_tensor as streaming
from dptensor import StreamingTensorPower


def _block_releases(monkeypatch, X, groups):
    """``(generator state, statistic)`` of each block a seeded grouped stream releases."""
    seen, release = [], streaming.joint_gaussian_release

    def spy(parts, sensitivity, noise_multiplier, rng, **kw):
        seen.append((repr(rng.bit_generator.state), repr(parts)))
        return release(parts, sensitivity, noise_multiplier, rng, **kw)

    monkeypatch.setattr(streaming, "joint_gaussian_release", spy)
    StreamingTensorPower(1, n_restarts=2, n_iter=2, batch_size=1, epsilon=1.0, delta=1e-3,
                         data_norm=1.0, random_state=0).fit(X, groups=np.asarray(groups))
    return seen


def test_grouped_stream_blocks_of_other_lengths_never_share_noise(monkeypatch):
    # Blocks of whole groups have no fixed length: rows "a b | c" and "a | b c" read the same
    # rows in the same order, so a digest of the rows alone keyed both fits' second blocks alike,
    # and two seeded fits of one X under two groupings (no accountant) released different
    # statistics with the same noise: their difference was exact.
    X = np.array([[0.3, 0.1, 0.0], [0.0, 0.3, 0.1], [0.1, 0.0, 0.3]])
    releases = [r for g in ([0, 0, 1], [0, 1, 1], [1, 1, 0], [1, 0, 0])
                for r in _block_releases(monkeypatch, X, g)]
    noise_of = {}
    for state, statistic in releases:
        assert noise_of.setdefault(state, statistic) == statistic
