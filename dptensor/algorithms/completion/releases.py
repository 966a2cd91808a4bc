"""How completion releases its sums over entries: only the rows that hold an entry, with the
floating-point rounding their public counts bound."""
from __future__ import annotations

import numpy as np

from ...mechanisms import Rounding


def release_rows(values, seen, release):
    """The rows of ``values`` that hold an entry (``seen``, a function of Omega: public) released by
    ``release`` (a mechanism on those rows together). The other rows are sums over no entry, 0
    whatever the data: they are no part of the query and are returned as they are."""
    out = np.array(values, dtype=np.float64, copy=True)
    out[seen] = release(out[seen])
    return out


def entry_rounding(n_obs, bound, longest, later=0) -> Rounding:
    """The floating-point rounding (:class:`~dptensor.mechanisms.Rounding`) of a release of sums
    over observed entries: every entry adds terms of norm at most ``bound`` (in the release's norm)
    to it, ``n_obs`` entries at most ``n_obs bound`` together; a coordinate sums at most ``longest``
    of them (a value times its public design is one summand, as in a dot product), and ``later``
    multiplications by public values follow partial sums. All of it public: Omega, its counts and
    public bounds (``docs/derivations/completion.rst``, "Rounding")."""
    return Rounding(total=float(n_obs) * float(bound), terms=int(longest) + int(later))
