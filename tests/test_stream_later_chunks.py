"""A private stream's later chunks: nothing in their values may fail or warn after the spend.

The stream spends at its first chunk. A later chunk of complex numbers or dates, a list of
ragged rows or of rows of another length, a list with one complex cell, an empty chunk, a long
double past float64's range or a NumPy complex scalar among objects each raised (or warned)
after the spend, depending on what the chunk held. Each row that holds no ``d`` real numbers is
now a zero row, as a row holding text was; an array or frame of another shape is refused by its
shape before any of it is read, and the stream goes on. Each test failed before the fix.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from dptensor import PrivatePCA, StreamingTensorPower
from expected_warnings import noise_dominated

pytestmark = [noise_dominated()]

D = 4


def _rows(n=300, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, D)) * np.r_[1.0, 0.5, 0.3, 0.2]
    return 0.9 * X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))


def _pca():
    return PrivatePCA(2, epsilon=1.0, data_norm=1.0, block_size=100, random_state=0)


def _stp():
    return StreamingTensorPower(1, epsilon=1.0, data_norm=1.0, batch_size=60, n_iter=4,
                                random_state=0)


STREAMS = pytest.mark.parametrize("make", [_pca, _stp], ids=["PrivatePCA", "StreamingTensorPower"])


def _strict():
    """The strictest settings a caller may run under: any warning or floating-point error
    raises."""
    class Strict:
        def __enter__(self):
            self._w = warnings.catch_warnings()
            self._w.__enter__()
            warnings.simplefilter("error")
            self._e = np.errstate(all="raise")
            self._e.__enter__()

        def __exit__(self, *exc):
            self._e.__exit__(*exc)
            return self._w.__exit__(*exc)
    return Strict()


def _same_as(make, later, mapped):
    """Feeding ``later`` after the first 120 rows releases what feeding ``mapped`` does; both
    streams then take the rest of the rows."""
    X = _rows()
    a, b = make().partial_fit(X[:120]), make().partial_fit(X[:120])
    with _strict():
        a.partial_fit(later)
    b.partial_fit(mapped)
    a.partial_fit(X[120:]), b.partial_fit(X[120:])
    assert a.n_samples_seen_ == b.n_samples_seen_
    np.testing.assert_array_equal(a.components_, b.components_)


@STREAMS
def test_a_later_chunk_of_complex_numbers_or_dates_is_zero_rows(make):
    X = _rows()[:30]
    for chunk in (X.astype(np.complex128), X.astype(np.complex64),
                  np.zeros((30, D), dtype="datetime64[s]"),
                  np.zeros((30, D), dtype="timedelta64[ns]")):
        _same_as(make, chunk, np.zeros((30, D)))


@STREAMS
def test_ragged_rows_in_a_later_chunk_are_zero_rows_one_by_one(make):
    X = _rows()[:6]
    rows = [list(r) for r in X]
    rows[1] = rows[1][:3]                  # too short
    rows[2] = rows[2] + [0.5]              # too long
    rows[3] = [rows[3][0], [1.0], 0.0, 0.0]  # a cell that is a list
    rows[4] = 0.5                          # no row at all
    mapped = X.copy()
    mapped[1:5] = 0.0
    _same_as(make, rows, mapped)
    _same_as(make, np.array(rows, dtype=object), mapped)  # the same rows as an object array


@STREAMS
def test_a_row_of_a_list_is_used_or_not_by_itself_alone(make):
    """NumPy makes a list with one complex cell all complex, one with one text cell all text
    (where True no longer reads as 1): each row is read on its own, and only its own row is
    zero."""
    X = _rows()[:6]
    rows = [list(r) for r in X]
    rows[0][0] = True
    rows[2][1] = 1 + 0j
    mapped = X.copy()
    mapped[0, 0], mapped[2] = 1.0, 0.0
    _same_as(make, rows, mapped)
    rows[4][3] = "n/a"
    mapped[4] = 0.0
    _same_as(make, rows, mapped)


@STREAMS
def test_a_list_of_rows_of_another_length_is_zero_rows(make):
    X = _rows()[:5]
    _same_as(make, [list(r[:3]) for r in X], np.zeros((5, D)))
    _same_as(make, list(X[0]), np.zeros((D, D)))  # D numbers: D rows that are no rows


@STREAMS
def test_an_empty_later_chunk_adds_nothing(make):
    X = _rows()
    for empty in (np.zeros((0, D)), [], pd.DataFrame(np.zeros((0, D)))):
        a, b = make().partial_fit(X[:120]), make().partial_fit(X[:120])
        with _strict():
            a.partial_fit(empty)
        a.partial_fit(X[120:]), b.partial_fit(X[120:])
        np.testing.assert_array_equal(a.components_, b.components_)


def test_an_empty_sparse_later_chunk_adds_nothing_to_a_pca_stream():
    """PrivatePCA streams sparse rows one densified block at a time; one of no rows was
    refused, after the spend, as sparse input the stream does not take."""
    import scipy.sparse as sp

    X = _rows()
    a, b = _pca().partial_fit(X[:120]), _pca().partial_fit(X[:120])
    with _strict():
        a.partial_fit(sp.csr_matrix((0, D)))
    a.partial_fit(X[120:]), b.partial_fit(X[120:])
    np.testing.assert_array_equal(a.components_, b.components_)
    with pytest.raises(ValueError, match="X has 3 features"):  # its shape is checked as ever
        a.partial_fit(sp.csr_matrix((0, 3)))


@STREAMS
def test_entries_past_float64_or_complex_scalars_are_zero_rows_silently(make):
    X = _rows()[:6]
    wide = X.astype(np.longdouble)
    wide[1, 2] = np.longdouble("1e400")
    objects = X.astype(object)
    objects[2, 1] = np.complex64(1 + 2j)   # float() of it warns and drops the imaginary part
    objects[3, 0] = np.longdouble("1e400")
    objects[4, 0] = np.timedelta64(5, "ns")  # a NumPy integer, and no number
    mapped = X.copy()
    mapped[1] = 0.0
    _same_as(make, wide, mapped)
    mapped = X.copy()
    mapped[2:5] = 0.0
    _same_as(make, objects, mapped)
    mapped = X.copy()
    mapped[1] = 0.0
    frame = pd.DataFrame(X.astype(object))
    frame.iloc[1, 0] = 2 + 0j
    _same_as(make, frame, mapped)


@STREAMS
def test_a_float64_value_past_float32_in_a_float32_stream_is_a_zero_row(make):
    """The stream cast a later float64 chunk to its float32 after mapping its rows: 1e300 was
    fed as an infinity (the release moved, with an overflow warning)."""
    X = _rows()
    a, b = make().partial_fit(X[:120].astype(np.float32)), \
        make().partial_fit(X[:120].astype(np.float32))
    big, zero = X[120:].copy(), X[120:].copy()
    big[2, 1], zero[2] = 1e300, 0.0
    with _strict():
        a.partial_fit(big)
    b.partial_fit(zero)
    np.testing.assert_array_equal(a.components_, b.components_)


@STREAMS
def test_an_array_of_another_shape_is_refused_by_its_shape_and_the_stream_goes_on(make):
    X = _rows()
    a, b = make().partial_fit(X[:120]), make().partial_fit(X[:120])
    messages = set()
    for chunk in (X[:10, :3], X[0], X[:10, :, None], pd.DataFrame(X[:10, :3])):
        for values in (chunk, chunk * np.nan):  # the words are the same whatever it holds
            with pytest.raises(ValueError) as info:
                a.partial_fit(values)
            messages.add(str(info.value))
    assert len(messages) == 3  # a frame of 3 columns is told what an array of 3 is
    a.partial_fit(X[120:]), b.partial_fit(X[120:])
    np.testing.assert_array_equal(a.components_, b.components_)


def test_a_batch_iterable_takes_its_later_batches_as_partial_fit_does():
    X = _rows()
    ragged = [list(r) for r in X[120:126]]
    ragged[1] = ragged[1][:2]
    mapped = X[120:126].copy()
    mapped[1] = 0.0
    with _strict():
        a = _stp().fit(iter([X[:120], ragged, X[:10].astype(complex), X[126:]]))
    b = _stp().fit(iter([X[:120], mapped, np.zeros((10, D)), X[126:]]))
    np.testing.assert_array_equal(a.components_, b.components_)


@STREAMS
def test_a_first_chunk_of_that_kind_is_still_refused_before_the_spend(make):
    from dptensor import PrivacyAccountant

    X = _rows()[:10]
    ragged = [list(r) for r in X]
    ragged[1] = ragged[1][:3]
    for first in (X.astype(complex), ragged, np.zeros((3, D), dtype="datetime64[s]")):
        acc = PrivacyAccountant(10.0)
        with pytest.raises((ValueError, TypeError)):
            make().set_params(accountant=acc).partial_fit(first)
        assert not acc.history()


@STREAMS
def test_a_later_chunk_is_read_by_position_whatever_its_column_names(make):
    """scikit-learn's check of the names ran on later chunks, after the spend: a frame after an
    array (or an array after a frame) warned, other names raised. The first chunk fixes
    ``feature_names_in_``; a later one is read by position, under a warning filter of "error"
    and in a plain run alike."""
    X = _rows()
    named = list("abcd")
    frame = pd.DataFrame(X[120:150], columns=named)
    for first, later in ((X[:120], frame), (pd.DataFrame(X[:120], columns=named), X[120:150]),
                         (pd.DataFrame(X[:120], columns=named), frame[list("dcba")]),
                         (pd.DataFrame(X[:120], columns=named), frame.set_axis(list("wxyz"),
                                                                              axis=1))):
        for strict in (True, False):
            a, b = make().partial_fit(first), make().partial_fit(X[:120])
            with _strict() if strict else warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("error" if strict else "always")
                a.partial_fit(later)
            assert strict or not seen
            b.partial_fit(np.asarray(later))  # the same values, in the same places
            a.partial_fit(X[150:]), b.partial_fit(X[150:])
            np.testing.assert_array_equal(a.components_, b.components_)
            assert list(getattr(a, "feature_names_in_", [])) == list(
                getattr(first, "columns", []))


@STREAMS
def test_a_later_frame_with_repeated_or_odd_column_labels_is_read_by_position(make):
    """A later chunk's column labels are never read: a frame with a label twice (narwhals,
    inside scikit-learn's check_array, raised DuplicateError after the spend), with labels of
    mixed types or a MultiIndex is fed as the array of its values."""
    X = _rows()[:30]
    for columns in (["a", "a", "b", "b"], ["a", 1, 2.5, None],
                    pd.MultiIndex.from_tuples([("a", 1), ("a", 1), ("b", 2), ("c", 3)])):
        _same_as(make, pd.DataFrame(X, columns=columns), X)
    frame = pd.DataFrame(X.astype(object), columns=["a", "a", "b", "b"])
    frame.iloc[2, 1] = "n/a"  # a frame of objects: its numbers first, by position too
    mapped = X.copy()
    mapped[2] = 0.0
    _same_as(make, frame, mapped)
