"""The accountant's refusals (defined in :mod:`dptensor.exceptions`, a leaf all modules share)."""
from __future__ import annotations

from ..exceptions import LedgerError, PrivacyAccountingError

__all__ = ["PrivacyAccountingError", "LedgerError"]
