"""What a new user reaches for first, and the answer it gets: a clear refusal saying what to do,
before any spend."""
import os
import warnings

import numpy as np
import pytest

from dptensor import (BudgetExceededError, PrivacyAccountant, PrivatePCA,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.accounting import GaussianEvent, LedgerError
from dptensor._validation import validate_stream_chunk


@pytest.mark.parametrize("name", [":memory:", ""])
def test_a_ledger_name_that_is_no_file_is_refused(tmp_path, monkeypatch, name):
    # SQLite's ":memory:" was taken as a file name: a file ':memory:' in the working directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="ledger=None"):
        PrivacyAccountant(1.0, 1e-5, ledger=name)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("method", ["check", "cost", "spend"])
@pytest.mark.parametrize("value", [1.0, "1", None])
def test_the_accountant_asks_for_an_event_not_an_epsilon(method, value):
    # check and cost failed with AttributeError: 'float' object has no attribute 'leaves'
    budget = PrivacyAccountant(2.0, 1e-5)
    with pytest.raises(TypeError, match=rf"{method} takes a PrivacyEvent.*privacy_cost"):
        getattr(budget, method)(value)
    assert budget.history() == []
    event = PrivatePCA(2, epsilon=1.0, data_norm=1.0).privacy_cost(1000, 5).event
    budget.check(event)
    assert budget.cost(event) == pytest.approx(1.0)
    assert budget.cost(GaussianEvent(noise_multiplier=10.0)) > 0


@pytest.mark.parametrize("make", [
    lambda acc: StreamingTensorPower(2, epsilon=1.0, data_norm=1.0, accountant=acc),
    lambda acc: PrivateTensorDecomposition(2, epsilon=1.0, data_norm=1.0, accountant=acc),
    lambda acc: PrivateGaussianMixture(2, epsilon=1.0, data_norm=1.0, accountant=acc),
    lambda acc: PrivateLatentDirichletAllocation(2, epsilon=1.0, accountant=acc),
    lambda acc: PrivatePCA(2, epsilon=1.0, data_norm=1.0, accountant=acc),
])
def test_an_infinity_is_refused_saying_what_to_do(make):
    # the NaN refusal said what to do; the infinity one only quoted scikit-learn's diagnosis
    X = np.random.default_rng(0).poisson(1.0, (500, 6)).astype(float)
    X[7, 3] = np.inf
    budget = PrivacyAccountant(5.0, 1e-5)
    with pytest.raises(ValueError, match="contains infinity.*drop the rows that hold one"):
        make(budget).fit(X)
    assert budget.history() == []


def test_the_offsets_warning_calls_them_offsets():
    # it said "those components are dominated by the privacy noise" of a mode's offsets
    from dptensor import PrivateTensorCompletion
    from dptensor.datasets import make_low_rank_tensor

    study = make_low_rank_tensor((10, 10, 10), rank=2, missing_ratio=0.5, random_state=0)
    model = PrivateTensorCompletion(rank=2, epsilon=0.1, value_range=(0, 1), random_state=0)
    with pytest.warns(UserWarning) as caught:
        model.fit(study["indices"], study["values"])
    offsets = [str(w.message) for w in caught if "offsets_rms_ of mode(s)" in str(w.message)]
    assert offsets and all("those offsets are dominated" in m for m in offsets)


def test_a_budget_too_small_says_what_to_do():
    budget = PrivacyAccountant(0.5, 1e-5)
    X = np.random.default_rng(0).standard_normal((500, 6))
    model = PrivateTensorDecomposition(2, epsilon=1.0, data_norm=1.0, accountant=budget)
    with pytest.raises(BudgetExceededError, match=r"lower the fit's epsilon.*remaining\(\)"):
        model.fit(X)
    assert budget.history() == []


def test_opening_a_directory_suggests_a_file_in_it(tmp_path):
    # it suggested PrivacyAccountant(epsilon, delta, ledger=<the directory>), refused in turn
    with pytest.raises(LedgerError, match=r"\(a directory\).*budget\.sqlite"):
        PrivacyAccountant.open(tmp_path)


@pytest.mark.parametrize("delta", [2.0, -1.0, float("nan"), "1e-5"])
def test_spend_and_cost_refuse_a_delta_outside_zero_one(delta):
    # spend(event, delta=2.0) recorded an entry of epsilon 0 at delta 2; nan failed in SciPy
    budget = PrivacyAccountant(5.0, 1e-5)
    event = GaussianEvent(noise_multiplier=10.0)
    with pytest.raises((TypeError, ValueError), match=r"delta must be"):
        budget.spend(event, delta=delta)
    with pytest.raises((TypeError, ValueError), match=r"delta must be"):
        budget.cost(event, delta=delta)
    assert budget.history() == []


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_tensor_with_a_missing_entry_is_not_told_to_drop_rows(value):
    # a 3-D tensor has no rows to drop: the advice points at completion instead
    from dptensor.datasets import make_orthogonal_tensor

    T = make_orthogonal_tensor(6, 2, random_state=0)[0]
    T[0, 0, 0] = value
    budget = PrivacyAccountant(5.0, 1e-5)
    with pytest.raises(ValueError, match="PrivateTensorCompletion") as refused:
        PrivateTensorDecomposition(2, epsilon=1.0, accountant=budget).fit(T)
    assert "rows" not in str(refused.value) and budget.history() == []


@pytest.mark.parametrize("make", [
    lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0),
    lambda: StreamingTensorPower(2, n_restarts=2, n_iter=2, batch_size=50, epsilon=1.0,
                                 data_norm=1.0, random_state=0)])
def test_a_private_stream_that_starts_on_text_is_refused_before_the_spend(make):
    # every row holding no number becomes a zero row: a first batch of text spent the budget and
    # fitted nothing, silently; its dtype says so before the spend
    budget = PrivacyAccountant(epsilon=5.0)
    text = np.full((400, 4), "n/a")
    with pytest.raises(TypeError, match="X is text"):
        make().set_params(accountant=budget).partial_fit(text)
    with pytest.raises(TypeError, match="X is text"):  # a list: the dtype NumPy gives it
        make().set_params(accountant=budget).partial_fit(text.tolist())
    # objects too (strings held as objects spent the budget and fitted nothing)
    with pytest.raises(TypeError, match="Python objects.*dtype=float"):
        make().set_params(accountant=budget).partial_fit(text.astype(object))
    assert budget.history() == []
    make().set_params(accountant=budget).partial_fit(np.ones((400, 4)).tolist())  # numbers fit
    assert len(budget.history()) == 1


class _ForeignArray:
    """An array of another library (a torch tensor): its dtype is no NumPy dtype, and NumPy
    converts it through ``__array__``, as scikit-learn's checks do."""

    def __init__(self, values):
        self._values = values
        self.shape, self.ndim, self.dtype = values.shape, values.ndim, "foreign.float64"

    def __array__(self, dtype=None, copy=None):
        return self._values if dtype is None else self._values.astype(dtype)


@pytest.mark.parametrize("make", [
    lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0),
    lambda: StreamingTensorPower(2, n_restarts=2, n_iter=2, batch_size=50, epsilon=1.0,
                                 data_norm=1.0, random_state=0)])
def test_a_private_stream_starts_on_an_array_whose_dtype_numpy_does_not_know(make):
    # np.dtype("foreign.float64") raised its raw TypeError ("data type not understood") in the
    # stream's text check, where fit takes the array through NumPy's conversion
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    budget = PrivacyAccountant(epsilon=5.0)
    make().set_params(accountant=budget).partial_fit(_ForeignArray(X))
    assert len(budget.history()) == 1
    with pytest.raises(TypeError, match="X is text"):  # its text, by the dtype NumPy gives it
        make().set_params(accountant=budget).partial_fit(_ForeignArray(np.full((400, 4), "a")))
    assert len(budget.history()) == 1


@pytest.mark.parametrize("make", [
    lambda: PrivatePCA(2, epsilon=1.0, data_norm=1.0, random_state=0),
    lambda: StreamingTensorPower(2, n_restarts=2, n_iter=2, batch_size=50, epsilon=1.0,
                                 data_norm=1.0, random_state=0)])
def test_a_private_streams_data_frames_map_cells_that_hold_no_number_as_arrays_do(make):
    # a later frame with one text cell (an object column) or one pd.NA raised after the spend,
    # on that cell, where an array maps its row to a zero row; a first frame with a column of
    # objects spent and fitted nothing, where an array of objects is refused before the spend
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    frame = pd.DataFrame(X, columns=list("abcd"))
    budget = PrivacyAccountant(epsilon=5.0)
    with pytest.raises(TypeError, match="Python objects"):
        make().set_params(accountant=budget).partial_fit(frame.astype({"b": object}))
    dated = frame.assign(b=pd.Timestamp("2020-01-01"))  # no number: every row a zero row
    with pytest.raises(TypeError, match="dates"):
        make().set_params(accountant=budget).partial_fit(dated)
    assert budget.history() == []
    numbers = frame.astype({"a": "Float64"}).assign(  # pandas' own numbers
        b=pd.array(np.zeros(400, dtype=int), dtype="Int64"), c=False)
    make().set_params(accountant=PrivacyAccountant(epsilon=5.0)).partial_fit(numbers)
    text, missing = frame.astype({"b": object}), frame.astype("Float64")
    text.iloc[203, 1], missing.iloc[305, 2] = "n/a", pd.NA
    zeroed = frame.copy()
    zeroed.iloc[[203, 305]] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no feature-name warning either: the labels are kept
        a = make().set_params(accountant=budget).partial_fit(frame.iloc[:200])
        a.partial_fit(pd.concat([text.iloc[200:300], missing.iloc[300:]]))
    assert len(budget.history()) == 1  # the later frame fitted, no error after the spend
    mapped = validate_stream_chunk(a, pd.concat([text.iloc[200:300], missing.iloc[300:]]),
                                   reset=False, dtype=np.float64)
    np.testing.assert_array_equal(np.asarray(mapped), zeroed.iloc[200:].to_numpy())
