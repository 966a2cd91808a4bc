r"""PrivatePCA's methods, registered in one place: a new method is one class here and one line in
:data:`METHODS`.

A method is one way to the top-k subspace: Analyze Gauss (one noisy d x d release), the noisy
power method (``n_iter`` noisy d x p products) or the streaming power method (one noisy d x p
product per block of a stream). Each class holds what differs between them, so that neither
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
from .exact_entries import DIGITS
from .power import (
    MAX_DENSE_FEATURES,
    MEAN_SHARE,
    TOTAL_SHARE,
    analyze_gauss,
    eigenvalue_noise_level,
    noisy_power_method,
    power_schedule,
)

__all__ = ["METHODS", "CHOICES", "PCAMethod", "Source", "last_multiplier", "resolve"]


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
    """

    gram: Callable[[float], tuple]
    operator: Callable[[], tuple]
    gauss: dict = {}
    power: dict = {}


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
        if z[0] == z[-1]:  # an even split: one event of `queries` releases
            events = [GaussianEvent(float(z[0]), queries)]
        else:
            events = [GaussianEvent(float(z[0]), queries - 1), GaussianEvent(float(z[-1]), 1)]
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


#: Every method by the name ``method_`` reports: a new method is one class and one line here.
METHODS: dict[str, PCAMethod] = {m.name: m for m in (Power(), AnalyzeGauss(), StreamingPower())}

#: The values ``PrivatePCA(method=...)`` accepts: ``"auto"`` and the batch methods.
CHOICES: tuple[str, ...] = ("auto",) + tuple(n for n, m in METHODS.items() if m.batch)


def resolve(method: str, n_features: int, precomputed: bool) -> PCAMethod:
    """The method ``method`` names; ``"auto"``: Analyze Gauss for rows with at most
    :data:`~dptensor.algorithms.power.MAX_DENSE_FEATURES` features, the power method otherwise."""
    if method == "auto":
        dense = not precomputed and n_features <= MAX_DENSE_FEATURES
        method = "analyze_gauss" if dense else "power"
    return METHODS[method]
