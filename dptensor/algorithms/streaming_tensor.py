r"""The online tensor power method's stream (Wang & Anandkumar 2016, Alg. 2): blocks of fresh rows.

Each power step of each component reads the next block of ``n`` rows (``n`` is the batch size),
and all L candidates share it,

    u~ = (1/n) sum_{x in block} (x.u)^2 x  -  sum_{j<i} lambda_j (v_j.u)^2 v_j,
    lambda~ = (1/n) sum_{x in block} (x.u)^3  -  sum_{j<i} lambda_j (v_j.u)^3,

then ``u <- u~/||u~||`` (``xi_j = v_j.u`` at the *current* iterate, which fixes the paper's
typo). After ``n_iter`` blocks the candidate with the largest ``lambda~`` becomes component i,
and the next component starts from fresh random candidates. :class:`TensorPowerStream` holds the
L candidates, their accumulators and the components found so far: O(d (k + L)) numbers, plus a
fixed micro-block buffer; nothing grows with the number of rows seen.

A private stream releases each block's ``(u~, lambda~)`` with Gaussian noise at
:func:`block_sensitivity`; its sums are exact sums of grid rows
(:mod:`dptensor.algorithms.exact`). The derivation is in
``docs/derivations/streaming_tensor_power.rst``.
"""
from __future__ import annotations

import math

import numpy as np

from .power import normalize_columns, random_unit_columns, select_restart
from ..mechanisms import clip_rows, joint_gaussian_release
from ..mechanisms.randomness import RowDigest, rekeyed
from .exact import BITS, Exact, grid_rows, grid_vectors, moment_product, moment_sensitivities
from .grouped_tensor import group_moment_sensitivities, moment_product_split
from .operators import DeflatedTensor, ThirdMoment

__all__ = ["TensorPowerStream", "block_statistics", "block_sensitivity", "MICRO_BLOCK_BYTES"]

# Rows are multiplied in micro-blocks of about this many bytes: big enough for BLAS to run near
# peak, small enough that the buffer is negligible next to a chunk. The micro-block boundaries sit
# at fixed offsets inside each block, so the arithmetic (and the result, bit for bit) does not
# depend on how the caller cut the stream into chunks.
MICRO_BLOCK_BYTES = 2**22


def block_sensitivity(data_norm: float, batch_size: int, n_restarts: int) -> float:
    r"""l2 sensitivity of one block's joint release ``(u~^(1..L), lambda~^(1..L))``:
    ``2 B^3 sqrt(2L) / n``.

    Replacing one row ``x`` of a block of ``n`` rows (all clipped to ``||x|| <= B``) by ``x'``
    moves each candidate's ``u~`` by ``((x.u)^2 x - (x'.u)^2 x') / n``, of norm at most
    ``2 B^3 / n`` because ``||u|| = 1``, and each ``lambda~`` by ``((x.u)^3 - (x'.u)^3) / n``, at
    most
    ``2 B^3 / n`` in absolute value. Over L candidates the (d + 1) L numbers move by at most
    ``sqrt(L (2B^3/n)^2 + L (2B^3/n)^2) = 2 B^3 sqrt(2L) / n``. The deflation terms depend only on
    earlier releases, so they shift both neighbours alike. The bound is reached when every
    candidate equals ``u`` and ``x = B u``, ``x' = -B u``.

    >>> block_sensitivity(1.0, 1000, 8)
    0.008
    """
    return 2.0 * float(data_norm) ** 3 * math.sqrt(2.0 * n_restarts) / int(batch_size)


def block_statistics(X, U, eigenvalues=(), components=()):
    """What one block releases before noise: the deflated empirical-moment queries at ``U``.

    Parameters
    ----------
    X : array of shape (m, d)
        The block's rows (already clipped when private).
    U : array of shape (d, L)
        The current unit candidates (public: an earlier release, or a data-independent start).
    eigenvalues : array of shape (j,), components : array of shape (j, d)
        The components found so far (public), deflated away.

    Returns
    -------
    u_tilde : array of shape (d, L)
        ``(T_X - D)(I, u, u)`` for every column u of U, ``T_X`` the block's third moment.
    lambda_tilde : array of shape (L,)
        ``(T_X - D)(u, u, u)``.
    """
    X = np.asarray(X)
    components = np.reshape(np.asarray(components, dtype=float), (-1, X.shape[1]))
    return DeflatedTensor(ThirdMoment(X), eigenvalues, components).apply_evaluate(U)


class TensorPowerStream:
    """The running state of one stream, whatever the chunk boundaries.

    Where the stream is: component ``i``, power iteration ``t`` (the number of blocks already
    released for component i), and how many rows of the current block are accumulated. What it
    holds: the L candidates ``U`` (d, L), the block accumulators, the finished components, and one
    micro-block buffer. Nothing here grows with the number of rows seen.
    """

    def __init__(self, *, d, dtype, n_components, n_restarts, n_iter, batch_size, data_norm,
                 sensitivity, noise_multiplier, rng, verbose=0, digest: RowDigest | None = None,
                 grouped: bool = False):
        self.verbose = verbose
        self.grouped = grouped  # blocks of whole groups (feed_groups); n counts groups then
        self.digest = digest  # a seeded stream keys each block's noise by the rows read so far
        self.d, self.dtype, self.k, self.L = d, np.dtype(dtype), n_components, n_restarts
        self.R, self.n, self.data_norm = n_iter, batch_size, data_norm
        self.sensitivity, self.noise_multiplier, self.rng = sensitivity, noise_multiplier, rng
        self.micro = max(1, min(batch_size, MICRO_BLOCK_BYTES // (d * self.dtype.itemsize)))
        self.buffer = None        # allocated the first time a micro-block straddles two chunks
        self.fill = 0             # rows waiting in the buffer
        self.rows_in_block = 0    # rows of the current block already accumulated
        self.i = self.t = 0
        self.n_seen = 0
        self.closed = False       # a private stream that fit() finished: it takes no more rows
        self.components = np.zeros((n_components, d), dtype=self.dtype)
        self.eigenvalues = np.zeros(n_components)
        self.U = random_unit_columns(d, n_restarts, rng, self.dtype)
        self.acc_u = np.zeros((d, n_restarts))
        self.acc_l = np.zeros(n_restarts)

    @property
    def done(self) -> bool:
        return self.i == self.k

    def feed(self, X) -> int:
        """Consume the rows of ``X`` (C-contiguous, the stream's dtype) in order; return how many
        were used.

        The loop runs once per micro-block, never once per row: a micro-block that lies whole
        inside ``X`` is multiplied in place, the ragged ends go through the buffer.
        """
        pos, rows = 0, X.shape[0]
        while pos < rows and not self.done:
            size = min(self.micro, self.n - self.rows_in_block)
            take = min(size - self.fill, rows - pos)
            if self.fill == 0 and take == size:
                self._accumulate(X[pos:pos + size])
            else:
                if self.buffer is None:
                    self.buffer = np.empty((self.micro, self.d), dtype=self.dtype)
                self.buffer[self.fill:self.fill + take] = X[pos:pos + take]
                self.fill += take
                if self.fill == size:
                    self.fill = 0
                    self._accumulate(self.buffer[:size])
                    self.buffer[:size] = 0.0  # raw rows: held no longer than they are needed
            pos += take
        self.n_seen += pos
        return pos

    def _accumulate(self, Xm):
        if self.digest is not None:
            self.digest.update(Xm)
        if self.noise_multiplier > 0:  # private: exact integer sums of grid rows (algorithms.exact)
            stat = moment_product(grid_rows(Xm, self.data_norm), grid_vectors(self.U))
            self.acc_exact = stat.ints + getattr(self, "acc_exact", 0)
            self.rows_in_block += Xm.shape[0]
            if self.rows_in_block == self.n:
                self._end_block()
            return
        # The block's moment is the size-weighted mean of its micro-blocks' moments, and the
        # deflation is affine with weights summing to one, so deflating each piece is exact.
        Xm = clip_rows(Xm, self.data_norm)
        TU, tu = block_statistics(Xm, self.U, self.eigenvalues[:self.i], self.components[:self.i])
        weight = Xm.shape[0] / self.n
        self.acc_u += weight * TU
        self.acc_l += weight * tu
        self.rows_in_block += Xm.shape[0]
        if self.rows_in_block == self.n:
            self._end_block()

    def feed_groups(self, M):
        """One whole block of ``n`` groups: their group-scaled grid rows
        (:func:`~dptensor.algorithms.grouped_tensor.group_scale_cubes`), summed exactly with no
        per-row rounding and released; ``n_seen`` counts groups (the row count is private)."""
        if self.digest is not None:  # with the block's length: it varies with the groups
            self.digest.mark(M.shape[0])
            self.digest.update(np.ascontiguousarray(M, dtype=self.dtype))
        self.acc_exact = moment_product_split(M, grid_vectors(self.U)).ints
        self.n_seen += self.n
        self._end_block()

    def close(self):
        """Drop the working state: the generator, the row buffer and digest, the unnoised
        accumulators."""
        self.closed = True
        self.rng = self.buffer = self.acc_u = self.acc_l = self.acc_exact = self.digest = None

    def _release(self):
        """The block's release: its statistics plus Gaussian noise calibrated to the block
        sensitivity."""
        if self.noise_multiplier == 0:
            return self.acc_u, self.acc_l
        rng = self.rng if self.digest is None else rekeyed(self.rng, self.digest.words())
        return self._release_exact(rng)

    def _release_exact(self, rng):
        """The exact block sums, deflated by their public part, released jointly on their grid.

        The sensitivity is :func:`block_sensitivity` with each candidate's grid allowance
        (:func:`~dptensor.algorithms.exact.moment_sensitivities`):
        ``sqrt(sum_l s_vec_l^2 + s_val_l^2)``.
        """
        K = grid_vectors(self.U)
        # the unit of moment_product (rows), or of moment_product_split (groups)
        shift = 6 * BITS if self.grouped else 2 * BITS
        stat = Exact(self.acc_exact, self.data_norm ** 3 / self.n / 2.0 ** shift)
        deflation = DeflatedTensor(ThirdMoment(np.empty((0, self.d))), self.eigenvalues[:self.i],
                                   self.components[:self.i])  # only its public correction is used
        cU, cu = deflation.correction(self.U)
        TU = Exact(stat.ints[:-1], stat.unit).minus(cU)
        tu = Exact(stat.ints[-1], stat.unit).minus(cu)
        sensitivities = group_moment_sensitivities if self.grouped else moment_sensitivities
        s_vec, s_val = sensitivities(K, self.data_norm, self.n)
        s = math.sqrt(float(np.sum(s_vec ** 2) + np.sum(s_val ** 2))) * (1 + 2.0 ** -50)
        self.acc_exact = 0
        z = self.noise_multiplier
        return joint_gaussian_release((TU.for_release(s, z), tu.for_release(s, z)), s, z, rng,
                                      rounding=None)  # exact sums (dptensor.algorithms.exact)

    def _end_block(self):
        u_tilde, lam = self._release()
        U = normalize_columns(u_tilde).astype(self.dtype, copy=False)
        self.t += 1
        if self.verbose and (self.t == self.R or self.t % max(1, self.R // 5) == 0):
            # progress: counts only (the rows seen so far and the block index are public)
            print(f"[StreamingTensorPower] component {self.i + 1}/{self.k}: "
                  f"block {self.t}/{self.R} released ({self.n_seen_in_block_order()} "
                  f"{'groups' if self.grouped else 'rows'} read)",
                  flush=True)
        if self.t == self.R:
            # lambda~ was measured at u_{R-1}, the candidate at u_R (Alg. 2).
            tau = select_restart(lam)
            self.components[self.i] = U[:, tau]
            self.eigenvalues[self.i] = lam[tau]
            self.i, self.t = self.i + 1, 0
            if not self.done:
                U = random_unit_columns(self.d, self.L, self.rng, self.dtype)
        self.U = U
        self.acc_u[...] = 0.0
        self.acc_l[...] = 0.0
        self.rows_in_block = 0

    def n_seen_in_block_order(self) -> int:
        """Rows in the blocks released so far (a public count: every block holds ``n`` rows)."""
        return (self.i * self.R + self.t) * self.n

