"""The private topic model's whitening on a grid of sizes: the dense d x d release against the
whitening over the m most frequent words (``whitening=m``), the private power method beyond 2000
words, and ``whitening="auto"``, with the non-private fit in the same run.

Corpora of ``make_lda_corpus`` (10 topics, Dirichlet(0.1) over 2000 words, alpha0 = 1, documents
of 100-500 words, as ``bench_latent``; also 6000 words), two corpora a cell (seeds 7 and 8),
10^4, 3 x 10^4 and 10^5 documents, epsilon in {0.5, 1, 4}, delta 1e-5, every other parameter at its default
(``doc_clip="auto"``). Error: mean l1 distance of the matched topic-word distributions. Two
data-independent guesses: the uniform topics, and the zero vector (l1 error exactly 1; no
distribution is closer to every topic than that on average without reading data).

Run ``python benchmarks/bench_latent_grid_words.py --part WORDS N SEED`` for each cell of
``CELLS`` and SEED in 7, 8 (one BLAS thread each, in parallel: a part of 10^5 documents takes
ten minutes or more), then without arguments for the table and the picture.
``--part WORDS N SEED --only auto`` reruns a part's auto rows (after the rule changed) and keeps
the others.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown_table, one_thread, plot_path, write_results  # noqa: E402
from dptensor.datasets import make_lda_corpus  # noqa: E402
from dptensor.latent import PrivateLatentDirichletAllocation, match_rows  # noqa: E402
from dptensor.algorithms.vocabulary import auto_whitening_words  # noqa: E402

NAME = "latent_grid_words"
K = 10
EPSILONS = (0.5, 1.0, 4.0)
SEEDS = (7, 8)
#: (words, documents, whitenings): at 2000 words the dense release and smaller blocks; beyond
#: it (the d x d matrix is the cost) the private power method and blocks of 1000 and (auto) 2000.
CELLS = ((2000, 10_000, ("dense", 100, 200, 400, 800, "auto")),
         (2000, 30_000, ("dense", 100, 200, 400, 800, "auto")),
         (2000, 100_000, ("dense", 100, 200, 400, 800, "auto")),
         (6000, 100_000, ("power", "auto", 1000)))
COLOURS = {"dense": "k", "power": "C5", "100": "C0", "200": "C1", "400": "C2", "800": "C4",
           "1000": "C6", "2000": "C8", "auto": "C3"}


def topics_error(topics, true):
    perm, _ = match_rows(topics, true)
    return float(np.mean(np.abs(topics[perm] - true).sum(axis=1)))


def _part_path(words, n, seed):
    from benchmarks import _common

    return _common.RESULTS / f"{NAME}.part-{words}-{n}-{seed}.json"


def run_part(words: int, n: int, seed: int, only=None) -> list[dict]:
    path = _part_path(words, n, seed)
    kept = [r for r in json.loads(path.read_text())
            if only is not None and r["whitening"] != only] if path.exists() and only else []
    records = list(kept)
    methods = dict(((w, m), ms) for w, m, ms in CELLS)[(words, n)] if only is None else (only,)
    with warnings.catch_warnings(), one_thread():
        warnings.simplefilter("ignore")
        for seed in (seed,):
            C, topics, _ = make_lda_corpus(n, words, K, random_state=seed)
            exact = topics_error(PrivateLatentDirichletAllocation(K, random_state=0).fit(
                C).components_, topics)
            uniform = topics_error(np.full((K, words), 1.0 / words), topics)
            for eps in sorted(EPSILONS, key=lambda e: abs(np.log(e))):  # epsilon 1 first
                for method in methods:
                    model = PrivateLatentDirichletAllocation(
                        K, epsilon=eps, delta=1e-5, whitening=method, random_state=0).fit(C)
                    records.append({
                        "n_words": words, "n_docs": n, "seed": seed, "epsilon": eps,
                        "whitening": str(method), "resolved": model.whitening_,
                        "block": _block(words, method),
                        "error": topics_error(model.components_, topics),
                        "non_private": exact, "uniform": uniform})
                    print(records[-1], flush=True)
                    path.write_text(json.dumps(records, indent=1))  # a part survives a stop
            C = None
    path.write_text(json.dumps(records, indent=1))
    return records


def _block(words, method):
    """The words the whitening's subspace is taken over (0: the power method's, all implicit)."""
    if method in ("dense", "power"):
        return words if method == "dense" else 0
    return auto_whitening_words(words) if method == "auto" else int(method)


def _means(records):
    out = {}
    for r in records:
        out.setdefault((r["n_words"], r["n_docs"], r["epsilon"], r["whitening"]), []).append(r)
    rows = []
    for (d, n, eps, method), rs in sorted(out.items(), key=lambda kv: (*kv[0][:3],
                                                                        str(kv[0][3]))):
        row = {"n_words": d, "n_docs": n, "epsilon": eps, "whitening": method,
               "resolved": rs[0]["resolved"], "block": rs[0]["block"], "seeds": len(rs)}
        row.update({key: float(np.mean([r[key] for r in rs]))
                    for key in ("error", "non_private", "uniform")})
        row["ratio"] = row["error"] / row["non_private"]
        rows.append(row)
    return rows


def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _means(records)
    fig, axes = plt.subplots(1, len(CELLS), figsize=(4.2 * len(CELLS), 3.9),
                             constrained_layout=True)
    for ax, (words, n, methods) in zip(axes, CELLS):
        for method in methods:
            mine = [r for r in rows if (r["n_words"], r["n_docs"], r["whitening"]) == (
                words, n, str(method))]
            if not mine:
                continue
            style = "s-" if method == "auto" else ("o-" if method == "dense" else "o--")
            label = method if method in ("auto", "power") else (
                "dense (all words)" if method == "dense" else f"{method} words")
            ax.semilogx([r["epsilon"] for r in mine], [r["error"] for r in mine], style,
                        color=COLOURS[str(method)], label=label, ms=4)
        mine = [r for r in rows if (r["n_words"], r["n_docs"]) == (words, n)]
        if not mine:  # a part not run yet
            ax.set_visible(False)
            continue
        ax.axhline(mine[0]["non_private"], color="grey", lw=1, label="non-private")
        ax.axhline(1.0, color="grey", lw=1, ls=":", label="zero guess (l1 = 1)")
        ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
        ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.set_ylabel("mean l1 topic error")
        ax.set_yscale("log")
        ax.set_title(f"{n:.0e} documents, {words} words, k={K}", fontsize=9)
        ax.legend(fontsize=6, loc="lower left")
    fig.savefig(plot_path(NAME), dpi=100)
    plt.close(fig)


def merge() -> list[dict]:
    parts = [_part_path(w, n, seed) for w, n, _ in CELLS for seed in SEEDS]
    records = [r for path in parts if path.exists() for r in json.loads(path.read_text())]
    _plot(records)
    rows = _means(records)
    summary = ("Private topic model, the error of each whitening (mean over the seeds) against the "
               "non-private fit (ratio: error / non-private), the uniform topics and the zero "
               "guess (l1 error 1), same run. block: the words the subspace is taken over "
               "(0: the power method's implicit d x 2k steps); whitening=\"auto\" takes the "
               "dense release up to 2000 words, the columns of the 2000 most frequent beyond.")
    cols = ["n_words", "n_docs", "epsilon", "whitening", "resolved", "block", "seeds", "error",
            "non_private", "ratio", "uniform"]
    text = summary + "\n\n" + markdown_table(rows, cols)
    write_results(NAME, records, summary=text)
    from benchmarks import _common

    (_common.RESULTS / f"{NAME}.md").write_text(f"# {NAME}\n\n{text}\n")
    return records


if __name__ == "__main__":
    if "--part" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
        at = sys.argv.index("--part")
        run_part(*(int(a) for a in sys.argv[at + 1:at + 4]), only)
    else:
        merge()
