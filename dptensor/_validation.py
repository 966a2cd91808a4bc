"""Input checks shared by every estimator: clear errors that name the parameter and the bound."""
from __future__ import annotations

import decimal
import math
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import assert_all_finite, check_array

from ._guards import warn
from .accounting import PrivacyAccountant
from .exceptions import (DEFAULT_DELTA, PrivacyWarning, check_delta, check_epsilon, integer_scalar,
                         real_scalar)

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _sklearn_validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _sklearn_validate_data(estimator, X, **kwargs):
        return estimator._validate_data(X, **kwargs)

__all__ = ["check_epsilon", "check_delta", "check_privacy", "check_positive_int", "check_data_norm",
           "check_symmetric_tensor", "check_random_generator", "check_finite", "check_delta_for_n",
           "check_numeric_array", "validate_private_data", "validate_stream_chunk",
           "zero_nonfinite_rows", "check_groups", "check_value_range", "check_positive_real",
           "check_nonnegative_real", "check_completion_targets", "check_scale",
           "check_projections", "check_data_scale"]


def check_privacy(epsilon, delta, accountant=None, *, gaussian=True) -> tuple[float, float]:
    """Validate an estimator's ``(epsilon, delta)``; ``delta=None`` takes the accountant's delta.

    With Gaussian noise and a finite epsilon, delta must be > 0.
    """
    if accountant is not None and not isinstance(accountant, PrivacyAccountant):
        raise TypeError("accountant must be a PrivacyAccountant or "
                        f"None, got {type(accountant).__name__}")
    epsilon = check_epsilon(epsilon)
    if delta is None:
        delta = accountant.delta if accountant is not None else DEFAULT_DELTA
    delta = check_delta(delta)
    if gaussian and math.isfinite(epsilon) and delta == 0:
        whose = " (the accountant's delta: it is 0)" if accountant is not None and \
            accountant.delta == 0 else ""
        raise ValueError(f"delta must be > 0 for a finite epsilon{whose}: the Gaussian mechanism "
                         "has no pure-epsilon guarantee. Give a delta > 0 (say 1e-5); under a "
                         "delta=0 budget only pure (Laplace) mechanisms fit, such as "
                         "PrivateTensorCompletion(perturbation='input')")
    return epsilon, delta


def check_delta_for_n(delta: float, n_samples: int, epsilon: float, unit: str = "row") -> None:
    """Warn (``PrivacyWarning``) when a private fit's ``delta`` is not below ``1 / n``.

    A mechanism that publishes one record picked at random, in the clear, is ``(0, 1/n)``-DP:
    a delta of ``1/n`` or more permits it, so a meaningful delta is well below ``1/n``. ``n`` (the
    number of ``unit`` records) is public. Call it before the spend, so the warning comes before
    anything is released.
    """
    if math.isfinite(epsilon) and n_samples > 0 and delta >= 1.0 / n_samples:
        warn(f"delta={delta:g} is not below 1/n = 1/{n_samples} "
             f"({1.0 / n_samples:.3g}) for these n={n_samples} {unit}s: a "
             f"mechanism that publishes one {unit} at random in the clear meets "
             "(0, 1/n)-DP, so delta should be well below 1/n (e.g. 1/n^2 or less)",
             PrivacyWarning)


def check_positive_int(value, name, minimum=1) -> int:
    """An int >= ``minimum``: a NumPy integer, or a 0-d array of one, too (not a bool or a
    float, nor a 0-d array of one)."""
    number = integer_scalar(value)
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(number)


def is_zero_int(value) -> bool:
    """Whether ``value`` is the integer 0: a NumPy integer or a 0-d array of one too, as
    :func:`check_positive_int` reads them (not ``False``, nor a float)."""
    number = integer_scalar(value)
    return isinstance(number, numbers.Integral) and not isinstance(number, bool) and number == 0


def check_verbose(verbose) -> int:
    """An int >= 0 (a bool is refused: ``verbose=True`` almost always means 1, but says less)."""
    number = integer_scalar(verbose)  # a 0-d array of an integer is that integer
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise TypeError(f"verbose must be an int >= 0, got {verbose!r}")
    if number < 0:
        raise ValueError(f"verbose must be >= 0, got {verbose!r}")
    return int(number)


# data_norm^3 (a third moment's sensitivity) stays a normal float64,
# with room for the noise multiplier.
DATA_NORM_RANGE = (1e-90, 1e90)

#: The range of every public scale a fit's noise is calibrated to (``data_norm``, the width of
#: ``value_range``, ``clip_norm``). Within it a scale's cube, and the sum of its square over up
#: to 1e100 values (1e180 each at most), stay finite and normal in float64, with room for the
#: noise multiplier: no noise scale or released sum over- or underflows after the spend.
SCALE_RANGE = DATA_NORM_RANGE


def check_scale(value: float, name: str, shown=None) -> float:
    """Refuse a public scale outside :data:`SCALE_RANGE` before the spend: the noise scales and
    the released sums are its powers, and one that over- or underflows would fail (or release
    nothing useful) after the spend, its budget lost. ``shown``: the value as the user gave it."""
    # a float32 compared with 1e90 casts the bound to float32: an overflow warning, so compare
    # the float
    shown, value = value if shown is None else shown, float(value)
    if not SCALE_RANGE[0] <= value <= SCALE_RANGE[1]:
        raise ValueError(f"{name} must lie in [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}] (its "
                         f"powers enter the noise scales); rescale the data, got {shown!r}")
    return value


def check_data_norm(data_norm, epsilon, name="data_norm"):
    """Row-level privacy needs a public bound on row norms; ``None`` only without privacy."""
    if data_norm is None:
        if math.isfinite(epsilon):
            raise ValueError(f"{name} is required when epsilon is finite: rows are "
                             "clipped to this l2 norm and the noise is calibrated to "
                             "it. Choose it from public knowledge, not from the data.")
        return None
    data_norm = real_scalar(data_norm)  # a 0-d array of a number is that number, as epsilon's
    if isinstance(data_norm, bool) or not isinstance(data_norm, numbers.Real) or not (
            data_norm > 0 and math.isfinite(data_norm)):
        raise ValueError(f"{name} must be a finite number > 0, got {data_norm!r}")
    # before the spend: the sensitivities are powers of it (up to the cube)
    return check_scale(data_norm, name)


def check_numeric_array(X, name="X", allow_nd=False, ensure_2d=True):
    """Refuse X unless it is a 2-D (``allow_nd``: at least 2-D; ``ensure_2d=False``: any shape, as
    a target ``y``) array of real numbers, in words that quote none of its values.

    An error is released too, and scikit-learn's own checks echo the data: a 1-D array or a
    scalar is printed in full, a string quoted ("could not convert string to float: '...'"), a
    complex array printed. Run before scikit-learn's checks (:func:`validate_private_data`); X is
    returned unchanged (a DataFrame keeps its column names), only its shape and dtype (public)
    are named.
    """
    if sp.issparse(X) or (isinstance(getattr(X, "dtype", None), np.dtype) and hasattr(X, "ndim")
                          and X.dtype.kind != "O"):
        A = X  # its dtype and shape suffice: np.asarray would compute a Dask array, copy a GPU one
    else:
        try:
            A = np.asarray(X)
        except (ValueError, TypeError):
            raise ValueError(
                f"{name} must be a 2-D array of numbers (rows of equal length)") from None
    kind = A.dtype.kind
    # numbers held as objects convert, as scikit-learn's check_array converts them; numbers held
    # as text convert too, where scikit-learn refuses them
    if kind in "OUS":
        try:
            kind = A.astype(np.float64).dtype.kind
        except TypeError:  # an entry that is no number at all (numpy's words, none of its values)
            if _holds_missing(A):
                raise ValueError(f"{name} holds a missing value (pd.NA, None or NaT): drop the "
                                 "rows that hold one, or fill them in from public knowledge, "
                                 "before the fit (an imputer fitted on the data learns from it "
                                 "without privacy)") from None
            raise TypeError(f"{name} must hold real numbers: float() argument must be "
                            "a string or a real number, and some entry is neither") from None
        except ValueError:
            pass
    if kind == "c":  # scikit-learn's words, without its print of the array
        raise ValueError(f"Complex data not supported: {name} must "
                         f"hold real numbers (dtype {A.dtype})")
    if kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers, and some entries are not "
                         f"(dtype {A.dtype}); raw text goes through a vectorizer first")
    if ensure_2d and A.ndim != 2 and not (allow_nd and A.ndim > 2):
        raise ValueError(f"{name} must be 2-D (one row per sample), got shape {A.shape}. "
                         f"Reshape your data: a single sample is {name}.reshape(1, -1), "
                         f"a single feature {name}.reshape(-1, 1)")
    return X


def _holds_missing(A) -> bool:
    """Whether an object array holds a missing-value marker (``None``, pandas' ``NA`` or
    ``NaT``): named by its type, so that pandas need not be imported."""
    return any(v is None or type(v).__name__ in ("NAType", "NaTType") for v in A.ravel())


def check_projections(X, width: int, name="X"):
    """``inverse_transform``'s input: a 2-D array of finite real numbers with ``width`` columns
    (the components), refused as scikit-learn's ``check_array`` refuses a model's input, in words
    that quote none of its values. Float32 stays float32."""
    check_numeric_array(X, name)
    Z = check_array(X, dtype=[np.float64, np.float32], ensure_all_finite=False, input_name=name)
    if not np.all(np.isfinite(Z)):
        raise ValueError(f"{name} contains NaN or infinity: inverse_transform maps finite "
                         "projections (what transform returns) back to the features; drop or "
                         "replace the rows that hold one")
    if Z.shape[1] != width:
        raise ValueError(f"{name} must have shape (n_samples, {width}), got {Z.shape}")
    return Z


def validate_private_data(estimator, X, **kwargs):
    """scikit-learn's ``validate_data(estimator, X, **kwargs)`` after :func:`check_numeric_array`,
    so that no error quotes a value of X (every estimator's entry point for in-memory data)."""
    check_numeric_array(X, allow_nd=kwargs.get("allow_nd", False))
    return _our_advice(estimator, _sklearn_validate_data, estimator, X, **kwargs)


def check_finite_rows(estimator, X) -> None:
    """scikit-learn's refusal of a NaN or an infinity in the validated array ``X``, with the
    message of :func:`validate_private_data` (for a fit whose validation left it to its pass)."""
    _our_advice(estimator, assert_all_finite, X, input_name="X",
                estimator_name=type(estimator).__name__)


def _our_advice(estimator, check, *args, **kwargs):
    try:
        return check(*args, **kwargs)
    except ValueError as exc:
        name = type(estimator).__name__
        # a 3-D X is a tensor: it has no rows to drop, and one with unknown entries is completion's
        tensor = any(getattr(a, "ndim", 0) > 2 for a in args)
        drop = "" if tensor else "drop the rows that hold one, or "
        after = ("; a tensor of which only some entries are known is PrivateTensorCompletion's "
                 "input" if tensor else "")
        if "contains infinity" in str(exc):  # scikit-learn says what is wrong, not what to do
            raise ValueError(f"{exc} {name} does not accept infinite values: {drop}replace them "
                             f"from public knowledge, before the fit{after}") from None
        if "HistGradientBoosting" not in str(exc):
            raise
        # scikit-learn's advice is for its own supervised models, and its imputers would learn
        # from the data without privacy: say what holds here (its first line names NaN or inf)
        first = str(exc).split("\n", 1)[0]
        raise ValueError(f"{first} {name} does not accept missing values: {drop}fill them in "
                         "from public knowledge, before the fit (an imputer fitted on the data "
                         f"learns from it without privacy){after}") from None


def validate_stream_chunk(estimator, X, *, reset: bool, **kwargs):
    """:func:`validate_private_data` for one chunk of a row stream; ``reset`` when it starts one.

    A private stream spends when it starts, before its later chunks exist, so a NaN or infinity
    in one cannot be refused without an error after the spend that depends on the data. It
    takes every row, in every chunk (the first too, so that the result does not depend on where
    the stream is cut), through the public map :func:`zero_nonfinite_rows`, which leaves the
    guarantee as it was (``docs/derivations/pca.rst``). A non-private stream has no guarantee to
    keep and refuses such a chunk, the more useful answer there. Whether the stream is private
    is its recorded cost's answer once it runs: a parameter changed mid-stream does not count.
    A private stream's first chunk of a text or object dtype is refused by that dtype, before
    the spend (a list, by the dtype NumPy gives it). Its later chunks are read by
    :func:`_later_rows`, in the stream's dtype (``estimator._stream.dtype``): nothing in their
    values or column names can raise or warn (:func:`_later_chunk`; an array or frame is still
    refused by its shape, before any of it is read, and the stream goes on).
    """
    if reset:
        private = math.isfinite(estimator._privacy_target()[0])
        kind = _array_kind(X)
        if private and kind in ("U", "S"):  # its dtype, before the spend: no value is quoted
            raise TypeError(f"X is text (dtype {np.asarray(X).dtype}): a private stream maps "
                            "every row that holds no number to a zero row, so it would spend "
                            "its budget and fit nothing. Convert the rows to numbers first")
        if private and kind == "O":
            raise TypeError("X holds Python objects (dtype object, or a frame's column of "
                            "objects, text or dates): a private stream maps every row that "
                            "holds no number to a zero row, so it could spend its budget and "
                            "fit nothing. Convert the rows to numbers first: "
                            "np.asarray(X, dtype=float)")
    else:
        private = estimator.privacy_cost_.private
        # in the stream's dtype before its rows are mapped: a float64 value past float32's range
        # is an infinity in a float32 stream, so a zero row, where the stream's own cast fed it
        kwargs["dtype"] = estimator._stream.dtype
    if not private:
        return validate_private_data(estimator, X, reset=reset, **kwargs)
    if not reset:  # a later chunk of no rows adds none (a filter may leave one empty): no error
        kwargs["ensure_min_samples"] = 0
    # a value past float64's range (a long double's) is cast to an infinity, so to a zero row:
    # silently, whatever the caller's NumPy settings (no overflow warning or error)
    with np.errstate(all="ignore"):
        if reset:
            X = validate_private_data(estimator, _numbers_or_nan(X), reset=True,
                                      ensure_all_finite=False, **kwargs)
        else:
            X = _later_chunk(estimator, _later_rows(X, estimator.n_features_in_), **kwargs)
    return zero_nonfinite_rows(X)


def _later_chunk(estimator, X, **kwargs):
    """:func:`validate_private_data` of a private stream's later chunk, save scikit-learn's check
    of its column names: a frame after an array (or the reverse) warned, other names raised,
    after the spend. The first chunk fixes ``feature_names_in_``; a later one is read by
    position, its names ignored. Its width is checked, in scikit-learn's words."""
    if type(X).__module__.split(".")[0] == "pandas" and getattr(X, "ndim", 0) == 2:
        # its labels replaced by positions: scikit-learn's check_array reads a frame through
        # narwhals, which raised DuplicateError on a label given twice, after the spend
        X = X.set_axis(range(X.shape[1]), axis=1)
    check_numeric_array(X)
    X = check_array(X, input_name="X", estimator=estimator, ensure_all_finite=False, **kwargs)
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but {type(estimator).__name__} is "
                         f"expecting {estimator.n_features_in_} features as input.")
    return X


def _array_kind(X):
    """The dtype kind of an array, or of the array NumPy makes of a list (``None`` for data
    frames, sparse matrices and ragged rows: their own checks)."""
    if hasattr(X, "tocsr"):
        return None
    if hasattr(X, "dtypes"):  # a pandas frame's columns: one of objects, text or dates is
        if type(X).__module__.split(".")[0] != "pandas" or getattr(X, "ndim", 0) != 2:
            return None  # refused as an array of objects is; other frames: their own checks
        return "O" if {getattr(dt, "kind", "O") for dt in X.dtypes} - set("biuf") else None
    try:  # a dtype NumPy does not know (a torch tensor's): the array NumPy makes of it
        return np.dtype(X.dtype).kind
    except (AttributeError, TypeError):
        pass
    try:
        return np.asarray(X).dtype.kind
    except (ValueError, TypeError):
        return None


def _numbers_or_nan(X, later=False):
    """Text or objects as float64, every entry that is no real number (``"n/a"``, ``None``, a
    complex value) as NaN, so that a private stream maps its row to a zero row: refusing it
    would be an error after the spend that depends on one cell. A pandas frame with a column
    of another dtype (objects, text, pd.NA) is the frame of those floats, its labels kept.
    ``later``: a later chunk, where an array of complex numbers or dates is all NaN too (a first
    one is refused by its dtype, before the spend). Other input is returned as it is."""
    if type(X).__module__.split(".")[0] == "pandas" and getattr(X, "ndim", 0) == 2:  # in memory
        if all(isinstance(dt, np.dtype) and dt.kind in "biuf" for dt in X.dtypes):
            return X
        return type(X)(_numbers_or_nan(X.to_numpy(dtype=object)), index=X.index,
                       columns=X.columns)
    if hasattr(X, "dtypes") or hasattr(X, "tocsr"):  # other frames and sparse: their checks
        return X
    try:
        A = np.asarray(X)
    except ValueError:  # ragged rows: the checks name the shape
        return X
    if later and A.dtype.kind in "cmMV":  # no entry is a real number: each row a zero row
        return np.full(A.shape, math.nan)
    if A.dtype.kind not in "OUS":
        return X
    return np.vectorize(_number, otypes=[np.float64])(A) if A.size else A.astype(np.float64)


def _number(value) -> float:
    """``value`` as a float where it is a real number or text that spells one, else NaN: by its
    type, so that no value can warn or raise (``float`` of a NumPy complex scalar warns and drops
    its imaginary part, a ``timedelta64`` is a NumPy integer, another type's ``__float__`` may
    do anything)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (np.timedelta64, np.datetime64)) or not isinstance(
            value, (numbers.Real, np.bool_, decimal.Decimal, str, bytes)):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # text that spells no number, a huge int
        return math.nan


def _later_rows(X, d: int):
    """A later chunk of a private stream of ``d`` features, every entry that is no real number
    as NaN (:func:`_numbers_or_nan`; an array of complex numbers or dates: all of them).

    A list (or an array of objects holding rows) has no shape of its own: NumPy's depends on its
    rows (a row of another length makes it ragged, one complex or text cell makes every cell
    complex or text). Unless NumPy makes a 2-D array of real numbers and ``d`` columns of it, it
    is read row by row, and a row that is not ``d`` real numbers is NaN: whether a row is used
    depends on that row alone, as the stream's guarantee needs, and nothing is refused.
    """
    if isinstance(X, (list, tuple)):
        try:
            A = np.asarray(X)
        except (ValueError, TypeError):  # ragged rows
            A = None
        if A is not None and A.dtype.kind in "biuf" and A.shape[1:] == (d,):
            return A
    elif not (isinstance(X, np.ndarray) and X.dtype.kind == "O" and X.ndim == 1):
        return _numbers_or_nan(X, later=True)  # a 1-D array of objects: ragged rows, read below
    out = np.full((len(X), d), math.nan)
    for i, row in enumerate(X):
        try:
            row = np.asarray(row, dtype=object)
        except (ValueError, TypeError):
            continue
        if row.shape == (d,):
            out[i] = [_number(v) for v in row]
    return out


def zero_nonfinite_rows(X):
    """``X`` with every row that holds a NaN or an infinity replaced by a zero row.

    A fixed map applied to each row on its own: neighbouring streams (one row replaced) stay
    neighbours, every row keeps its place and its count, and a zero row lies in every row domain
    the sensitivities assume (``||x|| <= data_norm``). Silent, and ``X`` is not modified (a copy is
    made when a row is replaced).

    >>> zero_nonfinite_rows(np.array([[1.0, np.nan], [2.0, 3.0], [np.inf, 0.0]]))
    array([[0., 0.],
           [2., 3.],
           [0., 0.]])
    """
    with np.errstate(all="ignore"):  # a finite row's sum may overflow: it is only checked again
        suspect = np.flatnonzero(~np.isfinite(np.einsum("ij->i", X)))
    bad = suspect[~np.isfinite(X[suspect]).all(axis=1)]
    if not bad.size:
        return X
    X = np.array(X, copy=True)
    X[bad] = 0
    return X


def check_finite(X, name="X"):
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinity")
    return X


def check_symmetric_tensor(T, *, symmetrize=False, rtol=1e-10, name="X") -> np.ndarray:
    """A cubical 3-way array, symmetric under all 6 index permutations (or made so on request)."""
    T = np.asarray(T)
    if T.ndim != 3 or not (T.shape[0] == T.shape[1] == T.shape[2]):
        raise ValueError(f"{name} must be a symmetric d x d x d tensor, got shape {T.shape}")
    if T.dtype not in (np.float32, np.float64):
        T = T.astype(np.float64)
    from .algorithms.operators import symmetrize_tensor
    from .algorithms.symmetry import symmetry_gaps

    if symmetrize:
        return symmetrize_tensor(check_finite(T, name))
    # Two adjacent transpositions generate all 6 permutations: checking them checks every symmetry.
    finite, scale, *worst = symmetry_gaps(T)
    if not finite:
        raise ValueError(f"{name} contains NaN or infinity")
    scale = max(scale, np.finfo(T.dtype).tiny)
    tol = rtol * scale if T.dtype == np.float64 else max(rtol, 1e-5) * scale
    for axes, gap in zip(((1, 0, 2), (0, 2, 1)), worst):
        if gap > tol:
            raise ValueError(f"{name} is not a symmetric tensor (it changes under transposing "
                             f"axes {axes}); pass symmetrize=True to use its symmetric part")
    return T


def check_random_generator(random_state) -> np.random.Generator:
    """A ``numpy.random.Generator`` from ``random_state``.

    ``None`` draws fresh OS entropy: the only choice fit for a real release. An int (or a
    ``RandomState`` / ``Generator``) makes the noise reproducible, which is for tests and research:
    anyone who knows the seed can subtract the noise.
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1, size=4))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return np.random.default_rng(int(random_state))
    raise TypeError("random_state must be None, an int, a RandomState "
                    f"or a Generator, got {random_state!r}")


def _missing_label(v) -> bool:
    """A label that names no one: None, or a value unequal to itself (a NaN of any type: a
    float32 NaN is no Python float, and ``np.unique`` makes each one a group of its own, so the
    rows of one person with missing labels would count as many people)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return True
    try:
        return bool(v != v)
    except (TypeError, ValueError):  # a missing-value marker whose truth is undefined
        return True


def check_groups(groups, n_rows: int):
    """``(codes, n_groups)``: each row's group as an integer ``0 .. n_groups - 1``, in the order
    of the sorted labels, from ``groups`` (one label a row; rows sharing a label are one person).

    Refused in words that quote no label (a label may be a name): not one-dimensional, of a
    length other than the rows', empty, holding a NaN, a NaT or a missing value, or labels of
    mixed types (a list's too, which NumPy would make strings) or of an order that is not total
    (sets: sorting would not bring one person's labels together). Call it before the spend: every
    row's label is in hand then.
    """
    try:
        labels = np.asarray(groups)
    except (ValueError, TypeError):
        raise ValueError("groups must be a 1-D array of labels, one a row") from None
    if labels.ndim != 1:
        raise ValueError(f"groups must be a 1-D array of labels, one a row; got shape "
                         f"{labels.shape}")
    if labels.shape[0] != n_rows:
        raise ValueError(f"groups has {labels.shape[0]} labels but X has {n_rows} rows: "
                         "give one label a row")
    if labels.dtype.kind == "c":
        raise ValueError("groups must hold real numbers or strings, not complex numbers")
    if labels.dtype.kind == "U" and not isinstance(groups, np.ndarray) \
            and not all(isinstance(v, str) for v in groups):
        # NumPy turns [1, "1"] into two equal strings, merging two people silently; the same
        # labels in an object array are refused, so refuse them here too
        raise TypeError("groups holds labels that cannot be compared (mixed types)")
    if labels.dtype.kind == "f" and not np.all(np.isfinite(labels)):
        raise ValueError("groups holds a NaN or an infinity: every row needs the label of the "
                         "person it belongs to")
    if labels.dtype.kind in "mM" and np.any(np.isnat(labels)):
        # NaT is the missing value of dates and durations, refused as in an object array
        raise ValueError("groups holds a missing label (NaT): every row needs the label of the "
                         "person it belongs to")
    if labels.dtype.kind == "O":
        if any(_missing_label(v) for v in labels):
            raise ValueError("groups holds a missing label (None or NaN): every row needs the "
                             "label of the person it belongs to")
        try:
            unique, codes = np.unique(labels, return_inverse=True)
            # np.unique sorts, then merges equal neighbours: under an order that is not total
            # (sets, tuples holding a NaN) equal labels need not end up side by side, and one
            # person's rows would count as several groups. Sorted distinct labels of a total
            # order increase strictly; anything else is refused.
            ordered = all(bool(a < b) for a, b in zip(unique[:-1], unique[1:]))
        except (TypeError, ValueError):  # ValueError: a comparison whose truth is undefined
            raise TypeError("groups holds labels that cannot be compared (mixed types)") from None
        if not ordered:
            raise TypeError("groups holds labels that cannot be compared (their order is not "
                            "total, as for sets): use one string or number a person")
    else:
        _, codes = np.unique(labels, return_inverse=True)
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    return codes, int(codes.max()) + 1 if codes.size else 0


def check_value_range(value_range, private, user=False):
    """A completion fit's public ``(lo, hi)`` checked (``None`` without one, refused when
    ``private`` or at the ``user`` level, whose predictions need it)."""
    if value_range is None:
        if user and not private:
            raise ValueError('privacy_unit="user" needs value_range even without privacy: '
                             "each user's predictions are solved from her own ratings, scaled "
                             "and clipped by it. Give the values' public (lo, hi), e.g. the "
                             "rating scale")
        if private:
            raise ValueError("value_range is required when epsilon is finite: values are "
                             "clipped to this public (lo, hi) and the noise is calibrated to "
                             "hi - lo. Choose it from public knowledge (e.g. the rating "
                             "scale), not from the data.")
        return None
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise ValueError("value_range must be a pair (lo, hi) of numbers, "
                         f"got {value_range!r}")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"value_range must be finite with lo < hi, got {value_range!r}")
    # The width is the values' scale: the noise and the released offsets and factors are in its
    # units, and their squares are summed over the n values (n * (hi - lo)^2 must stay finite).
    check_scale(hi - lo, "value_range's width hi - lo", shown=value_range)
    return lo, hi


_NO_VALUE_RANGE = ("without value_range the fit takes its centre and scale from the data, and "
                   "their squares overflow float64 there. Rescale the values (divide them by a "
                   "power of ten) or give value_range, a public (lo, hi) they are clipped to")


def check_data_scale(y, name="y", why=_NO_VALUE_RANGE):
    """Refuse, before the spend, values a fit without ``value_range`` cannot scale: it takes its
    centre and scale from the data, and beyond :data:`SCALE_RANGE` their squared sums (offsets'
    root mean squares, the score) overflow float64 (at 1e300: infinite ``offsets_rms_`` and
    score, with overflow warnings). ``why``: the reason and what to do. The words quote no value.
    Returns ``y``."""
    if y.size and float(np.max(np.abs(y))) > SCALE_RANGE[1]:
        raise ValueError(f"{name} holds values beyond +-{SCALE_RANGE[1]:g}: {why}")
    return y


def check_positive_real(value, name, default, *, scale=False, maximum=math.inf):
    """``value`` (a 0-d array of one too) as a finite float > 0 and at most ``maximum``
    (``None``: ``default``);
    ``scale``: a noise scale, in :data:`SCALE_RANGE` too (:func:`check_scale`)."""
    if value is None:
        return default
    value = real_scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum:g}, got {value!r}")
    return check_scale(value, name) if scale else float(value)


def check_nonnegative_real(value, name):
    """``value`` (a 0-d array of one too) as a finite float >= 0."""
    value = real_scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


_OBSERVED_ONLY = ("pass only the observed entries (to_observations turns a NaN-marked array "
                  "into (X, y))")


def check_completion_targets(y, n_index, name="y", of="X", advice=_OBSERVED_ONLY):
    """The values ``y`` of a completion fit (or of its ``score``, or of a prediction history:
    ``name`` and ``of`` its index tuples' name) as float64, one per index tuple (``n_index``):
    a column vector is raveled with a warning; others refused, in words that quote no value.
    ``advice``: what the error for a NaN or an infinity tells the caller to do."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        warn(f"A column-vector {name} was passed when a 1d array was expected; "
             "it is raveled", DataConversionWarning)
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per index tuple), got shape {y.shape}")
    if y.shape[0] != n_index:
        raise ValueError(f"{name} has {y.shape[0]} values but {of} has {n_index} index tuples")
    if y.dtype.kind == "O":  # numbers held as objects are values as any others
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be real numbers, and some entry is no number") from None
    if y.dtype.kind not in "biuf":  # complex too: casting would drop the imaginary parts
        raise TypeError(f"{name} must be real numbers, got dtype {y.dtype}")
    y = y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinity: {advice}")
    return y
