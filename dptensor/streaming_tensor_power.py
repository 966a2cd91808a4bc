r"""Online tensor power method (Wang & Anandkumar 2016, Alg. 2), optionally private: the estimator.

The method never holds the data: each power step reads the next block of ``batch_size`` fresh
rows, shared by all L candidates (:class:`~dptensor.algorithms.streaming_tensor.TensorPowerStream`
runs it). Private streaming releases each block's statistics with Gaussian noise. Every row enters
one block only, so by parallel composition the whole stream costs one block's release whatever k
and ``n_iter`` are. The derivation is in ``docs/derivations/streaming_tensor_power.rst``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ._guards import warn
from ._base import FitData, FitPlan, PrivateEstimatorMixin, SearchTag
from ._memory import FLOAT, check_fits
from ._validation import (check_data_norm, check_positive_int, check_verbose, validate_private_data,
                          validate_stream_chunk)
from .accounting import GaussianEvent, NonPrivateEvent, calibrate_gaussian
from .algorithms.dask import RowChunks, check_dask_array, is_dask_array
from .algorithms.exact import grid_rows
from .algorithms.grouped_tensor import group_blocks, group_scale_cubes
from .algorithms.streaming_tensor import MICRO_BLOCK_BYTES, TensorPowerStream, block_sensitivity
from .algorithms.tensor_power import moment_fit_scores
from .mechanisms.randomness import RowDigest

__all__ = ["StreamingTensorPower"]

_FLOAT_DTYPES = (np.float64, np.float32)
# batch_size="auto" on a stream of unknown length (partial_fit, an iterable of batches)
STREAM_BATCH_SIZE = 1000


@dataclass(frozen=True)
class StreamSettings:
    """What a stream needs once it is priced: d, k, L, R, the block size ``n``, the rows' clip,
    one block's sensitivity (0 without privacy) and how many passes a batch fit may make."""

    n_features: int
    n_components: int
    n_restarts: int
    n_iter: int
    batch_size: int
    data_norm: float | None
    sensitivity: float
    max_passes: int


def _is_batch_iterable(X) -> bool:
    """An iterable of batches (a generator, an iterator, a custom iterable), not one array.

    Arrays, lists and tuples (array-likes of rows), sparse matrices and data frames are one array.
    """
    if isinstance(X, (np.ndarray, list, tuple, str, bytes)) or hasattr(X, "__array__"):
        return False
    if hasattr(X, "shape") or hasattr(X, "tocsr"):
        return False
    return hasattr(X, "__iter__")


class StreamingTensorPower(ClassNamePrefixFeaturesOutMixin, TransformerMixin, PrivateEstimatorMixin,
                           BaseEstimator):
    r"""Online tensor power method: orthogonal decomposition of the third moment of a stream.

    Finds ``k`` orthonormal components ``v_i`` and eigenvalues ``lambda_i`` with
    ``E[x (x) x (x) x] ~ sum_i lambda_i v_i^(x)3`` from rows that arrive in chunks
    (Wang & Anandkumar 2016, Alg. 2). Each power step of each component reads a fresh block of
    ``batch_size`` rows, shared by the ``n_restarts`` candidates, so the whole run reads
    ``n_components * n_iter * batch_size`` rows once each; memory is O(d (k + L)) plus one chunk,
    and neither the d x d x d moment nor any d x d matrix is formed.

    Parameters
    ----------
    n_components : int, default=1
        Number of components k (at most n_features). The stream needs
        ``n_components * n_iter * batch_size`` rows, so the default asks for the top one only.
    n_restarts : int, default=10
        Number of random candidates L per component. The theory asks for L = Omega(k log k).
    n_iter : int, default=10
        Power iterations R per component, each on its own block.
    batch_size : int or "auto", default="auto"
        The block size ``n``: how many rows one power update averages over (all L candidates share
        them). ``"auto"``: on an array, whose length ``n_samples`` is public, the largest block
        that finishes every component in one pass, ``n_samples // (n_components * n_iter)``, so
        every row but fewer than ``n_components * n_iter`` is used; on a stream of unknown length
        (``partial_fit``, an iterable of batches), 1000. Not the chunk size: ``partial_fit``
        takes chunks of any size, and a block may span
        several chunks or a chunk several blocks. It is public, as is the stream's length. Memory
        does not grow with it (micro-blocks of at most 4 MiB of rows) but with the chunks given:
        a chunk too large for the memory left is refused, by its shape, before it is read
        (:class:`~dptensor.MemoryRefusedError`), and the stream goes on.
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` is the non-private method.
    delta : float or None, default=None
        Privacy target; ``None`` means the accountant's delta, else 1e-5. A private ``fit`` on an
        array warns (``PrivacyWarning``) when delta is not below ``1/n_samples``; a stream of
        unknown length is not checked.
    data_norm : float or None, default=None
        Public bound B on row norms; rows are clipped to ``||x|| <= B``. Required when epsilon is
        finite. Choose it from public knowledge, never from the data.
    max_passes : int, default=1
        ``fit`` on a finite array (or a re-iterable of batches) cycles it up to this many times
        until all components are found. Must be 1 when private: a row may enter one block only.
    accountant : PrivacyAccountant or None, default=None
        Records the stream's cost when it starts.
    random_state : None, int, RandomState or Generator, default=None
        Starts and noise. ``None`` (fresh entropy) is the only choice fit for a real release.
    verbose : int, default=0
        Print a line when each component is found.

    Attributes
    ----------
    components_ : ndarray of shape (n_components_done, n_features)
        The components found so far, as unit rows (all ``n_components`` once the stream is long
        enough), in the order found.
    eigenvalues_ : ndarray of shape (n_components_done,)
        Their eigenvalue estimates ``lambda~`` (measured at the last-but-one iterate, as in Alg. 2).
    n_components_done_ : int
        How many components are finished.
    batch_size_ : int
        The block size used (``batch_size``, or the one ``"auto"`` chose).
    n_samples_seen_ : int
        Rows consumed by the method (rows offered after the last component are not read); with
        groups, the groups consumed (their row count is private).
    privacy_cost_ : PrivacyCost
        The stream's cost: one Gaussian release (``n_queries=1``) by parallel composition.
    n_features_in_ : int
    feature_names_in_ : ndarray of str, only when the first chunk had string column names.

    Notes
    -----
    **Privacy unit and guarantee.** Neighbouring streams differ in one row (replace one). Rows
    are clipped to ``data_norm`` = B. Each block releases its L vectors ``u~`` and L eigenvalue
    estimates ``lambda~``, a vector of l2 sensitivity ``2 B^3 sqrt(2L) / n``
    (:func:`block_sensitivity`), with Gaussian noise of std ``z`` times that. A block's release
    depends on earlier releases (its candidates and the deflation) but on data disjoint from
    theirs: for two neighbouring streams, every block but the one holding the changed row
    computes the same function of the same rows given the same history, so it adds no privacy
    loss, and the stream as a whole is exactly ``1/z``-GDP, one release's worth, whatever k and
    R. The noise multiplier is ``z = calibrate_gaussian(epsilon, delta, 1)``, the least any
    calibration can add, and the accountant records one ``GaussianEvent(z, 1)`` when the stream
    starts (the first ``partial_fit``, or ``fit``), before anything is released. Released:
    ``components_``, ``eigenvalues_`` and every later block's candidates, all post-processing of
    the noisy block releases; the row counts are public.

    **What is refused when private.** The guarantee needs every row in at most one block, which
    the estimator enforces where it can know it: ``max_passes > 1`` raises ``ValueError``; a
    stream that ``fit`` ran is closed, so a later ``partial_fit`` (feeding more rows to that
    state, typically the same data again) raises ``RuntimeError``; ``fit`` again starts a new
    stream and records a new cost. When streaming through ``partial_fit`` yourself, feeding each
    row once is your promise: the estimator cannot tell a repeated row from a fresh one.

    **Groups of rows.** ``fit(X, groups=labels)`` (X one array in memory) protects each group
    (rows sharing a label: one person's rows) as one unit. The groups, not the rows, are cut into
    blocks: a permutation of the groups drawn from the fit's generator (independent of the data)
    is cut into blocks of ``batch_size`` groups (``"auto"``: ``n_groups // (n_components *
    n_iter)``), so each group lies in one block. Each group's grid rows are scaled together so
    that ``sum_i ||x_i||^3 <= data_norm^3`` and every block's queries are exact sums over its
    groups, divided by ``batch_size``: replacing a group moves one block's release by at most
    :func:`block_sensitivity` with ``n`` counting groups, and parallel composition holds as for
    rows. ``n_samples_seen_`` counts groups; ``privacy_cost_.unit`` and the ledger say ``"group
    of rows"``. Refused before any spend: bad labels, ``epsilon=inf``, dask, an iterable of
    batches, too few groups, and ``partial_fit`` (``derivations/streaming_tensor_power.rst``).

    **After the last component** further rows are neither read nor counted (``fit`` stops
    drawing from its iterable). ``fit`` warns when the stream ends first; ``components_`` then
    holds the components finished so far.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> V = np.linalg.qr(rng.standard_normal((8, 2)))[0].T          # two orthonormal rows
    >>> H = rng.exponential(size=(30000, 2)) - 1.0                  # skewed, zero mean
    >>> X = H @ V
    >>> est = StreamingTensorPower(2, n_restarts=5, n_iter=5, batch_size=3000,
    ...                            random_state=0).fit(X)
    >>> est.components_.shape, est.n_samples_seen_
    ((2, 8), 30000)
    >>> bool(np.all(np.max(np.abs(est.components_ @ V.T), axis=1) > 0.97))
    True
    """

    _stream_attributes = ("_stream", "_stream_params")

    _search_tag = SearchTag(groups=True)  # fit(X, groups=...) bounds a group of rows

    def __init__(self, n_components=1, *, n_restarts=10, n_iter=10, batch_size="auto",
                 epsilon=np.inf, delta=None, data_norm=None, max_passes=1, accountant=None,
                 random_state=None, verbose=0):
        self.n_components = n_components
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.batch_size = batch_size
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.max_passes = max_passes
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ fitting

    def fit(self, X, y=None, *, groups=None):
        """Stream ``X`` from a fresh state: an array (n_samples, n_features) or an iterable of them.

        A list or tuple is one array of rows; pass ``iter(batches)`` or a generator to stream
        batches. A finite array, or an iterable that can be iterated again, is cycled up to
        ``max_passes`` times until every component is found (non-private only). Reading stops as
        soon as the last component is found.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features), or an iterable of batches
            An array (NumPy or dask) is checked whole before anything is spent: a NaN or an
            infinity in it is refused with ``ValueError``. An iterable of batches is a stream, as
            with :meth:`partial_fit`: when private, a row with a NaN or an infinity, in any batch,
            is used as a zero row (see :meth:`partial_fit`); when not, it is refused.
        y : ignored
        groups : array-like of shape (n_samples,) or None
            Rows sharing a label are one person, protected as a whole (X one array in memory,
            private): ``batch_size`` then counts groups. See the class Notes, "Groups of rows".

        Returns
        -------
        self
        """
        self._reset()
        if groups is not None:
            if _is_batch_iterable(X):
                raise TypeError("StreamingTensorPower.fit with groups needs X as one array: "
                                "its blocks are cut by group, which needs every group's rows "
                                "in hand, not an iterable of batches")
            return self._fit_private(X, groups)
        if _is_batch_iterable(X):  # a stream of batches: it spends at its first batch
            return self._fit_batches(X)
        return self._fit_private(X)

    def _check_passes(self) -> int:
        passes = check_positive_int(self.max_passes, "max_passes")
        if math.isfinite(self._privacy_target()[0]) and passes > 1:
            raise ValueError(f"max_passes must be 1 when epsilon is finite, got {passes}: the "
                             "privacy guarantee needs every row in at most one block")
        return passes

    def _check_data(self, X, groups=None) -> FitData:
        """One array (NumPy or Dask), checked whole before the spend; its length is public. The
        stream's noise is keyed by its blocks' rows (none are digested here)."""
        if groups is not None:
            return self._check_grouped(X, groups)
        passes = self._check_passes()
        if is_dask_array(X):  # NaN or inf refused by one pass before the spend, not mid-stream
            X = check_dask_array(self, X, reset=True)
        else:
            X = validate_private_data(self, X, reset=True, dtype=_FLOAT_DTYPES, order="C")
        self._check_enough_rows(X.shape, passes)
        self._fit_rows = X.shape[0]  # public: the length "auto" sizes the blocks by
        return FitData(arrays=(), shape=(X.shape[1],), extra=X)

    def _check_grouped(self, X, groups) -> FitData:
        """A fit whose unit is a group of rows: private, one array in memory, enough groups to
        finish every component with ``batch_size`` groups a block. ``extra``: ``(X, codes)``."""
        self._check_groups_allowed(X)
        passes = self._check_passes()
        X = validate_private_data(self, X, reset=True, dtype=_FLOAT_DTYPES, order="C")
        codes, n_groups = self._check_groups(groups, X.shape[0])
        self._check_enough_rows((n_groups, X.shape[1]), passes, unit="group")
        self._fit_rows = n_groups  # public: the number of groups "auto" sizes the blocks by
        return FitData(arrays=(), shape=(X.shape[1],), extra=(X, codes),
                       public=dict(n_rows=n_groups, chunk_rows=X.shape[0], grouped=True))

    def _plan_for(self, data: FitData) -> FitPlan:
        if data.public:  # groups: the groups size the blocks, all the rows the memory
            return self._plan(data.shape, **data.public)
        X = data.extra  # a Dask X is held one row chunk at a time: the largest sizes the memory
        chunk = max(X.chunks[0]) if is_dask_array(X) else X.shape[0]
        return self._plan(data.shape, n_rows=X.shape[0], chunk_rows=chunk)

    def _plan(self, shape, *, n_rows=None, chunk_rows=None, grouped=False) -> FitPlan:
        """The stream's parameters checked and its one Gaussian release priced, for ``shape =
        (n_features,)``, ``n_rows`` rows in all (``None``: unknown; groups, with ``grouped``)
        fed ``chunk_rows`` at once."""
        d = shape[0]
        k, L, R, n, epsilon, delta, data_norm = self._check_params(d, n_rows)
        if math.isfinite(epsilon):
            z = calibrate_gaussian(epsilon, delta, 1)
            event, sensitivity = GaussianEvent(z, 1), block_sensitivity(data_norm, n, L)
        else:
            event, z, sensitivity = NonPrivateEvent("epsilon=inf"), 0.0, 0.0
        settings = StreamSettings(n_features=d, n_components=k, n_restarts=L, n_iter=R,
                                  batch_size=n, data_norm=data_norm, sensitivity=sensitivity,
                                  max_passes=check_positive_int(self.max_passes, "max_passes"))
        memory = self._memory_estimate(n_rows if chunk_rows is None else chunk_rows, d)
        if grouped:  # the grid rows and their scaled copy, and a block's 7 L digit products
            memory = (memory[0] + (2 * chunk_rows * d + 14 * L * (d + 1)) * FLOAT, memory[1])
        return FitPlan(event=event, delta=delta, noise_multiplier=z, n_queries=1,
                       calibration="exact", memory=memory, settings=settings,
                       unit="group of rows" if grouped else "row")

    def _release(self, data: FitData, plan: FitPlan, rng) -> None:
        """Stream the array's rows (a Dask array's row chunks, pulled one at a time) through the
        blocks, cycling it up to ``max_passes`` times; stop once every component is found."""
        if data.public:
            return self._release_groups(data, plan, rng)
        X = data.extra
        stream = self._open(plan, rng, X.dtype)
        chunks = RowChunks(X) if is_dask_array(X) else (X,)
        for _ in range(plan.settings.max_passes):
            for chunk in chunks:
                self._feed(stream, chunk)
                if stream.done:
                    break
            if stream.done:
                break
        self._finish(stream)

    def _release_groups(self, data: FitData, plan: FitPlan, rng) -> None:
        """Blocks of whole groups: a permutation of the groups (from ``rng``, drawn before the
        stream's starts) cut into blocks of ``batch_size`` groups, each released once."""
        (X, codes), settings = data.extra, plan.settings
        n_groups, per_block = data.public["n_rows"], settings.batch_size
        blocks = group_blocks(codes, n_groups, per_block,
                              settings.n_components * settings.n_iter, rng)
        M = group_scale_cubes(grid_rows(X, settings.data_norm), codes, n_groups)
        stream = self._open(plan, rng, X.dtype, grouped=True)
        for rows in blocks:
            before = stream.i
            stream.feed_groups(M[rows])
            self._report(stream, before)
        self._publish(stream)
        self._finish(stream)

    def _fit_batches(self, batches):
        """``fit`` on an iterable of batches: a stream, started (and priced) by its first."""
        passes = self._check_passes()
        reiterable = iter(batches) is not batches
        for _ in range(passes):
            for batch in batches:
                self.partial_fit(batch)
                if self._stream.done:
                    break
            if self._stream is None or self._stream.done or not reiterable:
                break
        if self._stream is None:
            raise ValueError("X is an empty iterable: fit needs at least one batch of rows")
        self._finish(self._stream)
        return self

    def _finish(self, stream):
        """Close a private stream that fit ran; say when the rows ran out first (public counts)."""
        if self.privacy_cost_.private:
            stream.close()  # refused from now on: the parameters it ran with need not be held
            self._stream_params = None
        if not stream.done:
            warn(
                f"the stream ended after {self.n_samples_seen_} rows, before all components were "
                f"found ({stream.i} of {stream.k}); the method needs n_components * n_iter * "
                f"batch_size = {stream.k * stream.R * stream.n} rows. Pass more rows, a smaller "
                "batch_size or n_iter"
                + ("" if self.privacy_cost_.private else ", or a larger max_passes") + ".",
                UserWarning)

    def partial_fit(self, X, y=None, *, groups=None):
        """Feed the next chunk of rows (any number) to the stream; the first call starts it.

        The result for a given sequence of rows does not depend on how it is cut into chunks.
        When private, the first call records the whole stream's cost with the accountant.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features), or a dask array (fed chunk by chunk)
            The next rows, not modified. In a private stream a row that holds a NaN, an infinity
            or an entry that is no number (text) is used as a zero row (see Notes), as is a later
            chunk's row that is not ``n_features`` numbers (ragged rows); a non-private stream
            refuses it with ``ValueError``.
        y : ignored
        groups : None
            Refused: a group's rows could arrive in two chunks and fall in two blocks. Use
            :meth:`fit` with ``groups``.

        Returns
        -------
        self

        Notes
        -----
        A private stream spends at its first call, before its later chunks exist, so it cannot
        refuse a non-finite value in one without an error after the spend that depends on the
        data. It takes every row, in every chunk (the first too, so that cutting the stream
        elsewhere changes nothing), through one public map: a row with a NaN or an infinity
        becomes the zero row, which contributes nothing to a block's statistics but keeps its
        place among the block's ``batch_size`` rows and is counted in ``n_samples_seen_``. The map
        acts on each row alone, so the block sensitivity and the stream's guarantee are unchanged
        (``docs/derivations/streaming_tensor_power.rst``). Nothing warns or reports how many rows
        were mapped: check the rows first if that matters to you.
        """
        if groups is not None:
            raise ValueError("partial_fit takes no groups: one group's rows could arrive in two "
                             "chunks and fall in two blocks, counted in both. Use "
                             "fit(X, groups=groups)")
        if is_dask_array(X):  # Dask rows: fed chunk by chunk (the cut does not change the result)
            for chunk in RowChunks(X, skip_empty=True):
                self.partial_fit(chunk)
                if self._stream.done:
                    break  # no further chunk is computed once every component is found
            return self
        self._check_stream_attached()
        stream = getattr(self, "_stream", None)
        X = validate_stream_chunk(self, X, reset=stream is None, dtype=_FLOAT_DTYPES, order="C")
        if stream is None:
            stream = self._start(X.shape[1], X.dtype, X.shape[0])
        else:
            self._check_continuation(stream)
            # a later chunk, larger maybe: refused by its shape alone, and the stream goes on
            check_fits(X.size * FLOAT, "StreamingTensorPower.partial_fit",
                       "Pass the rows in smaller chunks (the result does not depend on the cut)")
        self._feed(stream, X)
        return self

    def _feed(self, stream, X):
        before = stream.i
        stream.feed(np.ascontiguousarray(X, dtype=stream.dtype))
        self._report(stream, before)
        self._publish(stream)

    def _report(self, stream, before):
        """With ``verbose``, a line for each component finished (public counts and releases)."""
        if self.verbose:
            unit = "groups" if stream.grouped else "rows"
            for i in range(before, stream.i):
                print(f"[StreamingTensorPower] component {i + 1}/{stream.k}: "
                      f"eigenvalue {stream.eigenvalues[i]:.4g} after {stream.n_seen} {unit}")

    def _check_params(self, d, n_rows=None):
        """Every parameter checked, for a stream of d features and ``n_rows`` rows (None: unknown):
        ``(k, L, R, n, epsilon, delta, data_norm)``."""
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components={k} must be <= n_features={d}: "
                             "the components are orthonormal")
        L = check_positive_int(self.n_restarts, "n_restarts")
        R = check_positive_int(self.n_iter, "n_iter")
        if isinstance(self.batch_size, str) and self.batch_size == "auto":
            # a function of the public length only; 1 when too short, which the length check refuses
            n = STREAM_BATCH_SIZE if n_rows is None else max(1, int(n_rows) // (k * R))
        else:
            n = check_positive_int(self.batch_size, "batch_size")
        check_verbose(self.verbose)
        epsilon, delta = self._privacy_target()
        return k, L, R, n, epsilon, delta, check_data_norm(self.data_norm, epsilon)

    def _memory_estimate(self, n_rows, d):
        """``(bytes, advice)``: the peak allocation of a stream of ``d`` features fed ``n_rows``
        validated rows at once, in float64: one micro-block's buffer, clipped rows and products,
        and the stream's state, a few d x L arrays whatever its length (``n_rows`` is for a
        search, which passes the rows of the whole fit)."""
        k, L, _, n = self._check_params(d, n_rows)[:4]
        micro = max(1, min(n, MICRO_BLOCK_BYTES // (d * FLOAT), int(n_rows)))
        peak = 3 * micro * (d + 2 * L) + 8 * d * L + k * d
        return peak * FLOAT, ("Pass the rows in smaller chunks (partial_fit, or an iterable of "
                              "batches)")

    def _start(self, d, dtype, n_rows) -> TensorPowerStream:
        """Price and spend the stream of d features, then open it (``n_rows``: the rows of the
        first chunk, held at once). A refused budget leaves no stream."""
        plan = self._plan((d,), n_rows=getattr(self, "_fit_rows", None), chunk_rows=n_rows)
        self.privacy_cost_, rng = self._spend_plan(plan, FitData(arrays=(), shape=(d,)))
        return self._open(plan, rng, dtype)

    def _open(self, plan: FitPlan, rng, dtype, grouped: bool = False) -> TensorPowerStream:
        """The stream's state, after its spend: recorded before its first block is released."""
        settings = plan.settings
        self._hold_stream_params()
        self.batch_size_ = settings.batch_size
        digest = None if self.random_state is None else RowDigest(dtype, settings.n_features)
        self._stream = TensorPowerStream(
            d=settings.n_features, dtype=dtype, n_components=settings.n_components,
            n_restarts=settings.n_restarts, n_iter=settings.n_iter,
            batch_size=settings.batch_size, data_norm=settings.data_norm,
            sensitivity=settings.sensitivity, noise_multiplier=plan.noise_multiplier, rng=rng,
            verbose=self.verbose, digest=digest, grouped=grouped)
        return self._stream

    def _check_enough_rows(self, shape, passes, unit="row"):
        """Refuse, before any spend, a fit whose rows (or groups) cannot finish every
        component."""
        if len(shape) != 2 or 0 in shape:
            return  # partial_fit's validation names the problem
        n_rows, d = shape
        k, _, R, n, epsilon, delta, _ = self._check_params(d, n_rows)
        if unit == "row":  # a stream of known length: its n is public (groups: checked already)
            self._check_delta_for(n_rows, epsilon, delta)
        if n_rows * passes < k * R * n:
            name = "n_samples" if unit == "row" else "the number of groups"
            raise ValueError(f"{name} = {n_rows} is too few (over max_passes={passes}): the "
                             f"method needs n_components * n_iter * batch_size = {k * R * n} "
                             f"{unit}s. Pass more {unit}s, or a smaller batch_size or n_iter")

    def _check_continuation(self, stream):
        if stream.closed:
            raise RuntimeError("this private stream was closed by fit: feeding it more rows could "
                               "put a row in a second block (say a second pass over the same "
                               "data), which the privacy guarantee does not cover. Call fit again "
                               "for a new stream (a new cost), or stream with partial_fit only.")
        self._check_stream_params()

    def _publish(self, stream):
        done = stream.i
        self.components_ = stream.components[:done].copy()
        self.eigenvalues_ = stream.eigenvalues[:done].copy()
        self.n_components_done_ = done
        self.n_samples_seen_ = stream.n_seen

    def _reset(self):
        self._stream = self._stream_params = None
        self._stream_detached = False
        self._fit_rows = None
        for name in ("components_", "eigenvalues_", "n_components_done_", "n_samples_seen_",
                     "batch_size_",
                     "privacy_cost_", "n_features_in_", "feature_names_in_"):
            self.__dict__.pop(name, None)

    # ------------------------------------------------------------------ using the fit

    def transform(self, X):
        """Project X on the components found: ``X @ components_.T``.

        The result has shape ``(n_samples, n_components_done_)``.
        """
        check_is_fitted(self, "components_")
        if self.n_components_done_ == 0:
            raise NotFittedError("no component is finished yet: stream more rows (the method needs "
                                 "n_iter * batch_size rows per component)")
        if is_dask_array(X):  # a lazy dask projection, computed where the rows are
            X = check_dask_array(self, X, reset=False, check_finite=False)
        else:
            X = validate_private_data(self, X, reset=False, dtype=_FLOAT_DTYPES)
        return X @ self.components_.T.astype(X.dtype, copy=False)

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    # ------------------------------------------------------------------ pricing and scoring
    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` rows would
        record.

        Computed from the parameters alone with the fit's own plan: no data, no spend. Refuses, as
        ``fit`` does, a length too short to finish every component. Returns a
        :class:`~dptensor.PrivacyCost`.
        ``groups=True``: preview a fit given groups; ``n_samples`` is then the number of groups
        (the fit's unit a group of rows, priced by the same plan).
        """
        n_samples = check_positive_int(n_samples, "n_samples")
        d = check_positive_int(n_features, "n_features")
        grouped = self._preview_grouped(groups)
        self._check_params(d)
        self._check_enough_rows((n_samples, d), self._check_passes(),
                                unit="group" if grouped else "row")
        # grouped: the rows' count is unknown before the data; the groups stand for it (memory)
        return self._preview_plan(self._plan((d,), n_rows=n_samples, grouped=grouped,
                                             chunk_rows=n_samples if grouped else None))

    def _score_units(self, X, y=None):
        """Per-row moment-fit scores and their public range (see
        :func:`~dptensor.algorithms.tensor_power.moment_fit_scores`)."""
        check_is_fitted(self, "components_")
        X = validate_private_data(self, X, reset=False, dtype=_FLOAT_DTYPES)
        return moment_fit_scores(X, self.components_, self.eigenvalues_, self.data_norm)

    def score(self, X, y=None):
        """Moment fit on rows: ``(||T||^2 - ||T - T_hat||^2) / data_norm^6``, higher is better.

        As :meth:`PrivateTensorDecomposition.score
        <dptensor.PrivateTensorDecomposition.score>`: each row's share lies in [-3, 2], so a
        replaced row moves the mean over ``n`` rows by at most ``5/n``. ``y`` is ignored; the
        score reads ``X`` exactly (it is not private).
        """
        return self._mean_score(X, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
