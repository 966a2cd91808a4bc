"""The accountant's refusals (defined in :mod:`dptensor.exceptions`, the leaf every module shares)."""
from __future__ import annotations

from ..exceptions import LedgerError, PrivacyAccountingError

__all__ = ["PrivacyAccountingError", "LedgerError"]
