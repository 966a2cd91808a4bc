"""Privacy accounting: events, composition, calibration and the shared accountant."""
from .accountant import (DEFAULT_DELTA, BudgetExceededError, LedgerNotSharedError,
                         PrivacyAccountant, PrivacyAccountingError)
from .calibration import (calibrate, calibrate_gaussian, paper_noisy_power_sigma,
                          paper_tensor_power_noise)
from .composition import (epsilon_of, gdp_delta, gdp_epsilon, gdp_mu, rdp_curve, rdp_delta,
                          rdp_epsilon, selection_rdp)
from .events import (AboveThresholdEvent, ComposedEvent, GaussianEvent, LaplaceEvent,
                     NonPrivateEvent, PrivacyEvent, PrivateSelectionEvent)
from .ledger import LedgerEntry, LedgerError

__all__ = ["PrivacyAccountant", "BudgetExceededError", "LedgerNotSharedError",
           "PrivacyAccountingError", "LedgerError", "LedgerEntry", "DEFAULT_DELTA", "calibrate",
           "calibrate_gaussian", "paper_noisy_power_sigma", "paper_tensor_power_noise",
           "epsilon_of", "gdp_delta", "gdp_epsilon", "gdp_mu", "rdp_curve", "rdp_epsilon",
           "rdp_delta", "selection_rdp", "PrivacyEvent", "GaussianEvent", "LaplaceEvent",
           "AboveThresholdEvent", "NonPrivateEvent", "ComposedEvent", "PrivateSelectionEvent"]
