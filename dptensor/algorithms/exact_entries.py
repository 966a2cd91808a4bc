r"""Exact products of a matrix whose unit is an *entry*: the entry-level power method's queries.

Under the entry unit (neighbouring symmetric matrices differ in one pair of entries by at most
``B``) the other entries are arbitrary: a float product ``A X`` is off by up to ``gamma_d sum_k
|A_ik| |X_kj|``, which no public bound limits, so no rounding allowance can be added
(``docs/derivations/exact_sums.rst``). Here the product is exact instead:

* each entry is put on the public grid ``g``, the power of two in ``(B 2**-(b+1), B 2**-b]``:
  ``A_q = rint(A / g)`` (an exact power-of-two scaling and an exact rounding, reading one entry
  alone), so neighbours' grid entries differ by at most ``B / g + 1`` and the released
  statistic ``g A_q X_q`` moves as the entry-level sensitivity at ``B + g`` says;
* the iterate is put on the grid of :func:`~dptensor.algorithms.exact.grid_vectors`:
  ``X_q = K 2**-b`` with integers ``|K| <= 2**b``;
* ``A_q K`` is summed exactly: ``A_q`` is cut into signed base-``2**26`` digits (exact float
  operations on integers), each digit's product with ``K`` runs in float64 over blocks of 64 inner
  indices (every partial sum an integer below ``2**52``), is added in int64, and the digits are
  joined in Python integers: exact at any size of the entries, in any order.

Derivation and checks: ``docs/derivations/exact_sums.rst``, "Entry-level products".
"""
from __future__ import annotations

import math

import numpy as np

from .exact import BITS, Exact, grid_vectors

__all__ = ["ExactEntryMatrix", "ExactEntryTensor", "entry_grid_step", "DIGITS"]

_DIGIT = 2.0 ** 26  # a digit times a grid iterate entry (<= 2**20) is below 2**46
_BLOCK = 64  # inner indices per float64 product: 64 * 2**46 = 2**52, every partial sum exact
#: Grid entries are clipped to ``|A_q| <= 2**77`` (``2**57`` entry bounds): three digits at most, so
#: the exact operator's memory is public (:data:`DIGITS` copies of the entries).
_CAP = 2.0 ** 77
DIGITS = 3


def entry_grid_step(bound: float) -> float:
    """The public grid of the entries: the power of two in ``(bound 2**-(b+1), bound 2**-b]``."""
    _, exponent = math.frexp(float(bound))  # bound = m 2**e, m in [0.5, 1)
    return math.ldexp(1.0, exponent - 1 - BITS)


class ExactEntryMatrix:
    """A symmetric d x d matrix on its entry grid, whose products with a public block are exact.

    ``matmat(V)`` returns the :class:`~dptensor.algorithms.exact.Exact` ``g A_q X_q`` for the
    grid iterate ``X_q`` of ``V``; :meth:`grid_iterate` gives that ``X_q``, from which the
    sensitivity is computed (at the entry bound ``B + g``, :attr:`bound`).
    """

    def __init__(self, A, bound: float):
        A = np.asarray(A, dtype=np.float64)
        self.shape = A.shape
        self.step = entry_grid_step(bound)
        #: the bound on a neighbour's change of one grid entry, in the matrix's units
        self.bound = float(bound) + self.step
        with np.errstate(over="ignore"):  # a power of two: exact, as rint is
            grid = np.rint(A / self.step)
        # Beyond 2**77 grid steps (and an overflow to infinity) an entry is clipped there: a
        # public per-entry map that never widens a change, and nothing after the spend fails.
        self._digits = _signed_digits(np.clip(grid, -_CAP, _CAP))

    def grid_iterate(self, V) -> np.ndarray:
        """``X_q``: the public block on the grid the products are exact on."""
        return grid_vectors(V) * 2.0 ** -BITS

    def matmat(self, V) -> Exact:
        ints = _digits_product(self._digits, grid_vectors(V))
        return Exact(ints, self.step * 2.0 ** -BITS)


class ExactEntryTensor:
    """A symmetric d x d x d tensor on its entry grid, with exact power queries.

    ``apply_evaluate(U)`` returns the :class:`~dptensor.algorithms.exact.Exact` statistics
    ``g T_q(I, u_q, u_q)`` and ``g T_q(u_q, u_q, u_q)`` for the grid columns ``u_q`` of ``U``:
    ``T_q`` contracted with ``K`` twice, each contraction an exact product of integers.
    """

    def __init__(self, T, bound: float):
        T = np.asarray(T, dtype=np.float64)
        self.shape, d = T.shape, T.shape[0]
        self.matrix = ExactEntryMatrix(T.reshape(d * d, d), bound)
        self.step, self.bound = self.matrix.step, self.matrix.bound

    def grid_iterate(self, U) -> np.ndarray:
        return self.matrix.grid_iterate(U)

    def apply_evaluate(self, U):
        K = grid_vectors(U)
        d, L = self.shape[0], K.shape[1]
        first = _digits_product(self.matrix._digits, K)  # (d d, L): sum_c T[a, b, c] K[c, l]
        out = np.empty((d, L), dtype=object)
        for col in range(L):
            W = first[:, col].reshape(d, d)
            out[:, col] = _digits_product(_int_digits(W), K[:, col:col + 1])[:, 0]
        scalar = np.array([sum(int(a) * int(b) for a, b in zip(out[:, col], K[:, col]))
                           for col in range(L)], dtype=object)
        unit = self.step * 4.0 ** -BITS
        return Exact(out, unit), Exact(scalar, unit * 2.0 ** -BITS)

    def apply(self, U):
        return self.apply_evaluate(U)[0]

    def evaluate(self, U):
        return self.apply_evaluate(U)[1]


def _digits_product(digits, K) -> np.ndarray:
    """``sum_t (D_t K) 2**(26 t)`` in Python integers, each ``D_t K`` exact in float64 blocks."""
    total = 0
    for t, digit in enumerate(digits):
        part = np.zeros((digit.shape[0], K.shape[1]), dtype=np.int64)
        for start in range(0, K.shape[0], _BLOCK):
            block = digit[:, start:start + _BLOCK] @ K[start:start + _BLOCK]
            part += block.astype(np.int64)  # exact integers below 2**52 each
        total = total + part.astype(object) * (1 << (26 * t))
    return np.asarray(total, dtype=object)


def _int_digits(W) -> list:
    """Signed base-``2**26`` digits (float64 arrays) of an array of Python integers."""
    digits, rest = [], np.asarray(W, dtype=object)
    while True:
        small = np.vectorize(lambda v: -(1 << 26) < v < (1 << 26), otypes=[bool])(rest)
        if small.all():
            digits.append(rest.astype(np.float64))  # exact: below 2**26
            return digits
        low = rest % (1 << 26)  # Python integers: exact, in [0, 2**26)
        digits.append(low.astype(np.float64))
        rest = (rest - low) // (1 << 26)


def _signed_digits(grid) -> list:
    """``grid = sum_t D_t 2**(26 t)`` with ``0 <= D_t < 2**26`` except the last, ``|D| < 2**26``:
    floors and differences of integer-valued doubles, all exact."""
    digits, rest = [], grid
    while not np.all(np.abs(rest) < _DIGIT):
        high = np.floor(rest / _DIGIT)  # a power of two: exact
        digits.append(rest - high * _DIGIT)  # in [0, 2**26): an exact difference of integers
        rest = high
    digits.append(rest)  # the last digit keeps its sign
    return digits
