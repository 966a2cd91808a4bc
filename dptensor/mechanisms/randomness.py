"""Where noise comes from: one fresh stream per spend, built for the fit and never stored.

Two spends must never draw the same or correlated noise, whatever ``random_state`` is. A seed
alone cannot promise that: ``sklearn.base.clone`` deep-copies a Generator, so every candidate of a
search would start from one state, and one int seed across a grid over epsilon makes the noise of
the candidates proportional (their releases then cancel it). So each spend's stream is derived
from two things:

* the *entropy* of ``random_state``: fresh operating-system entropy for ``None`` (the only choice
  fit for a real release), the int itself, or 128 bits drawn from a given Generator/RandomState;
* the *spend key*: the spend's position in its accountant's ledger (unique within a ledger) and a
  fingerprint of the fit's public description (estimator, public parameters, data shape).

``numpy.random.SeedSequence`` hashes the two into independent streams. The same script with the
same seed replays the same spends in the same order, so it reproduces its results; two spends of
one ledger always differ in their position, and two fits with different public parameters always
differ in their fingerprint, so their noise is independent even without an accountant.

Two fits can still start alike: without an accountant the ledger position is the same for
every fit, and ``clone`` deep-copies a ``Generator`` (even one made from fresh entropy), so the
folds of ``cross_validate``, in one process or in joblib's workers, had one stream, and two
folds' releases differed by exactly their data's difference. So a seeded fit (any
``random_state`` but ``None``) also keys its stream by a digest of the data it reads
(:func:`data_digest`): fits on different data draw independent noise, and only a fit on the very
same data, with the same seed, draws the same noise (which is what reproducing means). Keying by
the data gives nothing away: whoever knows the seed regenerates the noise anyway, and whoever
does not cannot reproduce the stream the digest is hashed with. A stream (``partial_fit``)
keys each block's noise by the digest of every row up to that block (:class:`RowDigest`).
``random_state=None`` needs none of it: each fit draws fresh entropy.
"""
from __future__ import annotations

import hashlib
import math
import numbers
import pickle
import secrets

import numpy as np

__all__ = ["seed_entropy", "spend_generator", "fingerprint", "data_digest", "RowDigest", "rekeyed",
           "rekey_words", "keyed_generator",
           "AsDense"]

#: Bits of entropy drawn from the operating system (or from a given generator) per fit.
ENTROPY_BITS = 128


def seed_entropy(random_state) -> int:
    """Validate ``random_state`` and return the entropy it contributes (call before any spend).

    ``None`` draws fresh operating-system entropy; a non-negative int is used as it is; a
    ``Generator`` or ``RandomState`` gives 128 bits drawn from it (advancing it).
    """
    if random_state is None:
        return secrets.randbits(ENTROPY_BITS)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative int, got {random_state!r}")
        return int(random_state)
    if isinstance(random_state, np.random.Generator):
        words = random_state.integers(0, 2**32, size=ENTROPY_BITS // 32, dtype=np.uint64)
    elif isinstance(random_state, np.random.RandomState):
        words = random_state.randint(0, 2**32, size=ENTROPY_BITS // 32, dtype=np.uint64)
    else:
        raise TypeError("random_state must be None, a non-negative int, a RandomState or a "
                        f"Generator, got {random_state!r}")
    return int(sum(int(w) << (32 * i) for i, w in enumerate(words)))


def fingerprint(*parts) -> tuple[int, ...]:
    """Four 32-bit words hashing a public description (names, parameters, shapes) of a spend."""
    digest = hashlib.sha256(_describe(parts).encode()).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))


#: About how many bytes of rows one leaf of a data digest hashes.
LEAF_BYTES = 1 << 23


def _leaf_rows(shape, dtype) -> int:
    """Rows per leaf: public (the row's size only), so NumPy and Dask cut the same leaves."""
    row = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1, LEAF_BYTES // max(1, row))


def _leaf(block) -> bytes:
    """SHA-256 of a block of rows, in C order (a copy of this block only, if not C-ordered)."""
    block = np.ascontiguousarray(block)
    return hashlib.sha256(memoryview(block.reshape(-1)).cast("B")).digest()


class AsDense:
    """A sparse matrix to digest as the dense array it stands for, one densified leaf at a time.

    For an estimator whose fit on sparse rows releases what its fit on the dense rows does (the
    PCA family): the same seed then keys the same noise on either, so the two fits agree. Costs
    one leaf's dense copy (:data:`LEAF_BYTES`) and a pass over ``n d`` entries, as the fit does.
    """

    def __init__(self, X):
        self.X = X.tocsr()
        self.shape, self.dtype = self.X.shape, self.X.dtype

    def blocks(self):
        """The CSR slices of rows that make one dense leaf each."""
        step = _leaf_rows(self.shape, self.dtype)
        for start in range(0, self.shape[0], step):
            yield self.X[start:start + step]


def _has_duplicates(block) -> bool:
    """Whether a CSR block stores some entry more than once (explicit zeros and unsorted
    indices change no value; duplicates do: ``toarray`` sums them in the matrix's dtype, where
    an int8 pair of 100s is -56, a fit in float64, where it is 200)."""
    if block.has_canonical_format:
        return False
    summed = block.copy()
    summed.sum_duplicates()
    return summed.nnz != block.nnz


def _update(digest, array) -> None:
    """Hash an array's dtype, shape and rows: a tree of leaves of ``_leaf_rows`` rows, so a Dask
    array (its leaves hashed where its chunks live) digests as the same NumPy array does."""
    if isinstance(array, AsDense):  # the bytes the dense array would give, leaf by leaf
        digest.update(str((array.dtype.str, array.shape)).encode())
        for block in array.blocks():
            if _has_duplicates(block):  # no dense array's key: the fit may sum them otherwise
                digest.update(b"duplicates")
                _update(digest, block)
            else:
                digest.update(_leaf(block.toarray()))  # C order, as a dense leaf
        return
    if hasattr(array, "tocsr") and hasattr(array, "nnz"):  # a SciPy sparse matrix or array
        csr = array.tocsr()
        digest.update(f"sparse{csr.shape}".encode())
        for part in (csr.data, csr.indices, csr.indptr):
            _update(digest, part)
        return
    dask = hasattr(array, "dask") and hasattr(array, "to_delayed")
    array = array if dask else np.asarray(array)
    digest.update(str((array.dtype.str, array.shape)).encode())
    if array.dtype.hasobject:  # numbers held as objects (a pipeline's input): their pickle
        digest.update(pickle.dumps(array.tolist(), protocol=4))
    elif array.ndim == 0:
        digest.update(_leaf(array))
    elif dask:
        for part in _dask_leaves(array):
            digest.update(part)
    else:
        step = _leaf_rows(array.shape, array.dtype)
        for start in range(0, array.shape[0], step):
            digest.update(_leaf(array[start:start + step]))


def _dask_leaves(array):
    # A Dask array's name is no digest of its content (a name given by hand, a file rewritten
    # under the same path keep it): its leaves are hashed on the workers, 32 bytes each come back.
    import dask

    step = _leaf_rows(array.shape, array.dtype)
    leaves = array.rechunk({0: step, **{axis: -1 for axis in range(1, array.ndim)}})
    return dask.compute(*[dask.delayed(_leaf)(b) for b in leaves.to_delayed().ravel()])


def digest_bytes(*arrays) -> int:
    """An upper bound of what :func:`data_digest` of ``arrays`` allocates (from shapes, types)."""
    total = 0
    for array in arrays:
        if array is None or (hasattr(array, "dask") and hasattr(array, "to_delayed")):
            continue  # a Dask array's leaves are hashed on the workers
        if isinstance(array, AsDense):  # one densified leaf, its CSR slice and a summed copy
            rows, d = _leaf_rows(array.shape, array.dtype), int(array.shape[1])
            total += rows * d * array.dtype.itemsize + 2 * rows * d * (array.dtype.itemsize + 8)
            continue
        if hasattr(array, "tocsr") and hasattr(array, "nnz"):
            total += 2 * (array.nnz * (array.dtype.itemsize + 8) + 8 * (array.shape[0] + 1))
            continue
        array = np.asarray(array)
        if array.dtype.hasobject:  # its numbers as Python objects, and their pickle
            total += 64 * array.size
        elif array.ndim and not array.flags.c_contiguous:  # one leaf copied to C order
            rows = _leaf_rows(array.shape, array.dtype)
            total += min(array.nbytes, rows * array[:1].nbytes)
    return total


def data_digest(*arrays) -> tuple[int, ...]:
    """Eight 32-bit words hashing the data a fit reads (its arrays' dtypes, shapes and bytes).

    Part of a seeded spend's key, so that fits with one seed on different data never share noise.
    A Dask array is read once where it lives and digests as the same NumPy array; an array that
    is not C-ordered is hashed a block of rows at a time, never copied whole. ``None`` entries
    are skipped.
    """
    digest = hashlib.sha256()
    for array in arrays:
        if array is not None:
            _update(digest, array)
    raw = digest.digest()
    return tuple(int.from_bytes(raw[i:i + 4], "little") for i in range(0, 32, 4))


class RowDigest:
    """A running digest of the rows a stream has read, in order, however they were chunked.

    ``update(rows)`` hashes the rows, cast to the stream's ``dtype`` (the one it computes in, named
    in the digest), as they are consumed, so the digest after a block is the same whatever the
    chunks were. Working state of an open stream: never pickled.
    """

    def __init__(self, dtype, n_features: int):
        self.dtype = np.dtype(dtype)
        self._hash = hashlib.sha256(str((self.dtype.str, int(n_features))).encode())

    def update(self, rows) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        self._hash.update(memoryview(rows.reshape(-1)).cast("B"))

    def mark(self, count: int) -> None:
        """Hash a block boundary: ``count`` rows end here. Needed where blocks have no fixed
        length (blocks of whole groups): rows ``a b | c`` and ``a | b c`` hash alike otherwise,
        and two fits' last blocks would share noise on different statistics."""
        self._hash.update(b"|%d|" % int(count))

    def words(self) -> tuple[int, ...]:
        raw = self._hash.copy().digest()
        return tuple(int.from_bytes(raw[i:i + 4], "little") for i in range(0, 32, 4))


def rekeyed(rng: np.random.Generator, key: tuple[int, ...]) -> np.random.Generator:
    """A generator from 128 bits of ``rng`` hashed with ``key`` (say a :class:`RowDigest`'s words).

    ``rng`` advances by exactly two words, whatever the key.
    """
    return keyed_generator(rekey_words(rng), key)


def rekey_words(rng: np.random.Generator) -> tuple[int, int]:
    """The two words of ``rng`` that :func:`rekeyed` takes: drawn now, the generator built later
    (:func:`keyed_generator`), so that many can be drawn in order at a tuple's memory each."""
    return tuple(int(w) for w in rng.integers(0, 2**63, size=2, dtype=np.uint64))


def keyed_generator(words, key: tuple[int, ...]) -> np.random.Generator:
    """The generator of :func:`rekeyed` from its two ``words`` and ``key``."""
    seq = np.random.SeedSequence([int(w) for w in words], spawn_key=tuple(key))
    return np.random.Generator(np.random.PCG64(seq))


def spend_generator(entropy: int, *, spend_index: int,
                    key: tuple[int, ...] = ()) -> np.random.Generator:
    """The noise generator of one spend: ``entropy`` hashed with the spend's position and key.

    ``spend_index`` is the spend's position in its ledger, or ``-1`` for a fit without an
    accountant. The generator is a local of the fit: it must never be stored on an estimator.
    """
    seq = np.random.SeedSequence(entropy, spawn_key=(int(spend_index) + 1, *key))
    return np.random.Generator(np.random.PCG64(seq))


def _describe(value, depth: int = 0) -> str:
    """A canonical text for public values, the same in every process (no ids, no addresses)."""
    def inner(v):
        return _describe(v, depth + 1)
    if depth > DESCRIBE_DEPTH:  # a cycle, or an object nested deeper than any parameter
        return type(value).__qualname__
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, numbers.Integral):  # in hex past 1e4000 (decimal's limit: 4300 digits)
        return repr(int(value)) if abs(int(value)) < 10**4000 else hex(int(value))
    if isinstance(value, numbers.Real):
        return "nan" if math.isnan(value) else repr(float(value))
    if isinstance(value, numbers.Complex):
        return f"complex({inner(value.real)},{inner(value.imag)})"
    if isinstance(value, (bytes, bytearray)):
        return f"{type(value).__qualname__}:{bytes(value).hex()}"
    if isinstance(value, np.generic):  # np.bool_, np.datetime64, ...: the value they hold
        return f"{value.dtype}:{inner(value.item())}"
    if isinstance(value, (set, frozenset)):  # sorted: a set's order follows the process's hash
        return type(value).__qualname__ + "{" + ",".join(sorted(inner(v) for v in value)) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(inner(v) for v in value) + ")"
    if isinstance(value, dict):
        items = (f"{inner(k)}:{inner(value[k])}" for k in sorted(value, key=str))
        return "{" + ",".join(items) + "}"
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        # a 0-d array of a number is read as that number (epsilon=np.array(1.0) is epsilon=1.0):
        # keyed as it, it draws the noise the number does
        return inner(value[()])
    if isinstance(value, np.ndarray):
        return f"array{value.shape}" + inner(value.ravel().tolist())
    if isinstance(value, type):
        return value.__qualname__
    if hasattr(value, "get_params"):
        # An estimator inside a search or pipeline is described by its own parameters: searches
        # over differently configured estimators must not share the search's noise.
        # Not by its accountant (a random id, the process's id), verbosity or n_jobs, which
        # change nothing it releases: one seeded search was keyed apart in every process. Its
        # seed is kept: a step's random_state (a random projection's) changes what is fitted.
        return type(value).__qualname__ + inner(
            {k: v for k, v in value.get_params(deep=False).items() if k not in UNDESCRIBED})
    if hasattr(value, "dist") and hasattr(value, "args") and hasattr(value, "kwds"):
        # A frozen scipy distribution (a randomized search's parameter): its law and arguments.
        return f"{type(value).__qualname__}:{getattr(value.dist, 'name', '?')}" + inner(
            (list(value.args), dict(value.kwds)))
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):
        # a function (a step's parameter) by its module and name: by its type alone, every
        # function was 'function', and steps applying different ones shared a seeded noise
        code = getattr(value, "__code__", None)  # a lambda's name is no name: its code too
        body = "" if code is None else hashlib.sha256(code.co_code).hexdigest() + inner(
            [c for c in code.co_consts if c is None or isinstance(c, (bool, str, numbers.Number))])
        # and what a closure captured: two made by one factory differ only there
        body += inner([_cell(c) for c in getattr(value, "__closure__", None) or ()])
        return f"{type(value).__qualname__}:{getattr(value, '__module__', None)}.{name}{body}"
    reduced = _reduced(value)
    if reduced is not None:
        # what a pickle rebuilds it from (a functools.partial's function and arguments, an
        # object's __slots__, a range's bounds): its __dict__ may hold none of it
        return type(value).__qualname__ + inner(reduced)
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        # any other object (say a scipy rv_discrete in a grid) by its attributes: by its class
        # alone, two searches of different such values shared a seeded noise
        return type(value).__qualname__ + inner({k: v for k, v in state.items()
                                                 if not k.startswith("__")})
    return type(value).__qualname__


#: An inner estimator's parameters left out of its description: they change nothing it releases.
UNDESCRIBED = ("accountant", "verbose", "n_jobs")

#: How deep :func:`_describe` follows an object's attributes (cycles end there).
DESCRIBE_DEPTH = 8


def _reduced(value):
    """``value``'s pickle recipe (callable, arguments, state, items), or None if it has none."""
    try:
        recipe = value.__reduce_ex__(4)
    except Exception:  # noqa: BLE001 - a lock, a generator, a module: no public recipe
        return None
    if not isinstance(recipe, tuple):
        return None
    parts = [list(p) if i >= 3 and p is not None else p for i, p in enumerate(recipe)]
    if len(parts) > 2 and isinstance(parts[2], dict):
        parts[2] = {k: v for k, v in parts[2].items() if not str(k).startswith("__")}
    return parts


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None
