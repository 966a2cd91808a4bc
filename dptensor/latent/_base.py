"""The fit every spectral latent model shares: validate, price, release the moments, whiten, decompose."""
from __future__ import annotations


import numpy as np
from sklearn.base import BaseEstimator

from .._base import PrivateEstimatorMixin
from .._validation import check_positive_int, check_verbose
from ..accounting.events import NonPrivateEvent
from ._pipeline import decompose_whitened, n_third_queries, plan_noise, release_mean, release_second, whiten

__all__ = ["SpectralLatentModel"]


class SpectralLatentModel(PrivateEstimatorMixin, BaseEstimator):
    """Base class: a subclass supplies its moments, its constants and how parameters map back.

    Hooks (each a function of the data or of released values only). ``ctx`` is a dict local to
    one fit (the prepared rows, the public bounds, released by-products such as a variance): it is
    never stored on the estimator, so nothing unreleased outlives the fit, even a failed one.

    * ``_validate(X, reset)`` -> X;
    * ``_prepare(X, epsilon)`` -> ctx: checks the model's own parameters, prepares the rows;
    * ``_first_moments(ctx)`` -> ``(mean, second, s_mean, s_second)``: the exact mean and second
      moment (d x d) and their row-level l2 sensitivities;
    * ``_second_moment(ctx, mean, second, rng)`` -> ``M2`` from the released pair (post-processing);
    * ``_second_moment_steps(ctx)`` (default 1) and ``_power_whitening(ctx, mean, plan, rng)``: a
      model whose whitening may come from the private power method instead (``second`` is then
      ``None`` and never formed);
    * ``_whitened_third(ctx, whitening, mean, second)`` -> ``(data, correction, sensitivity)``;
    * ``_recover(ctx, components, eigenvalues, whitening, mean)`` sets the fitted attributes.
    """

    _unit = "row"  # the privacy unit, as named in warnings

    def _check_common(self, d: int) -> int:
        k = check_positive_int(self.n_components, "n_components")
        if k > d:
            raise ValueError(f"n_components must be <= n_features={d} (the whitening needs k "
                             f"independent directions), got {k}")
        check_positive_int(self.n_restarts, "n_restarts")
        check_positive_int(self.n_iter, "n_iter")
        if self.method not in ("auto", "perturb", "power"):
            raise ValueError(f"method must be one of ('auto', 'perturb', 'power'), got {self.method!r}")
        check_verbose(self.verbose)
        return k

    def _plan(self, ctx, k, epsilon, delta):
        """The fit's method and noise plan, from public parameters and the data's shape only."""
        # "auto": one perturbation of the k^3 tensor (noise of operator norm ~1.7 sqrt(k) z s)
        # beats k L (R+1) noisy power queries (each ~sqrt(k) z s sqrt(k L (R+1))) at row level.
        method = "perturb" if self.method == "auto" else self.method
        return method, plan_noise(epsilon, delta, n_third_queries(method, k, self.n_restarts, self.n_iter),
                                  self._second_moment_steps(ctx))

    def privacy_cost(self, n_samples, n_features):
        """The cost and noise multiplier a ``fit`` on ``n_samples`` x ``n_features`` data would record.

        Computed from the parameters alone, with the fit's own plan and checks: no data is read
        and nothing is spent. Returns a :class:`~dptensor.PrivacyCost`.
        """
        check_positive_int(n_samples, "n_samples")
        d = check_positive_int(n_features, "n_features")
        k = self._check_common(d)
        epsilon, delta = self._privacy_target()
        # the hooks read only the shape of X here (no rows): the plan depends on d alone
        _, plan = self._plan(self._prepare(np.zeros((0, d)), epsilon), k, epsilon, delta)
        if not plan.private:
            return self._preview(None, delta=delta)
        return self._preview(plan.event, delta=delta, noise_multiplier=plan.z_third,
                             n_queries=plan.n_third + len(plan.z_second) + 1, calibration="exact")

    def fit(self, X, y=None):
        """Learn the model from X by the method of moments; ``y`` is ignored. Returns self."""
        X = self._validate(X, reset=True)
        n, d = X.shape
        k = self._check_common(d)
        epsilon, delta = self._privacy_target()
        ctx = self._prepare(X, epsilon)
        self._check_delta_for(n, epsilon, delta, unit=self._unit)
        entropy = self._entropy()
        method, plan = self._plan(ctx, k, epsilon, delta)
        if plan.private:
            self.privacy_cost_, rng = self._spend(plan.event, entropy=entropy, delta=delta,
                                                  noise_multiplier=plan.z_third,
                                                  n_queries=plan.n_third + len(plan.z_second) + 1,
                                                  calibration="exact", data_shape=X.shape)
        else:
            self.privacy_cost_, rng = self._spend(NonPrivateEvent("epsilon=inf"), entropy=entropy,
                                                  delta=delta, data_shape=X.shape)
        mean, second, s_mean, s_second = self._first_moments(ctx)
        mean = release_mean(mean, s_mean, plan, rng)
        if second is None:  # the whitening itself is released, by the private power method
            whitening = self._power_whitening(ctx, mean, plan, rng)
        else:
            second = release_second(second, s_second, plan, rng)
            whitening = whiten(self._second_moment(ctx, mean, second, rng), k, rng)
        data, correction, sensitivity = self._whitened_third(ctx, whitening, mean, second)
        del ctx["rows"]  # the prepared data is no longer needed
        components, eigenvalues = decompose_whitened(
            data, correction, k, sensitivity=sensitivity, plan=plan, method=method,
            n_restarts=self.n_restarts, n_iter=self.n_iter, rng=rng, verbose=self.verbose)
        self.method_ = method if plan.private else "exact"
        self.n_samples_ = n
        self._recover(ctx, components, eigenvalues, whitening, mean)
        return self

    def _second_moment_steps(self, ctx) -> int:
        return 1

    @staticmethod
    def _positive(eigenvalues):
        """Eigenvalues floored just above zero: a noisy release may return one <= 0 (post-processing)."""
        lam = np.asarray(eigenvalues, dtype=float)
        floor = 1e-6 * max(float(np.max(np.abs(lam))), np.finfo(float).tiny)
        return np.where(lam > floor, lam, floor)
