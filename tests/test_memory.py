"""Memory: every fit bounds its peak allocation from public quantities and is refused before its
spend when it does not fit; the bounds hold against measured peaks without being loose."""
import json
import math
import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings

import numpy as np
import pytest

import dptensor._base as base
from dptensor import (AdaptivePrivatePCA, PrivatePCA, PrivateTensorCompletion,
                      PrivateTensorDecomposition, StreamingTensorPower)
from dptensor._memory import HEADROOM, MemoryRefusedError, available_bytes, check_fits
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
from dptensor.model_selection import PrivateGridSearchCV
from expected_warnings import completion_noise, noise_dominated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The child's prelude: ``limit(room)`` caps the address space at the current virtual size plus
#: ``room`` bytes, so that only what the fit allocates counts against it.
_PRELUDE = """
import json, resource, warnings
import numpy as np
warnings.simplefilter("ignore")

def limit(room):
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + room, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


def _child(code, timeout=240):
    """Run ``code`` in a fresh interpreter (its limits stay there); return its last line as JSON."""
    out = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")


def test_check_fits_refuses_with_the_estimate_the_limit_and_the_advice():
    room = available_bytes()
    assert room is None or room > 0
    check_fits(0, "nothing", "no advice")
    refusal = r"at its peak.*nothing was recorded\. Lower rank"
    with pytest.raises(MemoryRefusedError, match=refusal) as err:
        check_fits(1 << 62, "PrivateX.fit", "Lower rank")
    assert isinstance(err.value, MemoryError) and err.value.estimate == 1 << 62
    assert err.value.advice == "Lower rank"


@needs_proc
def test_every_fit_that_would_not_fit_is_refused_before_its_spend(tmp_path):
    # Small inputs whose fits would allocate far more than the room left (256 MiB): refused,
    # each with no spend in its accountant's SQLite ledger; the ledger file is unchanged.
    result = _child(f"""
        import os
        from dptensor import (AdaptivePrivatePCA, PrivacyAccountant, PrivatePCA,
                              PrivateTensorCompletion, PrivateTensorDecomposition,
                              StreamingTensorPower)
        from dptensor._memory import MemoryRefusedError
        from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation
        from dptensor.model_selection import PrivateGridSearchCV
        rng = np.random.default_rng(0)
        wide = rng.standard_normal((6, 6000)) / 100
        tall = rng.standard_normal((40000, 1000)) / 100  # 320 MB: its clipped copy does not fit
        rows = rng.standard_normal((6, 400)) / 100
        counts = rng.poisson(1.0, (6, 3000)).astype(float)
        positions = np.stack([np.arange(30000) % 7, np.arange(30000) % 20000], 1)
        cases = {{
            "pca": (lambda a: PrivatePCA(2, epsilon=1, data_norm=1, method="analyze_gauss",
                                         accountant=a), (wide,)),
            "adaptive": (lambda a: AdaptivePrivatePCA(2, epsilon=1, data_norm=1, accountant=a),
                         (tall,)),
            "decomposition": (lambda a: PrivateTensorDecomposition(
                2, epsilon=1, data_norm=1, moment="dense", accountant=a), (rows,)),
            "streaming": (lambda a: StreamingTensorPower(1, epsilon=1, data_norm=1, batch_size=1,
                                                         n_iter=1, n_restarts=200, accountant=a),
                          (rng.standard_normal((2, 200000)) / 1000,)),
            # DP-ALS named: auto fits this sparse matrix by gradient descent, which has no Gram
            "completion": (lambda a: PrivateTensorCompletion(epsilon=1, value_range=(-1, 1),
                                                             perturbation="statistics",
                                                             accountant=a),
                           (positions, rng.uniform(-1, 1, 30000))),
            "gmm": (lambda a: PrivateGaussianMixture(2, epsilon=1, data_norm=1, whitening="dense",
                                                     accountant=a), (wide[:, :3000],)),
            "lda": (lambda a: PrivateLatentDirichletAllocation(2, epsilon=1, whitening="dense",
                                                               accountant=a), (counts,)),
            "search": (lambda a: PrivateGridSearchCV(
                PrivatePCA(2, data_norm=1, method="analyze_gauss"), {{"n_components": [1, 2]}},
                epsilon=5, validation_fraction=0.5, accountant=a), (np.vstack([wide] * 30),)),
        }}
        out = {{}}
        limit(256 << 20)
        for name, (make, data) in cases.items():
            path = os.path.join({str(tmp_path)!r}, name + ".db")
            acc = PrivacyAccountant(10.0, ledger=path)
            before = open(path, "rb").read()
            try:
                make(acc).fit(*data)
                out[name] = "fitted"
            except MemoryRefusedError as e:
                out[name] = [str(e), acc.spent()[0], len(acc.history()),
                             open(path, "rb").read() == before]
            except MemoryError as e:
                out[name] = "MemoryError after the spend: " + str(acc.spent())
        print(json.dumps(out))
    """)
    advice = {"pca": "method='power'", "adaptive": "fewer rows", "streaming": "smaller chunks",
              "decomposition": "moment='implicit'", "completion": "factor_modes",
              "gmm": "whitening='power'", "lda": "whitening='power'",
              "search": "candidate {'n_components'"}
    for name, outcome in result.items():
        assert isinstance(outcome, list), (name, outcome)
        message, spent, entries, unchanged = outcome
        assert advice[name] in message and "GiB" in message, (name, message)
        assert (spent, entries, unchanged) == (0.0, 0, True), name


@needs_proc
def test_a_ten_mode_completion_fits_quickly_within_a_modest_limit():
    # What scikit-learn's checks feed a regressor: 200 entries of a 10-mode index space. The
    # spectral start's Kronecker designs would have rank^9 columns (and W as many per row).
    result = _child("""
        from dptensor import PrivacyAccountant, PrivateTensorCompletion
        rng = np.random.RandomState(0)
        X, y = rng.randint(0, 5, size=(200, 10)), rng.uniform(-1, 1, 200)
        acc = PrivacyAccountant(10.0)
        limit(256 << 20)
        model = PrivateTensorCompletion(epsilon=1.0, value_range=(-1, 1), accountant=acc,
                                        random_state=0).fit(X, y)
        pred = model.predict(X)
        print(json.dumps([bool(np.all(np.isfinite(pred))), acc.spent()[0]]))
    """)
    assert result[0] and result[1] == pytest.approx(1.0)


def _peak_after_check(est, *data):
    """``(estimate, measured)``: the fit's estimate and the peak of what it allocated after the
    memory check (tracemalloc sees NumPy's allocations)."""
    seen = {}
    check = base.check_fits

    def spy(nbytes, what, advice):
        if "estimate" not in seen:
            seen["estimate"] = nbytes
            seen["start"] = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        check(nbytes, what, advice)
    base.check_fits = spy
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(*data)
        peak = tracemalloc.get_traced_memory()[1] - seen["start"]
    finally:
        tracemalloc.stop()
        base.check_fits = check
    return seen["estimate"], peak


def _unit_rows(n, d, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _positions(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, s, n) for s in shape], 1), rng.uniform(-1, 1, n)


def _distinct_positions(shape, share, seed=0):
    """A share of the cells of ``shape``, each once (the grid holds one value a cell)."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(math.prod(shape), int(share * math.prod(shape)), replace=False)
    return np.stack(np.unravel_index(flat, shape), 1), rng.uniform(-1, 1, len(flat))


def _tasteful_positions(users, items, per_user, seed=0):
    """Each user rates ``per_user`` items drawn towards her taste, with values from it: positions
    that carry the interaction, which the implicit mode learns (and its filter runs on)."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    affinity = U @ V.T
    rows = []
    for u in range(users):
        p = np.exp(affinity[u])
        rows.append(rng.choice(items, per_user, replace=False, p=p / p.sum()))
    X = np.stack([np.repeat(np.arange(users), per_user), np.concatenate(rows)], 1)
    return X, np.clip(0.4 * affinity[X[:, 0], X[:, 1]], -1, 1)


_COMPLETION = dict(epsilon=1, value_range=(-1, 1), random_state=0)
_CASES = {
    "pca": lambda: (PrivatePCA(3, epsilon=1, data_norm=1, random_state=0), _unit_rows(8000, 100)),
    "pca-power": lambda: (PrivatePCA(3, epsilon=1, data_norm=1, method="power", random_state=0),
                          _unit_rows(8000, 100)),
    "pca-wide": lambda: (PrivatePCA(3, epsilon=1, data_norm=1, method="analyze_gauss",
                                    random_state=0), _unit_rows(200, 800)),
    "pca-clipped": lambda: (PrivatePCA(3, epsilon=1, data_norm=1, method="clipped_power",
                                       random_state=0), _unit_rows(3000, 400)),
    "adaptive": lambda: (AdaptivePrivatePCA(2, epsilon=1, data_norm=1, random_state=0),
                         _unit_rows(8000, 100)),
    "decomposition": lambda: (PrivateTensorDecomposition(2, epsilon=1, data_norm=1, moment="dense",
                                                         random_state=0), _unit_rows(5000, 30)),
    "decomposition-implicit": lambda: (PrivateTensorDecomposition(
        2, epsilon=1, data_norm=1, moment="implicit", random_state=0), _unit_rows(20000, 30)),
    "streaming": lambda: (StreamingTensorPower(2, epsilon=1, data_norm=1, batch_size=1000, n_iter=3,
                                               n_restarts=3, random_state=0),
                          _unit_rows(6000, 100)),
    "gmm": lambda: (PrivateGaussianMixture(3, epsilon=1, data_norm=10, random_state=0),
                    np.random.default_rng(0).standard_normal((20000, 50))),
    "lda": lambda: (PrivateLatentDirichletAllocation(3, epsilon=1, random_state=0),
                    np.random.default_rng(0).poisson(0.3, (4000, 300)).astype(float)),
    "completion": lambda: (PrivateTensorCompletion(**_COMPLETION),
                           *_positions((60, 60, 60), 40000)),
    "completion-gradient": lambda: (PrivateTensorCompletion(perturbation="gradient", **_COMPLETION),
                                    *_positions((60, 60, 60), 40000)),
    "completion-nonprivate-modes": lambda: (PrivateTensorCompletion(random_state=0),  # chooses
                                            *_positions((60, 60, 60), 40000)),
    "completion-tucker": lambda: (PrivateTensorCompletion(decomposition="tucker", n_iter=3,
                                                          random_state=0),
                                  *_positions((30,) * 4, 30000)),
    # one long mode on the grid: the order-3 sweeps' per-row sums (n_m x F x F each, F = 25 at
    # rank 5) outgrew the grid the estimate prices, after the spend (CP 3x, Tucker 1.5x)
    "completion-cp-long-mode": lambda: (PrivateTensorCompletion(
        rank=5, perturbation="input", n_iter=3, **_COMPLETION),
        *_distinct_positions((2, 2, 20000), 0.6)),
    "completion-tucker-long-mode": lambda: (PrivateTensorCompletion(
        rank=5, decomposition="tucker", perturbation="input", n_iter=3, **_COMPLETION),
        *_distinct_positions((2, 2, 20000), 0.6)),
    # positions that follow the taste, at a budget where the filter runs (its Lanczos basis is
    # the peak after the check; on random positions the filter is 0 and allocates nothing)
    "completion-implicit": lambda: (PrivateTensorCompletion(
        perturbation="implicit", factor_modes=(0, 1), epsilon=10, value_range=(-1, 1),
        random_state=0), *_tasteful_positions(300, 200, 100)),
    "search": lambda: (PrivateGridSearchCV(PrivatePCA(2, data_norm=1.0), {"n_components": [1, 2]},
                                           epsilon=5.0, random_state=0), _unit_rows(8000, 100)),
}


def _load_compiled_kernels():
    """Load (or compile) every numba kernel first: numba's own allocations on a kernel's first
    use in a process (tens of MB) are once per process, not the fit's, which the estimate bounds."""
    from dptensor.algorithms import grid_kernel, operators, pair_moment, pair_products
    from dptensor.mechanisms import samplers
    pair_products.compiled_kernel(), pair_moment.compiled_kernel(), samplers.compiled_kernel()
    grid_kernel.compiled_grid_map()
    operators._khatri_rao(np.ones((1, 1)), np.empty((1, 1)))


@pytest.mark.parametrize("name", sorted(_CASES))
def test_the_estimate_bounds_the_measured_peak_and_is_not_loose(name):
    _load_compiled_kernels()
    est, *data = _CASES[name]()
    estimate, measured = _peak_after_check(est, *data)
    assert measured <= estimate <= 6 * measured + (1 << 20), (estimate, measured)


def test_a_refused_fit_names_what_to_change_and_leaves_the_accountant_unspent(monkeypatch):
    # Without touching the process's limits: the room is said to be small.
    from dptensor import PrivacyAccountant
    monkeypatch.setattr("dptensor._memory.available_bytes", lambda: HEADROOM + (1 << 20))
    acc = PrivacyAccountant(5.0)
    with pytest.raises(MemoryRefusedError, match="decomposition='cp'"):
        PrivateTensorCompletion(rank=12, decomposition="tucker", epsilon=1.0, value_range=(0, 1),
                                accountant=acc).fit(*_positions((8,) * 4, 500))
    assert acc.spent() == (0.0, 0.0) and acc.history() == []


def test_many_modes_take_the_per_mode_start_chosen_from_public_quantities():
    from dptensor.algorithms.completion.memory import fit_floats
    from dptensor.algorithms.completion.spectral import kronecker_start, spectral_floats
    # scikit-learn's checks: 200 entries of a 10-mode space. The Kronecker designs would have
    # 3^9 columns; the per-mode ones have 3, and the whole fit a few hundred kilobytes.
    assert not kronecker_start(200, (5,) * 10, 3, 0)
    assert spectral_floats(200, (5,) * 10, 3, 0, kron=True) * 8 > 100 * 2**30
    assert fit_floats(200, (5,) * 10, 3, tucker=False, mode="statistics") * 8 < 2**20
    # the completion study's sizes keep the Kronecker start
    assert kronecker_start(10**5, (100,) * 3, 3, 0) and kronecker_start(5 * 10**4, (30,) * 4, 3, 0)


@noise_dominated("start_eigenvalues_")  # 500 values in a 200^10 tensor: a start of noise
@completion_noise  # a tiny tensor: its weaker components and offsets are noise
def test_a_completion_whose_unfolding_columns_outnumber_int64_fits(rng):
    # 200^9 columns in every unfolding: numbering them as one int64 failed after the spend
    from dptensor import PrivacyAccountant
    acc = PrivacyAccountant(5.0)
    X, y = rng.integers(0, 200, (500, 10)), rng.uniform(-1, 1, 500)
    model = PrivateTensorCompletion(epsilon=1.0, value_range=(-1, 1), shape=(200,) * 10,
                                    accountant=acc, random_state=0).fit(X, y)
    assert np.all(np.isfinite(model.predict(X))) and acc.spent()[0] == pytest.approx(1.0)


def test_the_room_is_the_smallest_of_the_limits(monkeypatch):
    import dptensor._memory as memory
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 5 << 30)
    monkeypatch.setattr(memory, "_cgroup_available", lambda: 3 << 30)
    assert memory.available_bytes() == 3 << 30  # a container's limit below the free memory
    monkeypatch.setattr(memory, "_cgroup_available", lambda: None)
    assert memory.available_bytes() == 5 << 30
    monkeypatch.setattr(memory, "_meminfo_available", lambda: None)
    assert memory.available_bytes() is None or memory.available_bytes() >= 0  # RLIMIT_AS alone


@pytest.mark.parametrize("unit", ["value", "user"])
def test_a_shape_whose_row_counts_do_not_fit_is_refused_with_advice(monkeypatch, unit):
    # each mode's per-row counts (2**33 rows: 64 GiB) were allocated before the fit's own memory
    # check: numpy's raw MemoryError, naming no parameter
    from dptensor import PrivacyAccountant
    monkeypatch.setattr("dptensor._memory.available_bytes", lambda: 1 << 30)
    rng = np.random.default_rng(0)
    X = np.c_[rng.integers(0, 100, 500), rng.integers(0, 100, 500)]
    acc = PrivacyAccountant(5.0)
    est = PrivateTensorCompletion(shape=(2**31, 2**33), privacy_unit=unit, epsilon=1.0,
                                  delta=1e-20, value_range=(1, 5), accountant=acc)
    with pytest.raises(MemoryRefusedError, match="shape=None"):
        est.fit(X, rng.uniform(1, 5, 500))
    assert acc.history() == []
