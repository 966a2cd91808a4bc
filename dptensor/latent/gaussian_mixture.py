r"""A spherical Gaussian mixture learned by the method of moments, private at row level."""
from __future__ import annotations

import numbers

import numpy as np
from scipy.special import logsumexp
from sklearn.utils.validation import check_is_fitted

from ..algorithms.dask import (check_dask_array, clip_chunks, is_dask_array, moment_sum,
                               reduce_row_chunks)
from ..algorithms.operators import MomentSum, SymmetricTensor
from .._validation import check_data_norm, validate_private_data
from ..mechanisms import clip_rows
from ..exceptions import integer_scalar
from ..mechanisms.randomness import seed_entropy
from ..algorithms.tensor_power import choose_moment, n_power_queries, row_sensitivity
from ..algorithms.power import (covariance_sensitivity, row_power_sensitivity,
                               total_variance_sensitivity)
from ._base import BLOCK_ROWS, ClippedRows, SpectralLatentModel
from ..algorithms.moments import (ImplicitMatrix, power_subspace, release, release_second,
                                  sym3, whiten, whitened_rows_operator)
from ..algorithms.eigen import top_eigenpairs

#: The spawn key of :meth:`PrivateGaussianMixture.sample`'s stream: one word, where a fit's noise
#: has its spend's position and description (``spend_generator``), so the two never coincide.
_SAMPLE_KEY = 0x73616D70

__all__ = ["PrivateGaussianMixture", "spherical_variance", "bottom_mean", "whitened_bound"]


def spherical_variance(covariance, k: int, rng=None) -> float:
    r"""The common variance ``sigma^2`` of a k-component spherical mixture from its covariance.

    ``Cov(x) = sum_i w_i mu_i mu_i^T - mu mu^T + sigma^2 I`` has rank-(k-1) signal, so its
    ``d - k + 1`` smallest eigenvalues all equal ``sigma^2`` (Hsu & Kakade 2013). With an estimate
    of the covariance their mean, ``(tr Cov - sum of the k-1 largest) / (d - k + 1)``, is used:
    unlike the single smallest eigenvalue it is not biased down by the spread of the sample (or
    noise) spectrum, and it needs only the k-1 top eigenvalues (:func:`bottom_mean`).
    ``rng`` seeds the Lanczos start at large d (data independent).
    """
    top = 0.0
    if k > 1:
        top = float(np.sum(top_eigenpairs(covariance, k - 1, rng or np.random.default_rng(0))[0]))
    return bottom_mean(float(np.trace(covariance)), top, covariance.shape[0], k)


def bottom_mean(trace: float, top: float, d: int, k: int) -> float:
    """``(trace - top) / (d - k + 1)``: the mean of the ``d - k + 1`` smallest eigenvalues of a
    d x d matrix from its trace and the sum of its k - 1 largest. A noisy estimate can make it
    <= 0: it is floored at ``1e-6 |trace| / d`` so that likelihoods stay finite (post-processing).
    """
    return max((trace - top) / (d - k + 1), 1e-6 * abs(trace) / d, np.finfo(float).tiny)


def _moment_sums(chunk, dense):
    """``sum x``, ``sum ||x||^2`` and, for the dense whitening, ``X^T X`` over one chunk's rows:
    the first and second moments in one pass. Each row's ``||x||^2`` is summed first: a chain of
    ``d + n`` roundings, where one sum over all ``n d`` squares could take ``n d``."""
    rows = max(256, (1 << 17) // max(chunk.shape[1], 1))  # ~1 MB: read once, used from cache
    total, square, gram = 0.0, 0.0, 0.0
    for start in range(0, max(chunk.shape[0], 1), rows):
        # Blocks of rows change only the order of the float sums (each row's ||x||^2 is still
        # summed first: a chain of at most d + n roundings), which their allowances take in any.
        block = chunk[start:start + rows]
        total = total + block.sum(axis=0)
        square += float(np.sum(np.einsum("ij,ij->i", block, block)))
        if dense:
            gram = gram + block.T @ block
    return total, square, gram


def _gram_product(chunk, Q):
    return (chunk.T @ (chunk @ Q),)


def _whitened_blocks(rows, W, bound_w):
    """The clipped whitened rows ``clip(X W)`` (float64) by blocks of :data:`BLOCK_ROWS` rows,
    made from float64 blocks of rows held in float32 or clipped
    (:class:`~dptensor.latent._base.ClippedRows`): never a whole float64 or clipped copy of X.
    Float64 rows not clipped: one block, ``clip(X W)`` whole."""
    clipped = isinstance(rows, ClippedRows)
    if rows.dtype == np.float64 and not clipped:
        yield clip_rows(rows @ W, bound_w)
        return
    for start in range(0, len(rows), BLOCK_ROWS):
        block = rows.block(start, start + BLOCK_ROWS) if clipped \
            else rows[start:start + BLOCK_ROWS]
        yield clip_rows(block.astype(np.float64, copy=False) @ W, bound_w)


def _whitened_rows(rows, W, bound_w):
    """The clipped whitened rows ``clip(X W)`` (n x k, float64), held (:func:`_whitened_blocks`,
    written into one array)."""
    Y, start = np.empty((len(rows), W.shape[1])), 0
    for block in _whitened_blocks(rows, W, bound_w):
        Y[start:start + len(block)] = block
        start += len(block)
    return Y


def _whitened_moment(rows, W, bound_w, n_queries):
    """:func:`~dptensor.algorithms.moments.whitened_rows_operator` of the whitened rows, the
    dense tensor summed a block of them at a time where that is the choice (the same numbers as
    of the rows held: :class:`~dptensor.algorithms.operators.MomentSum`): O(k^3), not n x k."""
    k = W.shape[1]
    if choose_moment(len(rows), k, n_queries, 8) != "dense":
        return whitened_rows_operator(_whitened_rows(rows, W, bound_w), n_queries)
    acc = MomentSum(k)
    for block in _whitened_blocks(rows, W, bound_w):
        acc.add(block)
    return SymmetricTensor(acc.mean())


def _cube_sum(Y):
    """``sum_l y_l^(x)3`` of rows Y: GEMMs ``(Y (x) Y)^T Y`` over row blocks whose Khatri-Rao
    product holds at most ``2**22`` numbers."""
    k = Y.shape[1]
    out, step = np.zeros((k * k, k)), max(1, 2**22 // (k * k))
    for start in range(0, len(Y), step):
        Yc = Y[start:start + step]
        out += (Yc[:, :, None] * Yc[:, None, :]).reshape(len(Yc), k * k).T @ Yc
    return (out.reshape(k, k, k),)


def _whitened_cube_sum(chunk, W, bound_w):
    """``sum_l y_l^(x)3`` over one chunk's whitened, clipped rows (a Dask reduction's partial)."""
    return (moment_sum(clip_rows(chunk @ W, bound_w)),)


def whitened_bound(data_norm: float, W, variance: float, whitened_clip) -> float:
    r"""The l2 bound the whitened rows ``W^T x`` are clipped to (a function of public values only).

    ``data_norm ||W||_2`` holds for every clipped row, so clipping to it changes nothing. Under the
    model, ``E ||W^T x||^2 = tr(W^T (M2 + sigma^2 I) W) = k + sigma^2 ||W||_F^2``; clipping at
    ``whitened_clip`` times that root mean square is far tighter (the worst-case bound assumes a row
    aligned with the weakest whitened direction), and the third moment's sensitivity falls with
    its cube. ``whitened_clip=None`` keeps the worst-case bound.
    """
    bound = float(data_norm) * float(np.linalg.norm(W, 2))
    if whitened_clip is None:
        return bound
    rms = np.sqrt(W.shape[1] + variance * float(np.sum(W * W)))
    return min(bound, float(whitened_clip) * rms)


class PrivateGaussianMixture(SpectralLatentModel):
    r"""Spherical Gaussian mixture by moments and tensor decomposition (Hsu & Kakade 2013).

    The model: ``x = mu_h + sigma z`` with ``h ~ Categorical(weights)``, ``z ~ N(0, I_d)``, a
    common variance ``sigma^2`` and linearly independent means (k <= d). Its moments give
    ``M2 = E[x x^T] - sigma^2 I = sum_i w_i mu_i mu_i^T`` and ``M3 = E[x (x) x (x) x] -
    sigma^2 sum_j (m (x) e_j (x) e_j + e_j (x) m (x) e_j + e_j (x) e_j (x) m)
    = sum_i w_i mu_i^(x)3`` with ``m = E[x]`` and ``sigma^2`` the mean of the ``d - k + 1`` smallest
    eigenvalues of the covariance. One pass gives the mean and ``E[x x^T]``; the top-k eigenpairs of
    M2 whiten the rows to k numbers each, whose third moment (k x k x k, never d x d x d), corrected
    by the public low-rank terms, is decomposed by the robust tensor power method: eigenvalues
    ``1/sqrt(w_i)``, means ``mu_i = lambda_i U Lambda^(1/2) v_i``.

    Notes
    -----
    *Privacy unit.* One row: rows are clipped to l2 norm ``data_norm`` (public) and n is public.

    *What is released.* The mean (Gaussian noise at sensitivity ``2 B / n``); the whitening, from
    the distinct entries of ``E[x x^T]`` (Analyze Gauss, ``sqrt(2) B^2 / n``; ``whitening="dense"``)
    or, never forming d x d (``"power"``), from the private power method on ``E[x x^T]`` (each
    step ``X^T (X Q) / n`` for a d x 2k block Q, at ``sqrt(2) B^2 / n``), the released 2k x 2k
    projection on its span (``sqrt(2) B^2 / n``) and the trace of ``E[x x^T]`` (``B^2 / n``, for
    the variance); and the whitened third moment: with the whitening ``W`` computed from those
    releases (so public), the whitened rows have norm at most ``B ||W||_2``; they are clipped to
    ``B_W``, the smaller of that and ``whitened_clip`` times their root mean square under the
    model (both public), and their third moment has sensitivity ``2 B_W^3 / n``; it is released
    once with symmetric Gaussian noise (``method="perturb"``) or through the ``k L (R + 1)``
    queries of the private tensor power method (``method="power"``). Each sensitivity of a
    symmetric release bounds the Frobenius norm of the whole array's change, so it is made in
    that geometry (off-diagonal noise ``1 / sqrt(2)``, a tensor entry of ``m`` positions
    ``1 / sqrt(m)`` of the plain release's). Everything fitted (means,
    weights, variance) is post-processing of these releases. X may be a Dask array: every pass
    over the rows is then one reduction over its row chunks.

    *Guarantee.* ``(epsilon, delta)``-DP for that unit: the first moments, the whitening and the
    third moment get shares 0.1, 0.45, 0.45 of the Gaussian-DP budget ``mu(epsilon, delta)^2``,
    one ``ComposedEvent`` recorded with ``accountant`` before any noisy release. Derivations:
    ``docs/derivations/latent.rst``.

    *Groups of rows.* ``fit(X, groups=labels)`` protects each group (rows sharing a label: one
    person's rows) as one unit. Every row of a group of ``m`` rows weighs ``1 / m`` in every
    moment (the mean, the trace, ``E[x x^T]`` or its power steps and projection, the whitened
    cube), so a group adds its average term, bounded as one row's, and ``n`` is the public
    number of groups in every sensitivity; each group's sum is computed from its rows alone and
    the rounding allowance counts groups, not rows (a group of more than 2**30 rows weighs 0).
    ``privacy_cost_.unit`` and the ledger say ``"group of rows"``; ``n_samples_`` counts groups.
    Refused before any spend: bad labels, ``epsilon=inf``, Dask input.

    Parameters
    ----------
    n_components : int, default=1
        Number of mixture components k (<= n_features).
    epsilon : float, default=np.inf
        Privacy target; ``np.inf`` is the exact (non-private) method of moments, which costs
        epsilon = infinity.
    delta : float or None, default=None
        ``None`` takes the accountant's delta (1e-5 without an accountant).
    data_norm : float or None, default=None
        Public bound B on the rows' l2 norm; rows are clipped to it. Required when epsilon is
        finite. Choose it from public knowledge (say ``max ||mu|| + sigma (sqrt(d) + 4)``).
    whitened_clip : float or None, default=2.0
        The whitened rows ``W^T x`` are clipped to ``whitened_clip`` times their root mean square
        under the model, ``sqrt(k + sigma^2 ||W||_F^2)`` (computed from the released moments),
        or to the worst case ``data_norm ||W||_2`` if that is smaller or this is ``None``. Used
        only when ``data_norm`` is set.
    method : {"auto", "perturb", "power"}, default="auto"
        How the whitened third moment is released; ``"auto"`` is ``"perturb"`` (less noise at
        row level, see the derivation page).
    whitening : {"auto", "dense", "power"}, default="auto"
        ``"dense"`` forms the d x d second moment (Analyze Gauss when private); ``"power"`` never
        forms it (the power method over the rows, then the 2k x 2k projection; without privacy the
        exact top-k eigenpairs by Lanczos on the same products). ``"auto"``: dense up to 2000
        features, where it is the less noisy of the two for the same budget; the power method
        beyond. The d x d matrix sets the fit's memory (a few of them); a fit whose bound exceeds
        what the process can allocate is refused before its spend
        (:class:`~dptensor.MemoryRefusedError`): choose ``"power"`` then.
    n_restarts, n_iter : int, default=10, 20
        Restarts and steps of the tensor power method on the k x k x k tensor.
    accountant : PrivacyAccountant or None, default=None
        Records every fit's spend before its first noisy release; refuses fits over budget.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) is the only choice fit for a real release.
    verbose : int, default=0

    Attributes
    ----------
    means_ : ndarray of shape (n_components, n_features)
    weights_ : ndarray of shape (n_components,)
        Mixing weights, summing to 1.
    covariances_ : ndarray of shape (n_components,)
        The common spherical variance, repeated (scikit-learn's ``covariance_type="spherical"``).
    precisions_, precisions_cholesky_ : ndarray of shape (n_components,)
        ``1 / covariances_`` and its square root, from the released variance (floored just
        above 0, as the scores floor it: a noisy variance can come out <= 0).
    n_iter_ : int
        Steps of the tensor power method per restart (``n_iter``): a method-of-moments fit has
        no EM iterations, and its steps are fixed in advance, as its privacy cost prices them.
    converged_ : bool
        Always True: the fit stops after its fixed steps, not at a tolerance. It says nothing
        of accuracy: ``m2_eigenvalues_noise_`` does.
    method_ : str
        ``"perturb"``, ``"power"``, or ``"exact"`` (no privacy).
    whitening_ : str
        ``"dense"`` or ``"power"``.
    m2_eigenvalues_ : ndarray of shape (n_components,)
        The top eigenvalues of the released ``M2`` (``E[x x^T] - sigma^2 I``, or its projection
        on the power method's subspace), from which the whitening is made (floored just above 0).
    m2_eigenvalues_noise_ : ndarray of shape (n_components,)
        The typical size of the privacy noise in them, a public function of the noise plan
        (:func:`~dptensor.algorithms.moments.m2_noise_level`; 0 without privacy). Below twice it
        an eigenvalue, and the whitening and components made from it, are dominated by the noise,
        and ``fit`` warns (``UserWarning``) naming them. :meth:`expected_noise` reports it, against
        the largest eigenvalue ``data_norm**2``, before any fit.
    n_samples_ : int
        Rows fitted (groups, for a fit given ``groups``).
    n_features_in_ : int
    privacy_cost_ : PrivacyCost

    Float32 rows give float32 fitted arrays; ``score_samples`` and ``predict_proba`` are float32
    when X and the fitted arrays are (as scikit-learn's).

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor.latent import PrivateGaussianMixture
    >>> rng = np.random.default_rng(0)
    >>> means = 4.0 * np.eye(3)
    >>> X = means[rng.integers(0, 3, 20000)] + rng.standard_normal((20000, 3)) * 0.5
    >>> gmm = PrivateGaussianMixture(3, random_state=0).fit(X)
    >>> np.round(np.sort(gmm.weights_), 1).tolist()
    [0.3, 0.3, 0.3]
    """

    def __init__(self, n_components=1, *, epsilon=np.inf, delta=None, data_norm=None,
                 whitened_clip=2.0, method="auto", whitening="auto", n_restarts=10, n_iter=20,
                 accountant=None, random_state=None, verbose=0):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.whitened_clip = whitened_clip
        self.method = method
        self.whitening = whitening
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

    # -- the model's moments -----------------------------------------------------------------
    def _validate(self, X, reset):
        if is_dask_array(X):  # rows on a Dask cluster: checked lazily, never pulled here
            return check_dask_array(self, X, reset=reset)
        return validate_private_data(self, X, reset=reset, dtype=[np.float64, np.float32])

    def _prepare(self, X, epsilon):
        bound = check_data_norm(self.data_norm, epsilon)
        if self.whitened_clip is not None:
            check_data_norm(self.whitened_clip, epsilon, name="whitened_clip")
        if is_dask_array(X):
            rows = clip_chunks(X.astype(np.float64), bound)
        else:  # float32 rows stay float32: every sum over them runs on float64 blocks;
            # clipped rows are made a block at a time where they are read: no copy of X
            rows = X if bound is None else ClippedRows(X, bound)
        prepared = self._context(X, rows, epsilon, bound=bound)
        # the power whitening also releases the trace
        prepared["n_first"] = 2 if prepared["power"] else 1
        return prepared

    def _release_first(self, prepared, plan, rng):
        n, B = prepared["n"], prepared["bound"] or 0.0
        total, square, gram = self._reduce(prepared, _moment_sums, not prepared["power"])
        if not prepared["power"]:  # computed in the same pass; released next, by Analyze Gauss
            prepared["second"] = gram / n
        # each row's term x / n has norm <= B / n; its ||x||^2 / n lies in [0, B^2 / n]
        # (with groups: each group's average term, over the public number of groups n)
        first, margin = self._rounding(prepared, B)
        mean = release(total / n, 2.0 * B / n + margin, plan.z_first[0], rng, rounding=first)
        if prepared["power"]:
            trace, margin = self._rounding(prepared, B * B, prepared["d"])
            prepared["trace"] = float(release(np.float64(square / n),
                                              total_variance_sensitivity(B) / n + margin,
                                              plan.z_first[1], rng, rounding=trace))
        return mean

    def _release_whitening(self, prepared, mean, plan, rng):
        """Analyze Gauss on ``E[x x^T]`` (d x d), or the power method on its implicit products.

        Power: ``E[x x^T] = M2 + sigma^2 I`` has M2's eigenvectors, so its top subspace V and the
        released projection ``P = V^T E[x x^T] V`` give the whitening of ``P - sigma^2 I`` and,
        with the released trace, the variance: the signal of ``Cov = E[x x^T] - m m^T`` lies in V.
        """
        k, n, d, B = self.n_components, prepared["n"], prepared["d"], prepared["bound"] or 0.0
        # a row's term |x| |x|^T / n has Frobenius norm ||x||^2 / n <= B^2 / n
        # (a group's average term |x| |x|^T: PSD of trace <= B^2, as one row's)
        (analyze, m_a), (step, m_s), (projection, m_p) = self._whitening_roundings(
            prepared, min(2 * k, d), B * B)
        if not prepared["power"]:
            second = release_second(prepared.pop("second"), covariance_sensitivity(B) / n + m_a,
                                    plan, rng, frobenius=self._frobenius, rounding=analyze)
            prepared["variance"] = spherical_variance(second - np.outer(mean, mean), k, rng)
            return whiten(second - prepared["variance"] * np.eye(d), k, rng,
                          noise=self._m2_noise(prepared, n, plan)[0])
        operator = ImplicitMatrix(d, lambda Q: self._reduce(prepared, _gram_product, Q)[0] / n)
        V, P = power_subspace(operator, k, plan, rng,
                              step_sensitivity=row_power_sensitivity(B, min(2 * k, d)) / n + m_s,
                              projection_sensitivity=covariance_sensitivity(B) / n + m_p,
                              step_rounding=step, projection_rounding=projection,
                              few_passes=is_dask_array(prepared["rows"]),
                              frobenius=self._frobenius)
        u = V.T @ mean
        top = np.sum(np.linalg.eigvalsh(P - np.outer(u, u))[::-1][:k - 1])
        prepared["variance"] = bottom_mean(prepared["trace"] - float(mean @ mean), float(top), d, k)
        return whiten(P - prepared["variance"] * np.eye(len(P)), k, rng, basis=V,
                      noise=self._m2_noise(prepared, n, plan)[0])

    def _m2_noise(self, prepared, n, plan):
        """The std of the noise on each entry of the released ``E[x x^T] u`` (Analyze Gauss's
        entries; the power method's last step), and ``B^2``, the largest eigenvalue of
        ``E[x x^T]`` (``M2`` is below it) for rows of norm at most B."""
        B = prepared["bound"]
        if not plan.private:
            return 0.0, None if B is None else B * B
        if prepared["power"]:
            p = min(2 * self.n_components, prepared["d"])
            return plan.z_second[-2] * row_power_sensitivity(B, p) / n, B * B
        # Frobenius geometry: an off-diagonal entry, as each of ``E u``'s, has 1 / sqrt(2) of it
        root = np.sqrt(2.0) if self._frobenius else 1.0
        return plan.z_second[0] * covariance_sensitivity(B) / n / root, B * B

    def _whitened_third(self, prepared, whitening, mean):
        W, n = whitening.W, prepared["n"]
        sensitivity, bound_w = 0.0, None
        if prepared["bound"] is not None:  # the whitened rows' bound follows from released values
            bound_w = whitened_bound(prepared["bound"], W, prepared["variance"], self.whitened_clip)
            sensitivity = row_sensitivity(bound_w, n)
        k = W.shape[1]
        if prepared.get("groups") is not None:  # each group's average cube, summed over groups
            (total,) = self._reduce({"rows": _whitened_rows(prepared["rows"], W, bound_w),
                                     "groups": prepared["groups"]}, _cube_sum)
            data = total / n
        elif is_dask_array(prepared["rows"]):
            # each chunk whitens, clips and cubes its own rows: k^3 numbers come back
            (total,) = reduce_row_chunks(prepared["rows"], _whitened_cube_sum, W, bound_w)
            data = SymmetricTensor(total / n)
        else:
            data = _whitened_moment(prepared["rows"], W, bound_w,
                                    n_power_queries(k, self.n_restarts, self.n_iter))
        m, G = W.T @ mean, W.T @ W
        correction = -prepared["variance"] * sym3(G[:, :, None] * m[None, None, :])
        # a whitened row's term |y|^(x)3 / n has Frobenius norm ||y||^3 / n <= B_W^3 / n
        third, margin = self._rounding(prepared, (bound_w or 0.0) ** 3)
        return data, correction, sensitivity + margin if sensitivity else 0.0, third

    def _recover(self, prepared, components, eigenvalues, whitening, mean):
        lam = self._positive(eigenvalues)
        weights = 1.0 / lam**2
        self.weights_ = weights / weights.sum()
        self.means_ = (lam[:, None] * components) @ whitening.unwhiten.T
        self.covariances_ = np.full(len(lam), prepared["variance"])
        # the log-density's floor on a noisy variance (<= 0 at small n epsilon), as scored
        self.precisions_ = 1.0 / np.maximum(self.covariances_, np.finfo(float).tiny)
        self.precisions_cholesky_ = np.sqrt(self.precisions_)
        self.n_iter_ = int(self.n_iter)  # fixed power steps per restart: no tolerance to reach
        self.converged_ = True

    _fitted_arrays = ("means_", "weights_", "covariances_", "precisions_", "precisions_cholesky_")
    # sqrt(2) B^2 / n and 2 B_W^3 / n bound the Frobenius norm of the whole second moment's (and
    # projection's) and third moment's change: each symmetric release uses that geometry
    _frobenius = True
    # a clipped block, its float64 copy and a partial's own block of it (ClippedRows)
    _block_copies = 3

    # -- scikit-learn's mixture interface ----------------------------------------------------
    def _estimate_weighted_log_prob(self, X):
        check_is_fitted(self, "means_")
        X = validate_private_data(self, X, reset=False, dtype=[np.float64, np.float32])
        # computed in float64, returned in the type of X and the parameters (scikit-learn's)
        dtype = np.result_type(X.dtype, self.means_.dtype)
        X, means = X.astype(np.float64, copy=False), self.means_.astype(np.float64)
        var = np.maximum(self.covariances_.astype(np.float64), np.finfo(float).tiny)
        sq = (np.einsum("ij,ij->i", X, X)[:, None] - 2.0 * X @ means.T
              + np.einsum("ij,ij->i", means, means)[None, :])
        d = X.shape[1]
        with np.errstate(divide="ignore"):  # a weight of 0 (float32) scores -inf, as it should
            logp = (np.log(self.weights_.astype(np.float64))
                    - 0.5 * (d * np.log(2 * np.pi * var) + sq / var))
        with np.errstate(over="ignore"):
            return logp.astype(dtype, copy=False)

    def _n_parameters(self) -> int:
        """Free parameters: k d means, k - 1 weights and one common variance (scikit-learn's
        spherical model has k variances: this one shares one, so counts k - 1 fewer)."""
        k, d = self.means_.shape
        return k * d + (k - 1) + 1

    def bic(self, X):
        """Bayesian information criterion on X, as ``GaussianMixture.bic``: ``-2 n score(X) +
        p log n`` with p = :meth:`_n_parameters` (lower is better). It reads the released
        parameters and the given X only, so scoring private data on it is the caller's release."""
        log_lik = self.score_samples(X)
        n = log_lik.shape[0]
        return float(-2.0 * np.mean(log_lik) * n + self._n_parameters() * np.log(n))

    def aic(self, X):
        """Akaike information criterion on X, as ``GaussianMixture.aic``: ``-2 n score(X) + 2 p``
        (lower is better; p as in :meth:`bic`)."""
        log_lik = self.score_samples(X)
        return float(-2.0 * np.mean(log_lik) * log_lik.shape[0] + 2 * self._n_parameters())

    def sample(self, n_samples=1, random_state=None):
        """Draw ``n_samples`` rows from the fitted (released) mixture, as
        ``GaussianMixture.sample``: returns ``(X, y)``, the rows grouped by component ``y``.

        ``random_state`` (None, int or Generator; ``None`` takes the estimator's) seeds its own
        stream, keyed apart from every fit's noise: no draw here repeats or reveals a release's
        noise. A variance the noise made <= 0 draws no spread (0).
        """
        check_is_fitted(self, "means_")
        number = integer_scalar(n_samples)  # a 0-d array of an int: that int
        if isinstance(number, bool) or not isinstance(number, numbers.Integral) or number < 1:
            raise ValueError("Invalid value for 'n_samples': it must be an integer >= 1, "
                             f"got {n_samples!r}")
        state = self.random_state if random_state is None else random_state
        rng = np.random.default_rng(np.random.SeedSequence(seed_entropy(state),
                                                           spawn_key=(_SAMPLE_KEY,)))
        weights = np.maximum(self.weights_.astype(np.float64), 0.0)
        counts = rng.multinomial(int(number), weights / weights.sum())
        scale = np.sqrt(np.maximum(self.covariances_.astype(np.float64), 0.0))
        X = np.vstack([mean + rng.standard_normal((m, len(mean))) * s
                       for mean, s, m in zip(self.means_, scale, counts)])
        return X, np.repeat(np.arange(len(counts)), counts)

    def score_samples(self, X):
        """Log-likelihood of each sample under the fitted mixture, shape (n_samples,)."""
        return logsumexp(self._estimate_weighted_log_prob(X), axis=1)

    def score(self, X, y=None):
        """Mean log-likelihood per sample (as ``GaussianMixture.score``)."""
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        """Posterior probabilities of the components, shape (n_samples, n_components)."""
        logp = self._estimate_weighted_log_prob(X)
        return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))

    def predict(self, X):
        """The most probable component of each sample."""
        return np.argmax(self._estimate_weighted_log_prob(X), axis=1)

    def fit_predict(self, X, y=None, *, groups=None):
        """``fit(X, groups=groups)``, then the most probable component of each sample."""
        return self.fit(X, groups=groups).predict(X)
