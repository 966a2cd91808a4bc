r"""PrivatePCA's methods, registered in one place: a new method is one class here and one line in
:data:`METHODS`.

A method is one way to the top-k subspace: Analyze Gauss (one noisy d x d release), the noisy
power method (``n_iter`` noisy d x p products), the clipped power method (an Analyze Gauss start,
then power steps whose rows' projections are clipped) or the streaming power method (one noisy
d x p product per block of a stream). Each class holds what differs between them, so that neither
:class:`~dptensor.PrivatePCA` nor :mod:`~dptensor.algorithms.pca_fit` compares a method's name:

* its noise plan (:meth:`PCAMethod.noise_plan`: the multipliers of every release and the event
  they make, from public settings); the batch methods share one, and differ in their number of
  spectral releases (:meth:`PCAMethod.n_queries`) and the papers' multiplier
  (:meth:`PCAMethod.paper_noise`);
* its memory (:meth:`PCAMethod.memory`);
* its spectral step (:meth:`PCAMethod.spectrum`), from what a fit path offers (a :class:`Source`:
  the d x d Gram statistic, or an operator for products);
* the noise level of its released eigenvalues (:meth:`PCAMethod.noise_level`).

Every sensitivity used is derived in ``docs/derivations/pca.rst``.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from .._memory import FLOAT
from ..accounting.calibration import calibrate_gaussian, paper_noisy_power_sigma
from ..accounting.composition import gdp_mu
from ..accounting.events import ComposedEvent, GaussianEvent
from ..mechanisms import grid_step, symmetric_gaussian_release
from .exact_entries import DIGITS
from .power import (
    MAX_DENSE_FEATURES,
    MEAN_SHARE,
    TOTAL_SHARE,
    analyze_gauss,
    auto_n_iter,
    eigenvalue_noise_level,
    noisy_power_method,
    power_schedule,
)

__all__ = ["METHODS", "CHOICES", "PCAMethod", "Source", "last_multiplier", "resolve", "clip_radius",
           "clipping_pays", "MIN_CLIPPED_FEATURES", "MAX_CLIPPED_FEATURES"]


def _runs(z) -> list:
    """``GaussianEvent(z, count)`` for each run of equal multipliers of a plan, in order: an even
    split is one event, the power method's schedule two (its early steps, its last)."""
    events = []
    for value in np.ravel(z):
        if events and events[-1].noise_multiplier == float(value):
            events[-1] = GaussianEvent(float(value), events[-1].count + 1)
        else:
            events.append(GaussianEvent(float(value), 1))
    return events


def last_multiplier(z) -> float:
    """The last (or only) multiplier of a plan: the one that sets the released error."""
    return float(np.ravel(z)[-1])


class Source(NamedTuple):
    """What one fit path offers a method's spectral step; the method calls the one it needs.

    ``gram(z)``: ``(C, sensitivity)``, the d x d statistic to release at multiplier ``z``;
    ``operator()``: ``(operator, sensitivity)`` for the power products (a sensitivity may be a
    function of the iterate). ``gauss`` and ``power``: the path's own keywords of
    :func:`~dptensor.algorithms.power.analyze_gauss` and
    :func:`~dptensor.algorithms.power.noisy_power_method` (its rounding, order or tolerance).
    ``clipped`` and ``n_rows``: the clipped power steps of :class:`ClippedPower`, where the path
    offers them.
    """

    gram: Callable[[float], tuple]
    operator: Callable[[], tuple]
    gauss: dict = {}
    power: dict = {}
    #: ``clipped(tau) -> operator`` of the clipped power steps (exact row-level fits only; the
    #: operator carries its sensitivity), and the public number of rows it sums.
    clipped: Callable[[float], object] | None = None
    n_rows: int = 0
    #: The rows' public bound ``B`` (the clipped method's choice compares its radius with it).
    bound: float = 0.0


class PCAMethod:
    """One PCA method: its noise plan, its memory, its spectral step and its noise level."""

    #: The value of ``method_`` (and of ``method=`` when :attr:`batch`).
    name = ""
    #: Whether ``fit(method=name)`` runs it (the streaming method is ``partial_fit``'s alone).
    batch = True
    #: Whether ``partial_fit`` accepts ``method=name`` (it then runs the streaming power method).
    streams = False
    #: Whether it iterates on a d x p block (so ``p = k + n_oversamples`` must be at most d).
    block = True
    #: What to change when its memory bound is refused.
    advice = ""
    #: Whether its spectral step takes the d x d Gram statistic (``Source.gram``) alone: a fit
    #: path may then compute it in the pass that makes the rows, without holding them.
    takes_gram = False

    # ------------------------------------------------------------------ the noise plan
    def n_queries(self, n_iter) -> int:
        """Its spectral releases in a fit of ``n_iter`` power steps."""
        raise NotImplementedError

    def auto_n_iter(self, n_features, private) -> int:
        """``n_iter="auto"``: :func:`~dptensor.algorithms.power.auto_n_iter`."""
        return auto_n_iter(n_features, private)

    def paper_noise(self, epsilon, delta, p, queries, neighbors):
        """The spectral multiplier(s) of ``calibration="paper"``: the papers' formulas."""
        raise NotImplementedError

    def noise_plan(self, s, calibration):
        """``(multipliers, event, n_queries)`` of a private fit with settings ``s`` (the
        estimator's public settings: epsilon, delta, p, n_iter, center, precomputed, neighbors):
        the mean and the total (row-level ``"exact"`` fits) from their own shares, then the
        spectral releases."""
        eps, delta, center = s.epsilon, s.delta, s.center
        queries = self.n_queries(s.n_iter)
        mu = gdp_mu(eps, delta)
        # Exact row-level fits release the total variance from its own share (the ratio's
        # denominator).
        total = calibration == "exact" and not s.precomputed
        z_mean = 1.0 / (mu * math.sqrt(MEAN_SHARE)) if center else 0.0
        z_total = 1.0 / (mu * math.sqrt(TOTAL_SHARE)) if total else 0.0
        z = np.broadcast_to(np.asarray(self._step_noise(s, calibration, mu, queries), dtype=float),
                            (queries,))
        events = _runs(z)  # one event per run of equal multipliers, in order
        if total:
            events.insert(0, GaussianEvent(z_total, 1))
        if center:
            events.insert(0, GaussianEvent(z_mean, 1))
        event = ComposedEvent(tuple(events)) if len(events) > 1 else events[0]
        return dict(noise=z, mean_noise=z_mean, total_noise=z_total), event, queries

    def _step_noise(self, s, calibration, mu, queries):
        """The spectral releases' multiplier(s): exact GDP or the papers' formulas."""
        if calibration == "exact":
            total = not s.precomputed
            spectral_share = (1.0 - (MEAN_SHARE if s.center else 0.0)
                              - (TOTAL_SHARE if total else 0.0))
            return power_schedule(mu * math.sqrt(spectral_share), queries)
        return self.paper_noise(s.epsilon, s.delta, s.p, queries, s.neighbors)

    # ------------------------------------------------------------------ memory
    def memory(self, n, d, p):
        """``(floats, columns)``: its arrays beyond the rows' copy (``n`` rows at once, ``p``
        columns), and the columns its exact statistics hold."""
        raise NotImplementedError

    def exact_entry_bytes(self, d) -> int:
        """Bytes of the exact entry products a private fit on a precomputed d x d matrix holds."""
        return 0

    # ------------------------------------------------------------------ the spectrum
    def spectrum(self, source: Source, rng, *, k, p, n_iter, noise, verbose=0, dtype=None):
        """The :class:`~dptensor.algorithms.power.PCAResult` of its spectral releases."""
        raise NotImplementedError

    def noise_level(self, noise_std, d, p) -> float:
        """The typical noise in a released eigenvalue
        (:func:`~dptensor.algorithms.power.eigenvalue_noise_level`)."""
        raise NotImplementedError

    def result_noise_level(self, result, d, p) -> float:
        """:meth:`noise_level` of a fit's result (a method may end on more than one route)."""
        return self.noise_level(result.noise_std, d, p)


class AnalyzeGauss(PCAMethod):
    """Analyze Gauss: one noisy d x d Gram statistic, then its top-k eigenpairs."""

    name = "analyze_gauss"
    block = False
    takes_gram = True
    advice = "Use method='power' (O(d p) memory), or fewer features"

    def n_queries(self, n_iter) -> int:
        return 1

    def paper_noise(self, epsilon, delta, p, queries, neighbors):
        return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon  # the classical calibration

    def memory(self, n, d, p):
        return 6 * d * d, d  # the matrix, its noise and its eigendecomposition

    def spectrum(self, source, rng, *, k, p, n_iter, noise, verbose=0, dtype=None):
        z = last_multiplier(noise)
        C, sensitivity = source.gram(z)
        return analyze_gauss(C, k, rng, noise_multiplier=z, sensitivity=sensitivity,
                             **source.gauss)

    def noise_level(self, noise_std, d, p) -> float:
        return eigenvalue_noise_level(noise_std, d, self.name)


class Power(PCAMethod):
    """The noisy power method: ``n_iter`` noisy d x p products, then the Ritz values."""

    name = "power"
    streams = True
    advice = "Use fewer components or rows at once (partial_fit in chunks, or a Dask array)"

    def n_queries(self, n_iter) -> int:
        return n_iter

    def paper_noise(self, epsilon, delta, p, queries, neighbors):
        sigma = paper_noisy_power_sigma(epsilon, delta, p, queries)
        if neighbors == "entry":  # noise sigma ||X||_inf, priced at sqrt(2p) ||X||_inf
            return sigma / math.sqrt(2 * p)
        return sigma / math.sqrt(p)

    def memory(self, n, d, p):
        return n * p * 2 + 12 * d * p + 4 * d, p

    def exact_entry_bytes(self, d) -> int:
        return (DIGITS + 1) * d * d * FLOAT  # the exact entry products' digits

    def spectrum(self, source, rng, *, k, p, n_iter, noise, verbose=0, dtype=None):
        operator, sensitivity = source.operator()
        return noisy_power_method(operator, k, n_iter, rng, noise_multiplier=noise,
                                  sensitivity=sensitivity, n_oversamples=p - k, verbose=verbose,
                                  dtype=dtype, **source.power)

    def noise_level(self, noise_std, d, p) -> float:
        return eigenvalue_noise_level(noise_std, p, "power")


class StreamingPower(Power):
    """The streaming power method (``partial_fit``): one release per block, the stream one event
    (parallel composition over disjoint blocks); its memory and noise level are the power
    method's, its products made by :class:`~dptensor.algorithms.streaming_power.
    StreamingPowerMethod`."""

    name = "streaming_power"
    batch = False

    def noise_plan(self, s, calibration):
        z = calibrate_gaussian(s.epsilon, s.delta, 1)
        return dict(noise=z, mean_noise=z, total_noise=0.0), GaussianEvent(z, 1), 1

    def exact_entry_bytes(self, d) -> int:
        return 0  # a stream takes rows only

    def spectrum(self, source, rng, **kw):
        raise TypeError("the streaming power method releases through its stream, not a fit path")


class ClippedPower(PCAMethod):
    r"""Analyze Gauss as a start, then ``n_iter`` power steps whose rows' projections are clipped.

    A start ``V_0``: the top-p eigenvectors of Analyze Gauss's release, at :data:`START_SHARE`
    of the spectral ``mu^2``. Then ``Y_l = sum_i x_i clip_tau(V_{l-1}^T x_i)^T + G_l``,
    ``V_l = QR(Y_l)``, the rest of the budget split as the power method's
    (:func:`~dptensor.algorithms.power.power_schedule`). A row's term has norm at most
    ``B tau``, so a step's sensitivity is ``2 B tau`` against ``sqrt(2) B^2`` unclipped: in high
    dimension the rows' projections on the top subspace are far shorter than the rows, and so is
    the noise (the idea of Liu et al.'s DP-PCA). ``tau`` is :data:`CLIP_FACTOR` times the root
    mean of the start's released top-p eigenvalues (:func:`clip_radius`): post-processing, no
    budget. Without privacy it is the exact eigendecomposition, as Analyze Gauss's.
    """

    name = "clipped_power"
    advice = AnalyzeGauss.advice

    def n_queries(self, n_iter) -> int:
        return 1 + n_iter

    def auto_n_iter(self, n_features, private) -> int:
        return CLIPPED_STEPS

    def paper_noise(self, epsilon, delta, p, queries, neighbors):
        raise ValueError("method='clipped_power' has no paper calibration: use "
                         "calibration='exact'")

    def _step_noise(self, s, calibration, mu, queries):
        if calibration != "exact":
            return self.paper_noise(s.epsilon, s.delta, s.p, queries, s.neighbors)
        share = 1.0 - (MEAN_SHARE if s.center else 0.0) - (TOTAL_SHARE if not s.precomputed
                                                            else 0.0)
        mu_s = mu * math.sqrt(share)
        start = 1.0 / (mu_s * math.sqrt(START_SHARE))
        return np.concatenate([[start], power_schedule(mu_s * math.sqrt(1 - START_SHARE),
                                                       queries - 1)])

    def memory(self, n, d, p):
        floats, _ = AnalyzeGauss().memory(n, d, p)
        return floats + n * p * 2 + 12 * d * p, d

    def spectrum(self, source, rng, *, k, p, n_iter, noise, verbose=0, dtype=None):
        z = np.ravel(noise)
        if not np.any(z > 0):  # no privacy: nothing to clip for
            return AnalyzeGauss().spectrum(source, rng, k=k, p=p, n_iter=n_iter, noise=noise)
        if source.clipped is None:
            raise TypeError("clipped power steps need a fit path that offers them (exact rows)")
        C, sensitivity = source.gram(z[0])
        rounding = source.gauss.get("rounding")  # the path's own: None for exact sums
        released = symmetric_gaussian_release(C, sensitivity, z[0], rng, rounding=rounding)
        start = analyze_gauss(released, p, rng)  # post-processing of the start's release
        tau = clip_radius(start.eigenvalues, source.n_rows)
        if not clipping_pays(tau, source.bound):  # the rest of the budget on the same Gram
            return _pooled_gauss(source, C, sensitivity, released, z, rng, k, rounding)
        del C, released
        operator = source.clipped(tau)
        result = noisy_power_method(operator, k, len(z) - 1, rng, noise_multiplier=z[1:],
                                    sensitivity=operator.sensitivity, n_oversamples=p - k,
                                    init=start.components.T, verbose=verbose, dtype=dtype,
                                    rounding=None)  # exact products
        return result._replace(n_iter=result.n_iter + 1)

    def noise_level(self, noise_std, d, p) -> float:
        return eigenvalue_noise_level(noise_std, p, "power")

    def result_noise_level(self, result, d, p) -> float:
        if result.basis is None:  # the pooled Analyze Gauss release (no iterate)
            return eigenvalue_noise_level(result.noise_std, d, "analyze_gauss")
        return self.noise_level(result.noise_std, d, p)


def _on_grid_of(source, C, sensitivity, z_0, z_l, rounding):
    """``(value, its multiplier)``: the Gram value a release at ``z_l`` takes, ``C`` being the
    one prepared at ``z_0``. An exact sum is rounded on its release's grid (``grid_step(s z)``),
    whose slack covers half that step a coordinate: a step's multiplier is below the start's, its
    grid finer, and the start's value would carry up to twice that error, a sensitivity above the
    accounted one. So a new grid takes ``source.gram(z_l)`` (the cached statistic, rounded
    again); a float sum (its ``rounding`` accounts for it) or the same grid keeps ``C``."""
    s = float(sensitivity)
    if rounding is not None or grid_step(s * float(z_l)) == grid_step(s * float(z_0)):
        return C, z_0
    return source.gram(z_l)[0], z_l


def _pooled_gauss(source, C, sensitivity, released, z, rng, k, rounding):
    r"""Analyze Gauss at the whole spectral budget from the start's release and one more release
    of the same Gram ``C`` per planned step (at that step's multiplier): their average weighted by
    ``z_l^-2`` is ``C`` plus Gaussian noise of std ``sensitivity / sqrt(sum_l z_l^-2)``, one
    Analyze Gauss release at ``mu_s``; post-processing of the planned releases. ``C`` is the
    start's value: an exact sum (``rounding`` None) rounded on the start's grid, which a step of
    another grid must not reuse (:func:`_on_grid_of`)."""
    weights = 1.0 / z ** 2
    pooled = released * weights[0]
    z_c = z[0]  # the multiplier the value C in hand is rounded for
    for z_l, w_l in zip(z[1:], weights[1:]):
        C, z_c = _on_grid_of(source, C, sensitivity, z_c, z_l, rounding)
        pooled += w_l * symmetric_gaussian_release(C, sensitivity, z_l, rng, rounding=rounding)
    pooled /= float(np.sum(weights))
    result = analyze_gauss(pooled, k, rng)
    return result._replace(n_iter=len(z), noise_std=float(sensitivity / np.sqrt(np.sum(weights))))


#: :class:`ClippedPower`'s share of the spectral ``mu^2`` for its Analyze Gauss start.
START_SHARE = 0.3
#: :class:`ClippedPower`'s clipped steps when ``n_iter="auto"``.
CLIPPED_STEPS = 2
#: :class:`ClippedPower`'s radius, times the root mean of the start's top-p released
#: eigenvalues (units of the rows' squared norm).
CLIP_FACTOR = 0.5
#: :class:`ClippedPower` clips only where the radius is at most this share of the bound
#: (:func:`clipping_pays`); else it pools its releases into Analyze Gauss.
MAX_CLIP_SHARE = 0.25


def clipping_pays(tau, bound) -> bool:
    r"""Whether the clipped steps are worth their budget: ``tau <= MAX_CLIP_SHARE B``.

    A clipped step's noise is ``2 B tau`` against Analyze Gauss's ``sqrt(2) B^2``, but it gets
    only a part of the budget (the last step half of what is left after the start) and clips some
    signal away: on the grid of ``benchmarks/bench_pca_high_d.py`` the steps win where the
    start's radius is a small share of the bound (spread-out rows: a spiked covariance at
    d >= 300) and lose where the rows' energy sits in few directions (``tau`` near ``B``).
    ``tau`` is a function of the start's release and ``n``, ``B`` public: post-processing.

    >>> clipping_pays(1.0, 10.0), clipping_pays(5.0, 10.0)
    (True, False)
    """
    return float(tau) <= MAX_CLIP_SHARE * float(bound)


def clip_radius(eigenvalues, n_rows) -> float:
    r"""The clipping radius ``tau`` of the clipped power steps, in the rows' units:
    ``CLIP_FACTOR sqrt(sum_j max(l_j, 0) / n)`` over the start's released top-p eigenvalues
    ``l_j`` of the rows' Gram matrix, so that ``tau^2`` is a fraction of the released estimate of
    ``E ||V^T x||^2``. A function of released values and the public ``n`` only; the operator puts
    it on its grid, within ``(0, B]``.

    >>> clip_radius([300.0, 100.0, -5.0], 100)
    1.0
    """
    mean = float(np.sum(np.maximum(np.asarray(eigenvalues, dtype=float), 0.0))) / max(n_rows, 1)
    return CLIP_FACTOR * math.sqrt(mean)


#: Every method by the name ``method_`` reports: a new method is one class and one line here.
METHODS: dict[str, PCAMethod] = {m.name: m for m in (Power(), AnalyzeGauss(), StreamingPower(),
                                                     ClippedPower())}

#: The values ``PrivatePCA(method=...)`` accepts: ``"auto"`` and the batch methods.
CHOICES: tuple[str, ...] = ("auto",) + tuple(n for n, m in METHODS.items() if m.batch)


#: ``method="auto"`` runs the clipped power method on private row-level data with at least this
#: many (and at most :data:`MAX_CLIPPED_FEATURES`) features (``benchmarks/bench_pca_high_d.py``).
MIN_CLIPPED_FEATURES = 300
#: The most features ``"auto"`` gives the clipped power method (its d x d start: 1.2 GB with its
#: noise and eigenvectors at d = 5000); the power method beyond.
MAX_CLIPPED_FEATURES = 5000


def resolve(method: str, n_features: int, precomputed: bool, *, private: bool = False,
            grouped: bool = False) -> PCAMethod:
    """The method ``method`` names; ``"auto"``: the clipped power method for private rows, one
    row a unit, with ``MIN_CLIPPED_FEATURES <= d <= MAX_CLIPPED_FEATURES``; else Analyze Gauss
    for rows with at most :data:`~dptensor.algorithms.power.MAX_DENSE_FEATURES` features and the
    power method for more, or for a precomputed matrix. Public settings only; ``private`` is
    False for the papers' calibration, which the clipped method does not have."""
    if grouped and method == "clipped_power":
        raise ValueError("method='clipped_power' clips each row's projection, which does not "
                         "bound a group of rows: use method='analyze_gauss' or 'power' with groups")
    if method == "auto":
        rows = not precomputed
        clipped = rows and private and not grouped and (
            MIN_CLIPPED_FEATURES <= n_features <= MAX_CLIPPED_FEATURES)
        dense = rows and n_features <= MAX_DENSE_FEATURES
        method = "clipped_power" if clipped else "analyze_gauss" if dense else "power"
    return METHODS[method]
