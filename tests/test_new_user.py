"""What a new user reaches for first, and the answer it gets: a clear refusal saying what to do,
before any spend."""
import os

import pytest

from dptensor import PrivacyAccountant
from dptensor.accounting import LedgerError


@pytest.mark.parametrize("name", [":memory:", ""])
def test_a_ledger_name_that_is_no_file_is_refused(tmp_path, monkeypatch, name):
    # SQLite's ":memory:" was taken as a file name: a file ':memory:' in the working directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="ledger=None"):
        PrivacyAccountant(1.0, 1e-5, ledger=name)
    assert os.listdir(tmp_path) == []
