r"""Dask arrays as input: every data pass is one reduction over row chunks.

The data-pass estimators only ever need sums over rows: ``X^T (X U)^2``, ``sum (X U)^3`` and
``X^T (X Q)``. For a ``dask.array.Array`` X each such sum is computed where the chunks live: a task
per row chunk turns its rows into partial sums of the small result (d x L and L numbers), a tree
of additions combines them, and only that result reaches the client. The client therefore holds
O(d L) numbers per query, never X and nothing of size d^2 or d^3; noise and normalisation are
applied there, once, exactly as for an in-memory X, so the privacy cost does not change.

The streaming estimators read rows once, in order: :class:`RowChunks` computes one chunk at a
time and hands it over as a NumPy array.

Nothing here imports dask at module level: :func:`is_dask_array` looks only at ``sys.modules``
(a dask array cannot exist unless ``dask.array`` was imported), so ``import dptensor`` costs the
same with or without dask installed.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .operators import TensorOperator
from ..mechanisms import clip_rows

__all__ = ["is_dask_array", "check_dask_array", "clip_chunks", "reduce_row_chunks", "moment_sum",
           "DaskThirdMoment", "DaskGramMatrix", "RowChunks", "dask_moment_tensor", "dask_gram"]

#: How many partial results one addition task combines: the reduction tree has depth
#: ``log_8(number of chunks)`` and no task holds more than 8 partials.
_FAN_IN = 8


def is_dask_array(X) -> bool:
    """Whether ``X`` is a ``dask.array.Array``, without importing dask.

    >>> is_dask_array(np.zeros((2, 2)))
    False
    """
    module = sys.modules.get("dask.array")
    return module is not None and isinstance(X, getattr(module, "Array", ()))


def check_dask_array(estimator, X, *, reset: bool = True, check_finite: bool = True,
                     name: str = "X"):
    """Validate a dask X lazily, as ``validate_data`` does an in-memory one, never materialising it.

    Checks that X is 2-D with known chunk sizes and a real dtype (float32 kept, other real
    dtypes cast to float64 lazily), reads each chunk as X declares it (cast to X's dtype; a chunk
    of another shape, or not a NumPy array, refused by the first pass), puts each row in one
    chunk (clipping needs whole rows), and
    sets or checks ``n_features_in_`` on ``estimator`` (a dask array has no column names, so
    ``feature_names_in_`` is removed on reset). With ``check_finite`` one reduction over the
    chunks (a pass over the data, on the workers) refuses NaN and infinity before anything is
    spent or released.

    Returns the (lazy) dask array to use.
    """
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D dask array (n_samples, "
                         f"n_features), got {X.ndim} dimensions")
    if any(math.isnan(c) for c in X.chunks[0] + X.chunks[1]):
        # unknown column sizes (X[:, dask_mask]) left n_features_in_ NaN, and the plan priced a
        # NaN width, refused only by chance (the memory check failing on NaN bytes)
        raise ValueError(f"{name} has unknown chunk sizes (n_samples and n_features must be "
                         f"known: they set the sensitivity); call {name}.compute_chunk_sizes() "
                         "first")
    if X.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
    # Every pass reads the chunks as X declares them. A chunk that computes to another dtype
    # (from_delayed or map_blocks told float64 of a float32 loader) was summed in its own:
    # float32 sums under float64 rounding margins moved a release past its sensitivity.
    X = X.map_blocks(_as_declared, dtype=X.dtype)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name} must have at least one sample "
                         f"and one feature, got shape {X.shape}")
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    d = X.shape[1]
    if reset:
        estimator.n_features_in_ = d
        estimator.__dict__.pop("feature_names_in_", None)
    elif d != estimator.n_features_in_:
        raise ValueError(f"{name} has {d} features, but {type(estimator).__name__} is expecting "
                         f"{estimator.n_features_in_} features as input.")
    if check_finite and not reduce_row_chunks(X, _all_finite, combine=_all)[0]:
        raise ValueError(f"{name} contains NaN or infinity")
    return X


def _as_declared(chunk, block_info=None):
    """A chunk in the dtype and shape its array declares: cast (no copy when it is already), or
    refused (a shape other than declared: the first pass, before any spend, refuses it)."""
    declared = block_info[None]
    array = np.asarray(chunk)
    if array.dtype.hasobject:  # a SciPy sparse chunk becomes a 0-d object array here
        raise TypeError(f"the chunks of X must be NumPy arrays of numbers, got "
                        f"{type(chunk).__name__}")
    chunk = array
    if chunk.shape != tuple(declared["chunk-shape"]):
        raise ValueError(f"a chunk of X computes to shape {chunk.shape} where X declares "
                         f"{tuple(declared['chunk-shape'])}: fix the array's chunks (or its "
                         "loader) first")
    return chunk.astype(declared["dtype"], copy=False)


def clip_chunks(X, data_norm):
    """``clip_rows`` applied chunk by chunk (lazily); ``data_norm=None`` returns X.

    X must have one chunk across the columns (as :func:`check_dask_array` returns it), so that
    each task sees whole rows.
    """
    if data_norm is None:
        return X
    return X.map_blocks(clip_rows, data_norm, dtype=X.dtype)


def reduce_row_chunks(X, partial, *args, combine=None):
    """``sum`` of ``partial(c, *args)`` (a tuple of arrays) over X's row chunks ``c``, one compute.

    ``args`` (small NumPy arrays, such as the d x L candidate block) enter the graph once and are
    shared by every chunk task. The partials are added in a tree with fan-in 8 on the workers
    (``combine`` replaces the addition), so the client receives one tuple of the partials' size.
    """
    import dask

    shared = [dask.delayed(a) if isinstance(a, np.ndarray) else a for a in args]
    parts = [dask.delayed(partial, pure=True)(block, *shared) for block in X.to_delayed().ravel()]
    combine = combine or _add
    while len(parts) > 1:
        parts = [dask.delayed(combine, pure=True)(*parts[i:i + _FAN_IN])
                 for i in range(0, len(parts), _FAN_IN)]
    (total,) = dask.compute(parts[0])
    return total


def _add(*parts):
    return tuple(sum(terms[1:], terms[0]) for terms in zip(*parts))


def _all(*parts):
    return (all(p[0] for p in parts),)


def _all_finite(chunk):
    return (bool(np.isfinite(chunk).all()),)


def _prepared(chunk, prepare):
    return chunk if prepare is None else prepare(chunk)


def _moment_partial(chunk, U, prepare=None):
    # The same arithmetic as ThirdMoment.apply_evaluate, on one chunk's (prepared) rows.
    chunk = _prepared(chunk, prepare)
    XU = chunk @ U
    sq = XU * XU
    return chunk.T @ sq, np.einsum("il,il->l", sq, XU)


def _cube_partial(chunk, U, prepare=None):
    XU = _prepared(chunk, prepare) @ U
    return (np.einsum("il,il,il->l", XU, XU, XU),)


def _gram_partial(chunk, Q, prepare=None):
    chunk = _prepared(chunk, prepare)
    return (chunk.T @ (chunk @ Q),)


def _cross_partial(chunk):
    return (chunk.T @ chunk,)


def moment_sum(chunk):
    """``sum_l x_l^(x)3`` over one chunk's rows (d x d x d): ``n`` times its :func:`moment_tensor`,
    and zero for a chunk of no rows, whose mean is 0/0 (a filter such as ``X[X[:, 0] > 0]`` leaves
    such chunks, where the data puts them)."""
    from .operators import moment_tensor

    if chunk.shape[0] == 0:
        return np.zeros((chunk.shape[1],) * 3, dtype=chunk.dtype)
    return moment_tensor(chunk) * chunk.shape[0]


def _dense_moment_partial(chunk):
    return (moment_sum(chunk),)


class DaskThirdMoment(TensorOperator):
    r"""The third moment of a dask X (n x d), never formed: :class:`ThirdMoment` on a cluster.

    ``apply_evaluate(U)`` returns ``T(I,U,U) = X^T (X U)^2 / n`` and ``T(U,U,U) = sum (X U)^3 / n``
    from one reduction over the row chunks: each chunk task computes its ``X_c U`` once and both
    partial sums from it. The client sends U (d x L) and receives d x L + L numbers per query.

    ``prepare`` (a picklable function of a chunk, such as ``functools.partial(clip_rows,
    data_norm=B)``) is applied to each chunk inside that same task: the prepared rows are never a
    task, a graph layer or a stored array of their own, so clipping costs no extra pass per step.
    """

    def __init__(self, X, prepare=None):
        self.X = X
        self.prepare = prepare
        self.n = X.shape[0]
        self.shape = (X.shape[1],) * 3

    def apply_evaluate(self, U):
        TU, tu = reduce_row_chunks(self.X, _moment_partial, np.asarray(U), self.prepare)
        return TU / self.n, tu / self.n

    def apply(self, U):
        return self.apply_evaluate(U)[0]

    def evaluate(self, U):
        (tu,) = reduce_row_chunks(self.X, _cube_partial, np.asarray(U), self.prepare)
        return tu / self.n


class DaskGramMatrix:
    """``A = X^T X`` for a dask X, applied as one reduction ``sum_c X_c^T (X_c Q)``.

    :class:`GramMatrix` on a cluster: the client sends Q (d x p) and receives d x p numbers.
    ``prepare`` is applied to each chunk inside its task, as for :class:`DaskThirdMoment`.
    """

    def __init__(self, X, prepare=None):
        self.X = X
        self.prepare = prepare
        self.shape = (X.shape[1], X.shape[1])

    def matmat(self, Q):
        return reduce_row_chunks(self.X, _gram_partial, np.asarray(Q), self.prepare)[0]


def dask_moment_tensor(X):
    """The dense third moment of a dask X, summed over chunks: d^3 numbers on the client.

    Only for what needs the dense tensor itself (input perturbation releases it); the power
    method uses :class:`DaskThirdMoment` instead.
    """
    return reduce_row_chunks(X, _dense_moment_partial)[0] / X.shape[0]


def dask_gram(X):
    """``X^T X`` of a dask X, summed over chunks: d x d numbers on the client.

    Only for what releases the matrix itself (Analyze Gauss); the power method uses
    :class:`DaskGramMatrix` instead.
    """
    return reduce_row_chunks(X, _cross_partial)[0]


class RowChunks:
    """The row chunks of a dask X as NumPy arrays, computed one at a time, in order.

    Iterable more than once (each iteration is a new pass over X), so a streaming ``fit`` can
    cycle it. With a ``distributed`` client the next chunk is computed while the caller works on
    the current one, so the client holds the current chunk, the next one and, while it arrives,
    its receive buffer (about three chunks; measured in ``benchmarks/bench_dask.py``).
    """

    def __init__(self, X, *, skip_empty: bool = False):
        if X.ndim != 2:
            raise ValueError("X must be a 2-D dask array (n_samples, "
                             f"n_features), got {X.ndim} dimensions")
        self.X = X.rechunk({1: -1}) if X.numblocks[1] > 1 else X  # each chunk: whole rows
        self.skip_empty = skip_empty

    def __iter__(self):
        # skip_empty: a chunk of no rows is passed over (a stream refuses an empty chunk, which
        # mid-stream, after its spend, failed the fit where a filter of the data had left one),
        # unless every chunk is empty: the last is then yielded, for the caller to refuse.
        yielded = False
        for i, chunk in enumerate(self._chunks()):
            last = i == self.X.numblocks[0] - 1
            if self.skip_empty and chunk.shape[0] == 0 and (yielded or not last):
                continue
            yielded = True
            yield chunk

    def _chunks(self):
        blocks = list(self.X.to_delayed().ravel())
        client = _default_client()
        if client is None:
            for block in blocks:
                yield np.asarray(block.compute())
            return
        ahead = client.compute(blocks[0]) if blocks else None
        for i in range(len(blocks)):
            current, ahead = ahead, client.compute(blocks[i + 1]) if i + 1 < len(blocks) else None
            chunk = np.asarray(current.result())
            del current  # release the worker's copy as soon as the client has it
            yield chunk


def _default_client():
    """The default ``distributed`` client, if distributed is imported and one is running."""
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None
