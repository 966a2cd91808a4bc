r"""The Streaming Power Method (Hardt & Price, Fig. 2): one power step per block of rows.

O(d p) memory whatever the stream's length; by parallel composition over disjoint blocks the
whole stream costs one Gaussian release (``docs/derivations/pca.rst``).
"""
from __future__ import annotations

import numpy as np

from .exact import (
    BITS,
    Exact,
    exact_gaussian_release,
    gram_product,
    grid_rows,
    grid_vectors,
    power_sensitivity,
    row_sum,
)
from ..mechanisms import clip_rows
from ..mechanisms.randomness import RowDigest, rekeyed
from .power import center_and_clip, orthonormalize, rayleigh_ritz

__all__ = ["StreamingPowerMethod"]


class StreamingPowerMethod:
    r"""The Streaming Power Method (Hardt & Price, Fig. 2) over disjoint blocks of rows.

    Rows arrive in batches of any size; they fill blocks of exactly ``block_size`` rows. Unless the
    data are declared centred, the first block only estimates the mean (released with noise
    ``z 2B/T``); each later block ``l`` releases ``Y_l = (1/T) sum_{block} c c^T X_{l-1} + G_l``
    with ``c = clip(x - mean, B)`` and ``G_l`` at ``z * row_power_sensitivity(B, p) / T``, then
    ``X_l = QR(Y_l)``. State is O(d p): the iterate, a d x p accumulator and a d-vector; no row is
    kept. The result does not depend on how the stream is cut into batches (noise is drawn only when
    a block completes, in block order).

    Privacy: every row is in exactly one block and each block's release is one Gaussian at
    multiplier ``z`` on that block alone, so by parallel composition (adaptive, on disjoint data)
    the whole stream is ``1/z``-GDP under replace-one, however many blocks it has.
    """

    def __init__(self, n_features: int, n_components: int, block_size: int,
                 rng: np.random.Generator, *,
                 n_oversamples: int = 0, data_norm=None, noise_multiplier: float = 0.0,
                 centered: bool = False, dtype=np.float64, digest: RowDigest | None = None):
        self.n_components, self.block_size = int(n_components), int(block_size)
        self.digest = digest  # a seeded stream keys each block's noise by the rows read so far
        self.data_norm, self.noise_multiplier = data_norm, float(noise_multiplier)
        self.rng = rng
        self.dtype = np.dtype(dtype)
        p = n_components + n_oversamples
        self.basis = orthonormalize(rng.standard_normal((n_features, p)).astype(self.dtype))
        self.mean = np.zeros(n_features, dtype=self.dtype) if centered else None
        # The mean block's running sum and the power block's running product: exact integer sums
        # of grid rows (:mod:`dptensor.algorithms.exact`) when private, plain float sums otherwise.
        exact = self.noise_multiplier > 0
        self._sum = 0 if exact else np.zeros(n_features, dtype=self.dtype)
        self._acc = 0 if exact else np.zeros((n_features, p), dtype=self.dtype)
        self._count = 0
        self.n_samples_seen = 0
        self.n_blocks = 0
        self.components = self.eigenvalues = None

    def update(self, X: np.ndarray) -> "StreamingPowerMethod":
        """Feed a batch of rows (not modified)."""
        start, n = 0, X.shape[0]
        while start < n:
            take = min(n - start, self.block_size - self._count)
            rows = X[start:start + take]
            if self.digest is not None:
                self.digest.update(rows)
            if self.noise_multiplier > 0:
                self._add_exact(rows)
            elif self.mean is None:
                self._sum += clip_rows(rows, self.data_norm).sum(axis=0)
            else:
                chunk = clip_rows(rows, self.data_norm)  # a new array unless unbounded: then copy
                C = center_and_clip(chunk, self.mean, self.data_norm, copy=self.data_norm is None)
                self._acc += C.T @ (C @ self.basis)
            self._count += take
            start += take
            if self._count == self.block_size:
                self._close_block()
        self.n_samples_seen += n
        return self

    def _add_exact(self, rows):
        """A private stream's rows, on the grid as a batch fit puts them, added to exact sums."""
        B = self.data_norm
        M = grid_rows(rows, B)
        if self.mean is None:
            self._sum = self._sum + row_sum(M).ints
        else:
            M = grid_rows(M, B, self.mean, scale=B / 2.0 ** BITS, out=M)
            self._acc = self._acc + gram_product(M, grid_vectors(self.basis)).ints

    def _close_block(self):
        T, z, exact = self.block_size, self.noise_multiplier, self.noise_multiplier > 0
        rng = self.rng if self.digest is None else rekeyed(self.rng, self.digest.words())
        if self.mean is None:
            if exact:
                stat = Exact(self._sum, self.data_norm / T / 2.0 ** BITS)
                # released in float64, as every release here: float32 cannot hold them all
                self.mean = exact_gaussian_release(stat, 2.0 * self.data_norm / T, z, rng)
            else:
                self.mean = self._sum / T
            self._sum = None  # the unnoised sum is needed no longer than this release
        else:
            if exact:
                stat = Exact(self._acc, self.data_norm ** 2 / T / 4.0 ** BITS)
                s = power_sensitivity(grid_vectors(self.basis), self.data_norm) / T
                Y = exact_gaussian_release(stat, s, z, rng)  # about B^2: float64
                self._acc = 0
            else:
                Y = self._acc / T
                self._acc[...] = 0
            components, self.eigenvalues = rayleigh_ritz(self.basis, Y, self.n_components)
            self.components = components.astype(self.dtype, copy=False)  # unit rows
            self.basis = orthonormalize(Y).astype(self.dtype, copy=False)
            self.n_blocks += 1
        self._count = 0
