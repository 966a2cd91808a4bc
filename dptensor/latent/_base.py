"""The fit the spectral latent models share: validate, price, release moments, whiten, decompose."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .._base import (FitData, FitPlan, NoisePreview, PrivateEstimatorMixin, SearchTag,
                     warn_noise_dominated)
from .._guards import as_dtype
from .._memory import FLOAT
from .._validation import check_positive_int, check_verbose, integer_scalar
from ..accounting.composition import gdp_mu
from ..accounting.events import NonPrivateEvent
from ..algorithms.dask import is_dask_array, reduce_row_chunks
from ..algorithms.group_moments import (group_layout, group_reduce, unit_rounding,
                                        unit_whitening_roundings)
from ..algorithms.moments import decompose_whitened, m2_noise_level, n_third_queries, plan_noise
from ..algorithms.power import MAX_DENSE_FEATURES, auto_n_iter
from ..mechanisms.releases import clip_factors

__all__ = ["SpectralLatentModel", "LatentSettings", "fold_in", "input_float", "auto_doc_clip",
           "AUTO_DOC_CLIP"]


@dataclass(frozen=True)
class LatentSettings:
    """What a latent fit's release step needs, decided before the spend: k, the third moment's
    release (``"perturb"`` or ``"power"``) and the noise plan of every release."""

    n_components: int
    method: str
    noise: object


#: Rows per block when in-memory rows are held in a narrower type than float64 (float32): each
#: block is cast and its sums run in float64 (float32's rounding, 2**-24 per operation, would
#: swamp the sensitivity: ``docs/derivations/latent.rst``, "Rounding"), never a whole copy.
BLOCK_ROWS = 4096


class ClippedRows:
    """Dense rows clipped to a bound, held as the rows and one clip factor per row, never as a
    clipped copy: each block read is :func:`~dptensor.mechanisms.clip_rows`'s rows, bit for bit
    (the same factors, the same products), made when it is read."""

    def __init__(self, X, data_norm):
        self.X, self.shape, self.dtype = X, X.shape, X.dtype
        self.factors = clip_factors(X, data_norm)
        eps = np.finfo(X.dtype).eps
        if eps > np.finfo(np.float64).eps:  # as clip_rows: float32 rows aimed below the bound
            self.factors = np.where(self.factors < 1.0, self.factors * (1.0 - 4.0 * eps),
                                    self.factors)
        self.factors = self.factors.astype(X.dtype, copy=False)

    def __len__(self):
        return len(self.X)

    def block(self, start, stop):
        """The clipped rows ``start:stop``: the rows themselves (a read-only view) where no row
        of the block is clipped (``x * 1`` is ``x``, bit for bit), else a new array."""
        factors = self.factors[start:stop]
        if factors.min(initial=1.0) >= 1.0:
            return self.X[start:stop]
        with np.errstate(all="ignore"):  # as clip_rows: a factor may underflow to 0
            return self.X[start:stop] * factors[:, None]


def float64_reduce(rows, partial, *args):
    """``partial(rows, *args)`` (a tuple of sums over rows), in float64: as it is for float64 or
    sparse rows, else added up over float64 copies of blocks of :data:`BLOCK_ROWS` rows (and
    over the blocks of :class:`ClippedRows`)."""
    clipped = isinstance(rows, ClippedRows)
    if not clipped and (not isinstance(rows, np.ndarray) or rows.dtype == np.float64):
        return partial(rows, *args)
    total = None
    for start in range(0, max(len(rows), 1), BLOCK_ROWS):
        block = rows.block(start, start + BLOCK_ROWS) if clipped \
            else rows[start:start + BLOCK_ROWS]
        part = partial(block.astype(np.float64, copy=False), *args)
        total = part if total is None else tuple(a + b for a, b in zip(total, part))
    return total


def _stored_floats(X) -> int:
    """The numbers ``X`` holds: every entry of a dense array; a sparse matrix's stored entries
    and their indices (a count the data set: see the privacy guide, "Memory")."""
    if hasattr(X, "nnz"):
        return int(X.nnz) * 2 + X.shape[0] + 1
    return int(np.prod(X.shape))


#: The floor of a topic-word probability when words are scored (a clipped topic has exact zeros).
TINY = 1e-12


def fold_in(C, Phi, alpha, n_steps):
    """Each document's topic proportions by ``n_steps`` fixed-point steps (see ``transform``).

    Returns ``(theta (n, k), p)`` with ``p`` the probability of each stored count's word under its
    document's proportions (aligned with ``C.data``).
    """
    Phi = np.maximum(Phi, TINY)
    k, n = Phi.shape[0], C.shape[0]
    rows = np.repeat(np.arange(n), np.diff(C.indptr))
    theta = np.full((n, k), 1.0 / k)
    PhiT = Phi[:, C.indices].T  # (nnz, k)
    for _ in range(n_steps):
        p = np.einsum("zk,zk->z", theta[rows], PhiT)
        ratio = sp.csr_matrix((C.data / p, C.indices, C.indptr), shape=C.shape)
        theta = theta * (ratio @ Phi.T) + alpha
        theta /= theta.sum(axis=1, keepdims=True)
    return theta, np.einsum("zk,zk->z", theta[rows], PhiT)


#: ``doc_clip="auto"``: ``(least, most, q0)``. The clip is ``sqrt(q / q0)`` within
#: ``[least, most]``, ``q = n mu / sqrt(d)`` (``mu`` the fit's Gaussian-DP parameter): the pair
#: moment's signal against its noise, whose operator norm grows like ``sqrt(d) / (n mu)``. A
#: smaller clip halves the noise where it swamps the topics, at a bias that wins only there: at
#: 2000 words, 10 topics, 10^4 documents, epsilon = 1 (q = 60) 0.5 beat 1 (l1 topic error 0.77
#: and 0.86 against 1.02 and 1.10, two seeds), and at 10^5 documents (q = 300 and 600) 1 beat
#: 0.75 and 0.5 (``benchmarks/results/latent_grid.md``, ``docs/derivations/latent.rst``).
AUTO_DOC_CLIP = (0.5, 1.0, 240.0)


def auto_doc_clip(n: int, d: int, epsilon: float, delta: float) -> float:
    """``doc_clip="auto"``'s clip from public values only (:data:`AUTO_DOC_CLIP`): ``n`` the
    number of units (documents, or groups), ``d`` the vocabulary, the fit's target."""
    least, most, q0 = AUTO_DOC_CLIP
    q = float(n) * gdp_mu(epsilon, delta) / np.sqrt(float(d))
    return float(np.clip(np.sqrt(q / q0), least, most))


def input_float(X):
    """float32 when X holds float32 (an array, a sparse or Dask array, or a DataFrame whose
    columns all are), else float64: the type scikit-learn's estimators keep in their outputs."""
    dtypes = getattr(X, "dtypes", None)  # a DataFrame's columns
    if dtypes is not None and not hasattr(X, "dtype"):
        return np.float32 if len(dtypes) and all(t == np.float32 for t in dtypes) else np.float64
    return np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64


class SpectralLatentModel(PrivateEstimatorMixin, BaseEstimator):
    """Base class: a subclass supplies its moments, its constants and how parameters map back.

    Hooks (each a function of the data or of released values only). ``prepared`` is a dict local
    to one fit (the prepared rows, the public bounds, released by-products such as a variance): it
    is never stored on the estimator, so nothing unreleased outlives the fit, even a failed one.

    * ``_validate(X, reset)`` -> X (in memory, or a Dask array left lazy);
    * ``_prepare(X, epsilon)`` -> ``prepared``: checks the model's own parameters, prepares the
      rows, and sets the public plan keys ``"power"`` (whether the whitening comes from the power
      method, see :meth:`_use_power`) and ``"n_first"`` (the number of first-moment releases);
    * ``_release_first(prepared, plan, rng)`` -> the released mean (it may leave other released
      first-moment values in ``prepared``);
    * ``_release_whitening(prepared, mean, plan, rng)`` -> a
      :class:`~dptensor.algorithms.moments.Whitening` from the released second moment: Analyze Gauss
      on the d x d matrix, or :func:`~dptensor.algorithms.moments.power_subspace` (never d x d);
    * ``_whitened_third(prepared, whitening, mean)`` -> ``(data, correction, sensitivity,
      rounding)`` (``rounding``: the data part's :class:`~dptensor.mechanisms.Rounding`);
    * ``_recover(prepared, components, eigenvalues, whitening, mean)`` sets the fitted attributes;
    * ``_refine(prepared, rows)``, only without privacy: improves them on the data (default:
      nothing);
    * ``_m2_noise(prepared, n, plan)`` -> ``(std, signal_bound)``: the std of the released second
      moment's noise on each entry of ``M2 u`` (:attr:`~dptensor.algorithms.moments.Whitening.
      noise`) and the largest eigenvalue of ``M2`` the public bound allows, from public values
      (for :meth:`expected_noise`; a fit's whitening records its own).
    """

    #: What a noise-dominated fit's warning advises.
    _advice = ("Use fewer components, more data, a larger epsilon or a tighter bound (data_norm, "
               "doc_clip).")

    _unit = "row"  # the privacy unit, as named in warnings
    # fit(X, groups=...) bounds a group of rows (a search still refuses these models: their
    # score, a log-likelihood, has no public per-unit bound)
    _search_tag = SearchTag(groups=True)
    # whether the second moment's and the third moment's sensitivities are Frobenius-norm bounds
    # of the whole symmetric array's change, so that its releases may use that geometry
    _frobenius = False

    def _check_common(self, d: int) -> int:
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d} (the whitening needs k "
                             f"independent directions), got {k}")
        check_positive_int(self.n_restarts, "n_restarts")
        check_positive_int(self.n_iter, "n_iter")
        if self.method not in ("auto", "perturb", "power"):
            raise ValueError("method must be one of ('auto', 'perturb', "
                             f"'power'), got {self.method!r}")
        whitening = integer_scalar(self.whitening)  # a 0-d array of an int is that int
        words = self._vocabulary and isinstance(whitening, numbers.Integral) and not \
            isinstance(whitening, bool)
        # more words than the vocabulary is refused, as n_components > n_features is: a silent
        # clamp would fit the dense release while the caller asked for (and reports) m columns
        if words and not k <= whitening <= d:
            raise ValueError(f"whitening={self.whitening} words: give at least n_components={k} "
                             f"(the whitening needs k independent directions) and at most "
                             f"n_features={d} (whitening='dense' takes them all)")
        if not words and (not isinstance(self.whitening, str)
                          or self.whitening not in ("auto", "dense", "power")):
            raise ValueError("whitening must be one of ('auto', 'dense', 'power')"
                             f"{' or a number of words' if self._vocabulary else ''}, "
                             f"got {self.whitening!r}")
        check_verbose(self.verbose)
        return k

    def _use_power(self, d: int, private: bool) -> bool:
        """Whether the whitening comes from the power method (public: d, parameters, privacy)."""
        if not isinstance(self.whitening, str):  # a number of words: their d x m columns
            return False
        if self.whitening != "auto":
            return self.whitening == "power"
        return d > self._dense_max(private)

    #: Whether ``whitening`` may be a number of words (the topic model's,
    #: :mod:`~dptensor.algorithms.vocabulary`).
    _vocabulary = False

    def _whitening_size(self, n: int, d: int, power: bool) -> int:
        """The features the whitening's subspace is taken over (public: n units, d, the
        parameters); all of them unless the model chooses fewer."""
        return d

    def _context(self, X, rows, epsilon, **extra) -> dict:
        """A fit's ``prepared`` dict: the prepared rows and the public keys the plan reads (from
        the shape only); one first-moment release (the mean) unless the model says more."""
        n, d = X.shape
        private = bool(np.isfinite(epsilon))
        return {"rows": rows, "n": n, "d": d, "private": private,
                "power": self._use_power(d, private), "n_first": 1, **extra}

    @staticmethod
    def _rounding(prepared, total, inner=0):
        """``(Rounding, margin)`` of a release over the fit's units (rows, documents, or groups:
        :func:`~dptensor.algorithms.group_moments.unit_rounding`); add the margin to the
        sensitivity (0 without groups)."""
        return unit_rounding(total, prepared["n"], inner, prepared.get("groups"))

    @staticmethod
    def _whitening_roundings(prepared, p, unit_total, offset=0.0):
        """The second moment's ``(Rounding, margin)`` pairs (``whitening_roundings``'s three)."""
        return unit_whitening_roundings(prepared["n"], prepared["d"], p, unit_total, offset,
                                        prepared.get("groups"))

    def _dense_max(self, private: bool) -> int:
        """``whitening="auto"``: the largest d whose d x d second moment is formed."""
        return MAX_DENSE_FEATURES

    def _noise_plan(self, prepared, k, epsilon, delta):
        """The fit's method and noise plan, from public parameters and the data's shape only."""
        # "auto": one perturbation of the k^3 tensor (noise of operator norm ~1.7 sqrt(k) z s)
        # beats k L (R+1) noisy power queries (each ~sqrt(k) z s sqrt(k L (R+1))) at row level.
        method = "perturb" if self.method == "auto" else self.method
        power = prepared["power"] and np.isfinite(epsilon)
        n_power = auto_n_iter(prepared["d"], True) if power else 0
        n_third = n_third_queries(method, k, self.n_restarts, self.n_iter)
        return method, plan_noise(epsilon, delta, n_third, n_power, prepared["n_first"],
                                  self._shares(prepared, k))

    def _shares(self, prepared, k):
        """How the fit splits its Gaussian-DP budget (public: the shape and the parameters only);
        ``None`` takes :data:`~dptensor.algorithms.moments.SHARES`."""
        return None

    def privacy_cost(self, n_samples, n_features, *, groups=False):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` data would
        record.

        Computed from the parameters alone, with the fit's own plan and checks: no data is read
        and nothing is spent. Returns a :class:`~dptensor.PrivacyCost`.
        ``groups=True``: preview a fit given groups; ``n_samples`` is then the number of groups
        (the fit's unit a group of rows, priced by the same plan).
        """
        return self._preview_rows(n_samples, n_features, groups)

    def expected_noise(self, n_samples, n_features):
        """The noise level a ``fit`` on ``n_samples`` x ``n_features`` data would record in
        ``m2_eigenvalues_noise_``, against the largest eigenvalue of ``M2`` the public bound allows:
        a :class:`~dptensor.NoisePreview`, from the fit's own plan (no data, no spend), to choose
        epsilon before spending it. The whitening, and every component, needs top eigenvalues of
        ``M2`` above twice ``noise``; when that is near ``signal_bound`` no data can be learned.
        """
        n, d = (check_positive_int(n_samples, "n_samples"),
                check_positive_int(n_features, "n_features"))
        plan = self._plan((n, d))
        public = self._prepare(np.zeros((0, d)), self._privacy_target()[0])
        std, bound = self._m2_noise(public, n, plan.settings.noise)
        size = self._whitening_size(n, d, public["power"])
        noise = m2_noise_level(std, size, plan.settings.n_components, public["power"])
        return NoisePreview(noise, bound, "m2_eigenvalues_noise_")

    def fit(self, X, y=None, *, groups=None):
        """Learn the model from X by the method of moments; ``y`` is ignored. Returns self.
        ``groups`` (shape (n_samples,)): rows sharing a label are one person, protected as a
        whole (a private fit on rows in memory); see the class Notes, "Groups of rows"."""
        return self._fit_private(X) if groups is None else self._fit_private(X, groups)

    def _check_data(self, X, groups=None) -> FitData:
        """X validated (a seeded fit's noise is keyed by the validated counts) and its rows
        prepared (``extra``: the fit's ``prepared`` dict, see the class doc), before the spend.
        With ``groups`` the rows are sorted by group (:func:`~dptensor.algorithms.group_moments.
        group_layout`) and ``n`` is the public number of groups."""
        if groups is not None:
            self._check_groups_allowed(X)
        dtype = input_float(X)  # before validation: LDA's turns counts into float64
        X = self._validate(X, reset=True)
        self._check_common(X.shape[1])
        epsilon, delta = self._privacy_target()
        if groups is None:
            prepared = self._prepare(X, epsilon)
            prepared["dtype"] = dtype
            self._check_delta_for(X.shape[0], epsilon, delta, unit=self._unit)
            return FitData(arrays=(X,), shape=X.shape, extra=prepared)
        codes, n_groups = self._check_groups(groups, X.shape[0])
        layout = group_layout(codes, n_groups)
        X = X[layout.order]
        prepared = self._prepare(X, epsilon)
        prepared.update(dtype=dtype, groups=layout, n=n_groups)
        return FitData(arrays=(X, codes[layout.order]), shape=(n_groups, X.shape[1]),
                       extra=prepared, public=dict(n_rows=X.shape[0], grouped=True))

    def _plan_for(self, data: FitData) -> FitPlan:
        X = data.arrays[0]
        return self._plan(data.shape, stored=None if is_dask_array(X) else _stored_floats(X),
                          **data.public)

    def _plan(self, shape, *, stored=-1, n_rows=None, grouped=False) -> FitPlan:
        """The fit's parameters checked and its releases priced, from the shape of X; ``stored``
        the numbers its rows hold (``None``: rows on Dask workers; by default dense rows).
        ``grouped``: ``shape`` is ``(n_groups, d)``, ``n_rows`` sizing the memory (the rows'
        sorted copy counted as one more)."""
        n, d = shape
        unit = "group of rows" if grouped else self._unit
        k = self._check_common(d)
        epsilon, delta = self._privacy_target()
        # the hooks read only the shape of X here (no rows): the plan depends on d alone
        public = self._prepare(np.zeros((0, d)), epsilon)
        method, noise = self._noise_plan(public, k, epsilon, delta)
        n = n if n_rows is None else n_rows
        stored = n * d if stored == -1 else stored
        memory = self._fit_memory(n, d, k, public["power"], stored)
        if grouped:  # the rows sorted by group: one more copy, made before the spend
            memory = (memory[0] + stored * FLOAT, memory[1])
        if not noise.private:
            return FitPlan(event=NonPrivateEvent("epsilon=inf"), delta=delta, memory=memory,
                           settings=LatentSettings(k, method, noise), unit=unit)
        return FitPlan(event=noise.event, delta=delta, noise_multiplier=noise.z_third,
                       n_queries=noise.n_queries, calibration="exact", memory=memory,
                       settings=LatentSettings(k, method, noise), unit=unit)

    def _release(self, data: FitData, plan: FitPlan, rng) -> None:
        """Release the moments, whiten, decompose and map back (``prepared``: see the class doc)."""
        prepared, settings = data.extra, plan.settings
        noise = settings.noise
        mean = self._release_first(prepared, noise, rng)
        whitening = self._release_whitening(prepared, mean, noise, rng)
        tensor, correction, sensitivity, rounding = self._whitened_third(prepared, whitening, mean)
        rows = prepared.pop("rows")  # no release reads the data after this one
        components, eigenvalues = decompose_whitened(
            tensor, correction, settings.n_components, sensitivity=sensitivity,
            rounding=rounding, plan=noise, method=settings.method, n_restarts=self.n_restarts,
            n_iter=self.n_iter, rng=rng, verbose=self.verbose, frobenius=self._frobenius)
        self.method_ = settings.method if noise.private else "exact"
        size = prepared.get("words", prepared["d"])
        self.whitening_ = "power" if prepared["power"] else (
            "dense" if size == prepared["d"] else "vocabulary")
        self.n_samples_ = data.shape[0]
        self._recover(prepared, components, eigenvalues, whitening, mean)
        # The released M2's top eigenvalues against their noise level, a function of the plan and
        # of released values only: set and warned about after the spend (post-processing)
        self.m2_eigenvalues_ = np.asarray(whitening.values, dtype=float)
        self.m2_eigenvalues_noise_ = np.full(len(whitening.values), m2_noise_level(
            whitening.noise, size, settings.n_components, prepared["power"]))
        warn_noise_dominated(self.m2_eigenvalues_, self.m2_eigenvalues_noise_, "m2_eigenvalues_",
                             "m2_eigenvalues_noise_", self._advice)
        if not noise.private:  # a non-private fit (epsilon = inf) may refine its estimate
            self._refine(prepared, rows)
        self._cast_fitted(prepared["dtype"])

    #: The fitted arrays held in the input's float dtype: float32 rows give float32 parameters,
    #: as scikit-learn's mixtures and LDA do. Every sum and release runs in float64 before it.
    _fitted_arrays = ()

    def _cast_fitted(self, dtype) -> None:
        """The fitted arrays as float32 when X was float32 (post-processing of released values)."""
        if dtype != np.float32:
            return
        for name in self._fitted_arrays:
            setattr(self, name, as_dtype(getattr(self, name), np.float32))

    #: Copies of the rows a fit makes after its spend (the prepared rows are made before it).
    _row_copies = 0
    #: Blocks of :data:`BLOCK_ROWS` dense rows a fit holds at once after its spend (the clipped
    #: rows a :class:`ClippedRows` makes where they are read, their float64 copies).
    _block_copies = 0

    def _fit_memory(self, n, d, k, power, stored):
        """``(bytes, advice)``: the fit's peak allocation, in float64. ``stored``: the numbers the
        rows hold (``n d``; a sparse matrix's stored entries with their indices; ``None`` for
        rows on Dask workers), of which the fit makes ``_row_copies`` after its spend. Then the
        d x d second moment with its noise and eigendecomposition (or the power method's n x 2k
        and d x 2k products), the whitened rows (n x k) and the k^3 tensor with its noise."""
        p = 2 * k
        rows = self._row_copies * stored if stored is not None else 0
        n_local = n if stored is not None else 0
        # the d x d second moment, or the d x m columns of the whitening over m features
        second = (4 * n_local * p + 10 * d * p) if power else 7 * d * self._whitening_size(
            n, d, power)
        blocks = self._block_copies * min(n_local, BLOCK_ROWS) * d
        peak = rows + blocks + second + 6 * n_local * k + 8 * k**3 + 8 * d * k
        if self._vocabulary:  # the topic model's power method learned least (docs/choosing.rst)
            return peak * FLOAT, ("Use fewer words' columns (whitening=m: d x m numbers), fewer "
                                  "components, or whitening='power' (no d x m matrix, but noisier)")
        return peak * FLOAT, "Use whitening='power' (no d x d matrix), fewer features or components"

    def _memory_estimate(self, n_samples, n_features):
        """``(bytes, advice)`` of a ``fit`` on ``n_samples`` dense rows of ``n_features`` (no data
        read)."""
        n, d = int(n_samples), int(n_features)
        power = self._use_power(d, bool(np.isfinite(self.epsilon)))
        return self._fit_memory(n, d, self._check_common(d), power, n * d)

    def _refine(self, prepared, rows):
        """Non-private refinement of the fitted parameters (a model may define one); none here."""

    @staticmethod
    def _reduce(prepared, partial, *args):
        """``partial(rows, *args)`` (a tuple of sums over rows), in memory (in float64:
        :func:`float64_reduce`) or over a Dask array's row chunks (one reduction: only the sums
        reach the client); with groups, each group's rows averaged
        (:func:`~dptensor.algorithms.group_moments.group_reduce`)."""
        if prepared.get("groups") is not None:
            return group_reduce(prepared["rows"], prepared["groups"], partial, *args)
        if is_dask_array(prepared["rows"]):
            return reduce_row_chunks(prepared["rows"], partial, *args)
        return float64_reduce(prepared["rows"], partial, *args)

    @staticmethod
    def _positive(eigenvalues):
        """Eigenvalues floored just above zero (post-processing): a noisy one may be <= 0."""
        lam = np.asarray(eigenvalues, dtype=float)
        floor = 1e-6 * max(float(np.max(np.abs(lam))), np.finfo(float).tiny)
        return np.where(lam > floor, lam, floor)
