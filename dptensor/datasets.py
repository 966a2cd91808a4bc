r"""Data with known ground truth, and the MovieLens-100K ratings tensor.

Generators (each reproducible through ``random_state``; components are rows, shape (k, d)):

* :func:`make_orthogonal_tensor` -- ``T = sum_i lambda_i v_i⊗3`` (+ symmetric Gaussian noise);
* :func:`make_orthogonal_moment_data` -- samples whose third moment is exactly such a tensor;
* :func:`make_spiked_covariance` -- Gaussian data with a rank-k spike in its covariance;
* :func:`make_low_rank_tensor` -- the tensor completion study (low-rank CP tensor, noise, holes);

with the coherence of the components under control (SPEC §7, :func:`coherence`). Then the
MovieLens-100K loader (:func:`load_movielens_100k`); the per-time-slice bi-scaling of its
ratings lives in :mod:`dptensor.preprocessing` (importable from here as well).
"""
from __future__ import annotations

import hashlib
import io
import numbers
import os
import shutil
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import scipy.fft
import scipy.linalg

from ._validation import check_positive_int, check_random_generator
from .exceptions import real_scalar
from .algorithms.operators import symmetrize_tensor
from .preprocessing import BiScaler, _check_nonnegative, bi_scale  # noqa: F401 (re-exports)

__all__ = ["coherence", "make_orthogonal_tensor", "make_orthogonal_moment_data",
           "moment_data_norm_bound", "make_spiked_covariance", "make_low_rank_tensor",
           "load_movielens_100k"]

# E[max_{||u||=1} <G, u⊗3>] / sqrt(d) for G with iid N(0, 1) entries tends to the ground-state
# energy of the spherical 3-spin glass, about 1.657 (Crisanti & Sommers 1992; Auffinger, Ben Arous
# & Cerny 2013). Dividing by it makes the noise tensor's operator norm about `noise` for large d.
_SPIN3_GROUND_STATE = 1.657


# --------------------------------------------------------------------------------------------
# Components with controlled coherence
# --------------------------------------------------------------------------------------------

def coherence(components) -> float:
    r"""Wang–Anandkumar incoherence ``mu0 = (d/k) max_i ||V^T e_i||^2`` of orthonormal rows V.

    It lies in ``[1, d/k]``: 1 when the components' mass is spread evenly over all coordinates,
    ``d/k`` when some coordinate lies entirely in their span.

    Examples
    --------
    >>> import numpy as np
    >>> coherence(np.eye(4)[:2])
    2.0
    >>> coherence(np.full((1, 4), 0.5))
    1.0
    """
    V = np.asarray(components, dtype=float)
    if V.ndim != 2:
        raise ValueError(f"components must be a 2-D array (k, d), got shape {V.shape}")
    k, d = V.shape
    return float(d / k * np.max(np.sum(V * V, axis=0)))


def _incoherent_basis(d, k, rng):
    """k orthonormal rows with every entry of magnitude about 1/sqrt(d).

    Hadamard rows / sqrt(d) when d is a power of 2 (every entry is exactly ±1/sqrt(d), mu0 = 1);
    otherwise rows of the orthonormal DCT-II matrix (entries at most sqrt(2/d), so mu0 <= 2). The
    rows are drawn at random (DCT: among all but the constant row) and every coordinate gets a
    random sign, which keeps both properties.
    """
    if d & (d - 1) == 0:
        basis = scipy.linalg.hadamard(d).astype(float) / np.sqrt(d)
        rows = rng.choice(d, size=k, replace=False)
    else:
        # Rows: cosines of frequency f.
        basis = scipy.fft.dct(np.eye(d), type=2, norm="ortho", axis=0)
        if k > d - 1:
            rows = rng.choice(d, size=k, replace=False)
        else:
            rows = 1 + rng.choice(d - 1, size=k, replace=False)
    signs = rng.choice([-1.0, 1.0], size=d)
    return basis[rows] * signs


def _haar_basis(d, k, rng):
    """k rows of a Haar-random orthogonal matrix (QR of a Gaussian, signs fixed by R's diagonal)."""
    Q, R = np.linalg.qr(rng.standard_normal((d, k)))
    return (Q * np.sign(np.diag(R))).T


def _sparse_basis(d, k, s, rng):
    """k rows with disjoint supports of size s, entries ±1/sqrt(s): mu0 = d / (k s) exactly."""
    if k * s > d:
        raise ValueError(f"coherence={s} needs k * s <= d for disjoint supports, got k={k}, d={d}")
    support = rng.permutation(d)[:k * s].reshape(k, s)
    V = np.zeros((k, d))
    V[np.arange(k)[:, None], support] = rng.choice([-1.0, 1.0], size=(k, s)) / np.sqrt(s)
    return V


def _components(d, k, coherence_kind, rng):
    if isinstance(coherence_kind, str):
        if coherence_kind == "incoherent":
            return _incoherent_basis(d, k, rng)
        if coherence_kind == "random":
            return _haar_basis(d, k, rng)
    elif isinstance(coherence_kind, numbers.Integral) and not isinstance(coherence_kind, bool):
        s = check_positive_int(coherence_kind, "coherence")
        return _sparse_basis(d, k, s, rng)
    raise ValueError(f'coherence must be "incoherent", "random" or a sparsity s >= 1, '
                     f'got {coherence_kind!r}')


def _dims(d, k):
    d = check_positive_int(d, "d")
    k = check_positive_int(k, "k")
    if k > d:
        raise ValueError(f"k must be <= d for orthonormal components, got k={k}, d={d}")
    return d, k


def _eigenvalues(eigenvalues, k):
    """Default: evenly spaced from 1 down to 0.5 (a gap of 0.5/(k-1) between neighbours)."""
    if eigenvalues is None:
        return np.linspace(1.0, 0.5, k)
    values = np.asarray(eigenvalues, dtype=float).ravel()
    if values.shape != (k,):
        raise ValueError(f"eigenvalues must have k={k} entries, got {values.size}")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("eigenvalues must be finite and > 0")
    return values


def _check_positive(value, name):
    value = real_scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 < value < np.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------------------------
# Orthogonal tensors and data whose third moment is one
# --------------------------------------------------------------------------------------------

def make_orthogonal_tensor(d, k, eigenvalues=None, *, coherence="incoherent", noise=0.0,
                           random_state=None):
    r"""A symmetric orthogonally decomposable tensor ``T = sum_i lambda_i v_i⊗3 (+ E)``.

    Parameters
    ----------
    d : int
        Dimension; ``T`` has shape (d, d, d).
    k : int, 1 <= k <= d
        Number of components.
    eigenvalues : array of shape (k,), optional
        Positive ``lambda_i``. Default ``np.linspace(1, 0.5, k)``.
    coherence : "incoherent", "random" or int s, default="incoherent"
        How the orthonormal components ``v_i`` are drawn (SPEC §7):

        - ``"incoherent"``: random rows of the Hadamard matrix / sqrt(d) with random coordinate
          signs when d is a power of 2 (mu0 = 1 exactly); for other d, random non-constant rows of
          the orthonormal DCT-II matrix with random coordinate signs (mu0 <= 2).
        - ``"random"``: Haar-random (QR of a Gaussian matrix); mu0 grows like log d.
        - int ``s``: disjoint supports of size s with entries ±1/sqrt(s) (needs ``k s <= d``);
          mu0 = d / (k s) exactly, so s tunes the coherence from d/k (s=1) down to 1 (s = d/k).
    noise : float >= 0, default=0.0
        Scale of an additive symmetric Gaussian tensor ``E = noise * sym(G) / (c sqrt(d))``, where
        ``G`` has iid N(0, 1) entries, ``sym`` averages the 6 index permutations and ``c = 1.657``.
        For every fixed unit ``u``, ``E(u, u, u) ~ N(0, (noise / (c sqrt(d)))^2)``; the operator
        norm ``max_u |E(u, u, u)|`` tends to ``noise`` as d grows (c is the ground-state energy of
        the spherical 3-spin glass) and is a little below it for small d (restarted power
        iterations find about 0.85 noise at d=10, 0.92 at d=20 and 0.97-1.0 from d=40 on).
    random_state : None, int or Generator
        Seed for reproducible draws.

    Returns
    -------
    T : array of shape (d, d, d)
        With ``noise=0``, exactly ``sum_i lambda_i v_i⊗3`` (up to rounding).
    eigenvalues : array of shape (k,)
    components : array of shape (k, d)
        Orthonormal rows ``v_i``.

    Examples
    --------
    >>> T, lam, V = make_orthogonal_tensor(8, 2, [2.0, 1.0], random_state=0)
    >>> T.shape, round(float(np.einsum("abc,a,b,c->", T, V[0], V[0], V[0])), 12)
    ((8, 8, 8), 2.0)
    """
    d, k = _dims(d, k)
    lam = _eigenvalues(eigenvalues, k)
    noise = _check_nonnegative(noise, "noise")
    rng = check_random_generator(random_state)
    V = _components(d, k, coherence, rng)
    T = np.einsum("i,ia,ib,ic->abc", lam, V, V, V, optimize=True)
    if noise > 0:
        G = rng.standard_normal((d, d, d))
        T = T + symmetrize_tensor(G) * (noise / (_SPIN3_GROUND_STATE * np.sqrt(d)))
    return T, lam, V


def _two_point_skewed(shape, skewness, rng):
    """Zero mean, unit variance, third moment ``skewness`` (broadcast over the last axis).

    The value ``sqrt(q/p)`` with probability p and ``-sqrt(p/q)`` with probability q = 1 - p has
    mean 0, variance 1 and third moment ``(q - p) / sqrt(p q)``; solving for the target gives
    ``p q = 1 / (skewness^2 + 4)``. Bounded, so clipped rows keep the moment when the bound is
    large.
    """
    p, q = _two_point_probabilities(skewness)
    hit = rng.random(shape) < p
    return np.where(hit, np.sqrt(q / p), -np.sqrt(p / q))


def _two_point_probabilities(skewness):
    pq = 1.0 / (np.asarray(skewness, dtype=float) ** 2 + 4.0)
    p = 0.5 * (1.0 - np.sqrt(1.0 - 4.0 * pq))
    return p, 1.0 - p


def moment_data_norm_bound(eigenvalues) -> float:
    """A bound on the row norms of :func:`make_orthogonal_moment_data` without noise, from its
    parameters alone (so it is public): ``||x||^2 = sum_i h_i^2 <= sum_i q_i / p_i``.

    >>> round(moment_data_norm_bound([1.0, 0.5]), 3)
    2.064
    """
    p, q = _two_point_probabilities(eigenvalues)
    return float(np.sqrt(np.sum(q / p)))


def make_orthogonal_moment_data(n, d, k, *, eigenvalues=None, coherence="incoherent", noise=0.0,
                                random_state=None):
    r"""Samples whose third moment is exactly ``sum_i lambda_i v_i⊗3``.

    Each row is ``x = sum_i h_i v_i + noise * g`` where the ``h_i`` are independent two-point
    variables with ``E h_i = 0``, ``E h_i^2 = 1``, ``E h_i^3 = lambda_i`` (value ``sqrt(q/p)`` with
    probability ``p``, else ``-sqrt(p/q)``, where ``p q = 1/(lambda_i^2 + 4)``, ``p < 1/2``) and
    ``g ~ N(0, I_d)`` independent of them. The population moments are exactly

    * ``E[x] = 0``,
    * ``E[x⊗x] = sum_i v_i⊗v_i + noise^2 I``,
    * ``E[x⊗x⊗x] = sum_i lambda_i v_i⊗3``:

    every mixed term has a zero-mean factor that is independent of the others (``h_i`` with
    ``i`` appearing once, or ``g`` appearing once or three times, whose odd moments vanish).

    Parameters
    ----------
    n : int
        Number of samples.
    d, k, eigenvalues, coherence
        As in :func:`make_orthogonal_tensor`.
    noise : float >= 0, default=0.0
        Standard deviation of the isotropic Gaussian noise on each coordinate.
    random_state : None, int or Generator

    Returns
    -------
    X : array of shape (n, d)
    eigenvalues : array of shape (k,)
    components : array of shape (k, d)

    Notes
    -----
    Without noise, ``||x||_2 <= max_i sqrt(q_i/p_i) sqrt(k)``, roughly ``max_i lambda_i sqrt(k)``
    for large ``lambda``; choose a ``data_norm`` above it and clipping changes nothing.

    Examples
    --------
    >>> X, lam, V = make_orthogonal_moment_data(1000, 6, 2, random_state=0)
    >>> X.shape, lam.tolist()
    ((1000, 6), [1.0, 0.5])
    """
    n = check_positive_int(n, "n")
    d, k = _dims(d, k)
    lam = _eigenvalues(eigenvalues, k)
    noise = _check_nonnegative(noise, "noise")
    rng = check_random_generator(random_state)
    V = _components(d, k, coherence, rng)
    X = _two_point_skewed((n, k), lam, rng) @ V
    if noise > 0:
        X += noise * rng.standard_normal((n, d))
    return X, lam, V


def make_spiked_covariance(n, d, k, *, spike=5.0, coherence="random", data_norm=None,
                           random_state=None):
    r"""Gaussian data with covariance ``I + sum_i spike_i v_i v_i^T``.

    Each row is ``x = sum_i sqrt(spike_i) h_i v_i + g`` with ``h ~ N(0, I_k)``, ``g ~ N(0, I_d)``.
    The population covariance has eigenvalues ``1 + spike_i`` along ``v_i`` and 1 elsewhere.

    Parameters
    ----------
    n, d, k : int
    spike : float > 0 or array of shape (k,), default=5.0
    coherence : "incoherent", "random" or int s, default="random"
        As in :func:`make_orthogonal_tensor`.
    data_norm : float > 0, optional
        When given, the whole sample is multiplied by one factor ``c = data_norm / max_l ||x_l||``
        so that every row has norm at most ``data_norm`` (the largest exactly ``data_norm``), and
        the returned eigenvalues are multiplied by ``c^2``. A common factor keeps the components
        and the eigengap ratio exactly; clipping rows one by one would not.
    random_state : None, int or Generator

    Returns
    -------
    X : array of shape (n, d)
    components : array of shape (k, d)
        Orthonormal rows ``v_i``, the top-k eigenvectors of the population covariance.
    eigenvalues : array of shape (k,)
        ``c^2 (1 + spike_i)``, the top-k population eigenvalues (``c = 1`` without ``data_norm``);
        the remaining d - k are all ``c^2``.

    Examples
    --------
    >>> X, V, ev = make_spiked_covariance(50, 10, 2, data_norm=1.0, random_state=0)
    >>> round(float(np.linalg.norm(X, axis=1).max()), 12)
    1.0
    """
    n = check_positive_int(n, "n")
    d, k = _dims(d, k)
    spikes = np.broadcast_to(np.asarray(spike, dtype=float), (k,)).copy() if np.ndim(spike) == 0 \
        else np.asarray(spike, dtype=float).ravel()
    if spikes.shape != (k,) or not np.all(np.isfinite(spikes)) or np.any(spikes <= 0):
        raise ValueError(f"spike must be a finite number > 0 or k={k} of them, got {spike!r}")
    rng = check_random_generator(random_state)
    V = _components(d, k, coherence, rng)
    X = (rng.standard_normal((n, k)) * np.sqrt(spikes)) @ V + rng.standard_normal((n, d))
    eigenvalues = 1.0 + spikes
    if data_norm is not None:
        c = _check_positive(data_norm, "data_norm") / np.linalg.norm(X, axis=1).max()
        X *= c
        eigenvalues *= c * c
    return X, V, eigenvalues


# --------------------------------------------------------------------------------------------
# Tensor completion study
# --------------------------------------------------------------------------------------------

def _cp_full(factors):
    """The full array ``sum_r a_r ∘ b_r ∘ ...`` of a CP model (any order) by one einsum."""
    letters = "abcdefghijklmnopqrstuvwxy"
    order = len(factors)
    spec = ",".join(f"{letters[m]}z" for m in range(order)) + "->" + letters[:order]
    return np.einsum(spec, *factors, optimize=True)


def make_low_rank_tensor(shape=(20, 20, 20), rank=3, *, missing_ratio=0.5, snr=None,
                         random_state=None):
    r"""The tensor completion study: a rank-r CP tensor, min-max scaled, with noise and holes.

    1. Factors ``A_m`` (n_m x rank) with iid N(0, 1) entries, each column scaled to unit l2 norm.
    2. ``X0 = [[A_1, ..., A_order]]``, min-max scaled to [0, 1]:
       ``tensor = (X0 - offset) / scale`` with ``offset = min X0``, ``scale = max X0 - min X0``.
    3. ``noisy = tensor + N(0, sigma^2)`` with ``sigma^2 = var(tensor) / snr`` (the variance over
       all entries; ``snr=1``: noise variance equals signal variance, as in the study);
       ``snr=None`` adds no noise.
    4. A uniformly random ``round(missing_ratio * size)`` entries are held out; the rest are
       observed.

    Parameters
    ----------
    shape : tuple of int, default=(20, 20, 20)
        Any order >= 2.
    rank : int, default=3
    missing_ratio : float in [0, 1), default=0.5
    snr : float > 0 or None, default=None
        Signal-to-noise ratio as a ratio of variances (not decibels).
    random_state : None, int or Generator

    Returns
    -------
    dict with keys
        ``"indices"`` (n_obs, order) int64 observed positions (in C order);
        ``"values"`` (n_obs,) the noisy values there;
        ``"test_indices"`` (n_missing, order) int64 held-out positions;
        ``"test_values"`` (n_missing,) the *noiseless* tensor there (what a completion should
        recover);
        ``"test_values_noisy"`` (n_missing,) the noisy tensor there;
        ``"tensor"`` the noiseless array in [0, 1]; ``"noisy"`` the noisy array;
        ``"factors"`` list of the unit-column factors; ``"offset"``, ``"scale"`` floats with
        ``tensor = (cp(factors) - offset) / scale``; ``"noise_std"`` sigma; ``"shape"``.

    Examples
    --------
    >>> data = make_low_rank_tensor(random_state=0)
    >>> data["indices"].shape, data["test_indices"].shape
    ((4000, 3), (4000, 3))
    """
    shape = tuple(check_positive_int(n, "shape") for n in np.atleast_1d(shape).tolist())
    if len(shape) < 2:
        raise ValueError(f"shape must have at least 2 dimensions, got {shape}")
    rank = check_positive_int(rank, "rank")
    missing_ratio = real_scalar(missing_ratio)
    if isinstance(missing_ratio, bool) or not isinstance(missing_ratio, numbers.Real) \
            or not 0 <= missing_ratio < 1:
        raise ValueError(f"missing_ratio must be in [0, 1), got {missing_ratio!r}")
    if snr is not None:
        snr = _check_positive(snr, "snr")
    rng = check_random_generator(random_state)

    factors = []
    for n_m in shape:
        A = rng.standard_normal((n_m, rank))
        factors.append(A / np.linalg.norm(A, axis=0))
    full = _cp_full(factors)
    offset = float(full.min())
    scale = float(full.max() - offset) or 1.0
    tensor = (full - offset) / scale
    noise_std = 0.0 if snr is None else float(np.sqrt(tensor.var() / snr))
    noisy = tensor + noise_std * rng.standard_normal(shape) if noise_std > 0 else tensor.copy()

    size = tensor.size
    n_missing = int(round(missing_ratio * size))
    flat = rng.permutation(size)
    missing, observed = np.sort(flat[:n_missing]), np.sort(flat[n_missing:])
    obs_idx = np.stack(np.unravel_index(observed, shape), axis=1).astype(np.int64)
    test_idx = np.stack(np.unravel_index(missing, shape), axis=1).astype(np.int64)
    return {
        "indices": obs_idx, "values": noisy.ravel()[observed],
        "test_indices": test_idx, "test_values": tensor.ravel()[missing],
        "test_values_noisy": noisy.ravel()[missing],
        "tensor": tensor, "noisy": noisy, "factors": factors, "offset": offset, "scale": scale,
        "noise_std": noise_std, "shape": shape,
    }


# --------------------------------------------------------------------------------------------
# MovieLens-100K
# --------------------------------------------------------------------------------------------

ML100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
# The MD5 that GroupLens publishes beside the archive (ml-100k.zip.md5).
ML100K_MD5 = "0e33842e24a9c977be4e0107933c0723"
_SPLIT_FILES = {"ua": ("ua.base", "ua.test"), "ub": ("ub.base", "ub.test"), "all": ("u.data", None)}
_SECONDS_PER_DAY = 86400


def get_data_home(data_home=None) -> Path:
    """``data_home``, else ``$DPTENSOR_DATA``, else ``~/dptensor_data``."""
    if data_home is None:
        data_home = os.environ.get("DPTENSOR_DATA", os.path.join("~", "dptensor_data"))
    return Path(data_home).expanduser()


def _read_ratings(path):
    """(user, item, rating, timestamp) columns of a tab-separated ml-100k ratings file."""
    raw = np.loadtxt(path, dtype=np.int64, delimiter="\t", ndmin=2)
    if raw.shape[1] != 4:
        raise ValueError(f"{path}: expected 4 tab-separated columns (user, item, rating, "
                         f"timestamp), got {raw.shape[1]}")
    return raw


def _download_ml100k(folder: Path):
    """Fetch the official archive, check its MD5, and extract the ratings files into ``folder``."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(ML100K_URL, timeout=60) as response:
        payload = response.read()
    digest = hashlib.md5(payload).hexdigest()
    if digest != ML100K_MD5:
        raise OSError(f"the downloaded {ML100K_URL} has MD5 {digest}, not the published "
                      f"{ML100K_MD5}; refusing to use it")
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        for name in archive.namelist():
            base = name.rsplit("/", 1)[-1]
            if name.startswith("ml-100k/") and base and "/" not in name[len("ml-100k/"):]:
                (tmp / base).write_bytes(archive.read(name))
    # Move each file in with one atomic rename, so an interrupted download never leaves a truncated
    # ratings file behind; other files already in the folder are left alone.
    folder.mkdir(exist_ok=True)
    for path in tmp.iterdir():
        os.replace(path, folder / path.name)
    tmp.rmdir()


def load_movielens_100k(data_home=None, download=True, split="ua"):
    r"""MovieLens-100K as a (user, item, day) ratings tensor with a train/test split.

    Reads the GroupLens ``ml-100k`` files from ``<data_home>/ml-100k/``: ``ua.base``/``ua.test``
    or ``ub.base``/``ub.test`` (the canonical splits: 10 ratings of each user held out), or
    ``u.data`` for ``split="all"``. Each line is ``user \t item \t rating \t unix timestamp``.

    Indices are 0-based: ``user - 1``, ``item - 1``, and ``day = (timestamp - t0) // 86400`` where
    ``t0`` is the earliest timestamp of the whole data set (train and test together), so both
    parts share one time axis. The shape is ``(max user, max item, max day + 1)`` over the whole
    data set; on the real data, 943 x 1682 x 215 (ratings from 1997-09-20 to 1998-04-22; the paper
    that introduced this tensor quotes 212 days).

    Parameters
    ----------
    data_home : str or Path, optional
        Folder holding ``ml-100k/``. Default ``$DPTENSOR_DATA``, else ``~/dptensor_data``.
    download : bool, default=True
        When the files are missing, download the official archive from GroupLens, check its MD5
        against the published one, and extract it. With ``False``, missing files raise
        ``FileNotFoundError``.
    split : {"ua", "ub", "all"}, default="ua"

    Returns
    -------
    dict with keys (the same as :func:`make_low_rank_tensor`'s, so code runs on either; a plain
    dict rather than a Bunch, whose ``.values`` would be the dict method)
        ``"indices"`` (n_train, 3) int64 and ``"values"`` (n_train,) float64 ratings 1..5;
        ``"test_indices"``, ``"test_values"`` likewise (empty for ``"all"``);
        ``"shape"`` (3-tuple); ``"t0"`` (unix time of day 0); ``"split"``;
        ``"value_range"`` ``(1.0, 5.0)``.
    """
    if split not in _SPLIT_FILES:
        raise ValueError(f'split must be "ua", "ub" or "all", got {split!r}')
    folder = get_data_home(data_home) / "ml-100k"
    train_name, test_name = _SPLIT_FILES[split]
    needed = [folder / name for name in (train_name, test_name) if name is not None]
    if not all(p.is_file() for p in needed):
        if not download:
            missing = ", ".join(str(p) for p in needed if not p.is_file())
            raise FileNotFoundError(f"MovieLens-100K files not found ({missing}); pass "
                                    f"download=True, or unpack {ML100K_URL} into {folder.parent}")
        _download_ml100k(folder)
    train = _read_ratings(needed[0])
    test = _read_ratings(needed[1]) if test_name is not None else np.empty((0, 4), dtype=np.int64)
    both = np.concatenate([train, test])
    if both.size == 0:
        raise ValueError(f"no ratings in {folder}")
    if both[:, :2].min() < 1:
        raise ValueError("user and item ids must start at 1")
    t0 = int(both[:, 3].min())

    def tensorize(raw):
        idx = np.stack([raw[:, 0] - 1, raw[:, 1] - 1, (raw[:, 3] - t0) // _SECONDS_PER_DAY], axis=1)
        return idx.astype(np.int64), raw[:, 2].astype(np.float64)

    indices, values = tensorize(train)
    test_indices, test_values = tensorize(test)
    shape = tuple(int(m) + 1 for m in np.concatenate([indices, test_indices]).max(axis=0))
    return {"indices": indices, "values": values, "test_indices": test_indices,
            "test_values": test_values, "shape": shape, "t0": t0, "split": split,
            "value_range": (1.0, 5.0)}


# --------------------------------------------------------------------------------------------
# Latent variable models: a spherical Gaussian mixture, an LDA corpus, and the Reuters corpus
# --------------------------------------------------------------------------------------------

def make_gaussian_mixture(n, d, k, *, separation=0.5, sigma=1.0, weights=None, random_state=None):
    """Samples of a spherical Gaussian mixture ``x = mu_h + sigma z``, ``h ~ Categorical(weights)``.

    Means have iid ``N(0, separation^2)`` entries (so two means lie about
    ``separation sqrt(2 d)`` apart); ``weights`` defaults to ``linspace(1, 2, k)``, normalised.

    Returns ``(X (n, d), means (k, d), weights (k,), labels (n,))``.
    """
    n, d, k = (check_positive_int(v, name) for v, name in ((n, "n"), (d, "d"), (k, "k")))
    rng = check_random_generator(random_state)
    means = rng.standard_normal((k, d)) * float(separation)
    w = np.linspace(1.0, 2.0, k) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (k,) or np.any(w <= 0):
        raise ValueError(f"weights must be {k} positive numbers, got {weights!r}")
    w = w / w.sum()
    labels = rng.choice(k, size=n, p=w)
    X = means[labels] + float(sigma) * rng.standard_normal((n, d))
    return X, means, w, labels


def gaussian_mixture_norm_bound(means, sigma, d) -> float:
    """A public row-norm bound for :func:`make_gaussian_mixture` data, from its parameters only:
    ``sqrt(max ||mu||^2 + sigma^2 d) + 3 sigma`` (``||x||`` concentrates within a few sigma of
    ``sqrt(||mu||^2 + sigma^2 d)``)."""
    top = float(np.max(np.sum(np.asarray(means, dtype=float) ** 2, axis=1)))
    return float(np.sqrt(top + sigma**2 * d) + 3.0 * sigma)


def make_lda_corpus(n_docs, n_words, k, *, alpha0=1.0, topic_concentration=0.1,
                    doc_length=(100, 500), random_state=None):
    """A word-count corpus drawn from latent Dirichlet allocation.

    Topics are ``Dirichlet(topic_concentration)`` over ``n_words`` words; each document draws
    ``theta ~ Dirichlet(alpha0 / k, ..., alpha0 / k)``, a length uniform in ``doc_length``
    (inclusive), and its words from ``theta @ topics``.

    Returns ``(counts (n_docs, n_words) CSR matrix, topics (k, n_words), alpha (k,))``.
    """
    import scipy.sparse as sp

    n_docs, n_words, k = (check_positive_int(v, name) for v, name in
                          ((n_docs, "n_docs"), (n_words, "n_words"), (k, "k")))
    rng = check_random_generator(random_state)
    topics = rng.dirichlet(np.full(n_words, float(topic_concentration)), size=k)
    alpha = np.full(k, float(alpha0) / k)
    lo, hi = doc_length
    blocks = []
    for start in range(0, n_docs, 2000):  # blocks keep the dense n x n_words probabilities small
        m = min(2000, n_docs - start)
        theta = rng.dirichlet(alpha, size=m)
        lengths = rng.integers(int(lo), int(hi) + 1, size=m)
        P = theta @ topics
        P /= P.sum(axis=1, keepdims=True)
        blocks.append(sp.csr_matrix(rng.multinomial(lengths, P).astype(np.float64)))
    return sp.vstack(blocks).tocsr(), topics, alpha


def load_reuters():
    """The 395 Reuters news stories shipped with the ``lda`` package (``pip install lda``).

    Offline: the corpus is read from that package's files (``lda/tests/reuters.ldac``, ``.tokens``,
    ``.titles``); nothing is downloaded. Raises ``ImportError`` when ``lda`` is not installed.

    Returns ``(counts (395, 4258) CSR matrix of word counts, vocabulary (tuple of str),
    titles (tuple of str))``.
    """
    import importlib.util

    import scipy.sparse as sp

    spec = importlib.util.find_spec("lda")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("load_reuters needs the 'lda' package, whose wheel ships the corpus: "
                          "pip install lda")
    folder = Path(list(spec.submodule_search_locations)[0]) / "tests"
    vocab = tuple((folder / "reuters.tokens").read_text().split())
    titles = tuple(line.strip() for line in (folder / "reuters.titles").read_text().splitlines())
    rows, cols, vals = [], [], []
    for i, line in enumerate((folder / "reuters.ldac").read_text().splitlines()):
        for pair in line.split()[1:]:  # the first field is the number of distinct words
            word, count = pair.split(":")
            rows.append(i)
            cols.append(int(word))
            vals.append(float(count))
    counts = sp.csr_matrix((vals, (rows, cols)), shape=(len(titles), len(vocab)))
    return counts, vocab, titles


__all__ += ["make_gaussian_mixture", "gaussian_mixture_norm_bound", "make_lda_corpus",
            "load_reuters"]
