"""What exact sums cost: a private PCA fit on grid rows against the plain float64 products.

At n = 2e5, d = 100, one BLAS thread (threadpoolctl), best of ``repeat`` runs each:

* ``X^T X`` in float64, the product the float path computed, against the grid map plus the exact
  Gram (:func:`dptensor.algorithms.exact.gram`) and against a whole private Analyze Gauss fit (mean, total,
  Gram, eigendecomposition; the exact path);
* one power step ``X^T (X V)`` (p = 3) against the exact one (:func:`dptensor.algorithms.exact.gram_product`),
  and a whole private power fit;
* float32 rows: ``X^T X`` in float32 against the fit (exact, in float64).

Run: ``python benchmarks/bench_exact_sums.py [--quick]``. Timings on a shared machine are noisy:
compare the ratios.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import one_thread, timed, write_results  # noqa: E402
from dptensor import PrivatePCA  # noqa: E402
from dptensor.algorithms.exact import gram, gram_product, grid_rows, grid_vectors  # noqa: E402
from dptensor.mechanisms import clip_rows  # noqa: E402
from dptensor.algorithms.power import center_and_clip, private_mean, private_total  # noqa: E402

NAME = "exact_sums"
#: Rows have squared norm about 175 (std 2 down to 0.5 over 100 columns): B = 20 clips few of them.
B = 20.0


def _fit(X, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivatePCA(3, epsilon=1.0, delta=1e-12, data_norm=B, method=method, n_iter=5,
                          random_state=0).fit(X)


def _float_path(X):
    """The data work of a private Analyze Gauss fit before the exact sums: clip, mean, centre and
    clip, total, ``X^T X``, in X's dtype (no noise: the releases cost the same on either path)."""
    Xc = clip_rows(X, B)
    mean = private_mean(Xc, B, 0.0, None)
    Xc = center_and_clip(Xc, mean, B, copy=False)
    private_total(Xc, B, 0.0, None)
    return Xc.T @ Xc


def run(quick: bool = False) -> list[dict]:
    n, d, repeat = (50_000, 100, 2) if quick else (200_000, 100, 5)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)) * np.linspace(2.0, 0.5, d)
    V = np.linalg.qr(rng.standard_normal((d, 3)))[0]
    records = []
    with one_thread():
        base, _ = timed(lambda: X.T @ X, repeat=repeat)
        step, _ = timed(lambda: X.T @ (X @ V), repeat=repeat)
        M = grid_rows(X, B)
        fit = timed(_fit, X, "analyze_gauss", repeat=repeat)[0]
        cases = [
            ("grid map (grid_rows)", "X^T X", timed(grid_rows, X, B, repeat=repeat)[0], base),
            ("exact Gram (on grid rows)", "X^T X", timed(gram, M, repeat=repeat)[0], base),
            ("private Analyze Gauss fit", "X^T X", fit, base),
            ("private Analyze Gauss fit", "the float path's data work", fit,
             timed(_float_path, X, repeat=repeat)[0]),
            ("exact power step (p=3)", "X^T (X V)", timed(gram_product, M, grid_vectors(V),
                                                         repeat=repeat)[0], step),
            ("private power fit (5 steps)", "5 X^T (X V)",
             timed(_fit, X, "power", repeat=repeat)[0], 5 * step),
        ]
        X32 = X.astype(np.float32)
        base32, _ = timed(lambda: X32.T @ X32, repeat=repeat)
        fit32 = timed(_fit, X32, "analyze_gauss", repeat=repeat)[0]
        cases += [("private Analyze Gauss fit, float32", "X^T X (float32)", fit32, base32),
                  ("private Analyze Gauss fit, float32", "the float path's data work (float32)",
                   fit32, timed(_float_path, X32, repeat=repeat)[0])]
    for what, against, seconds, reference in cases:
        records.append(dict(n=n, d=d, what=what, seconds=seconds, against=against,
                            against_seconds=reference, ratio=seconds / reference))
    summary = (f"Exact sums on a {n} x {d} float64 array, one BLAS thread, best of {repeat}: the "
               "time of each exact-path piece (or whole private fit) and of the plain float "
               "product it replaces, and their ratio.")
    print(write_results(NAME, records, summary=summary))
    return records


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
