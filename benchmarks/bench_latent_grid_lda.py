"""``doc_clip="auto"`` of the private topic model on a grid of sizes, against fixed clips and the
non-private fit in the same run.

Corpora of ``make_lda_corpus`` (10 topics, Dirichlet(0.1) over 2000 words, alpha0 = 1, documents
of 100-500 words, as ``bench_latent``), epsilon in {0.5, 1, 4}, delta 1e-5. At 10^4 documents
two corpora (seeds 7 and 8) and the clips 0.5, 0.75, 1 and ``"auto"``; at 10^5 documents (a
minute a fit on the shared machine) one corpus and the clips 0.75 and 1, where the rule resolves
to 1 (``auto_doc_clip``: ``q = n mu / sqrt(d) >= 240``). At 10^6 documents ``q`` is above 3000
for every epsilon here: the rule is 1 there too. Error: mean l1 distance of the matched
topic-word distributions; the uniform topics' error is the data-independent guess.

Run ``python benchmarks/bench_latent_grid_lda.py``: about ten minutes, one BLAS thread.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown_table, plot_path, seed_means, write_results  # noqa: E402
from dptensor.datasets import make_lda_corpus  # noqa: E402
from dptensor.latent import PrivateLatentDirichletAllocation, match_rows  # noqa: E402
from dptensor.latent._base import auto_doc_clip  # noqa: E402

NAME = "latent_grid_lda"
WORDS, K = 2000, 10
EPSILONS = (0.5, 1.0, 4.0)
COLOURS = {"0.5": "C0", "0.75": "C1", "1.0": "C2", "auto": "C3"}
CELLS = ((10_000, (7, 8), (0.5, 0.75, 1.0, "auto")), (100_000, (7,), (0.75, 1.0)))


def topics_error(topics, true):
    perm, _ = match_rows(topics, true)
    return float(np.mean(np.abs(topics[perm] - true).sum(axis=1)))


def run() -> list[dict]:
    from threadpoolctl import threadpool_limits

    records = []
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        for n, seeds, clips in CELLS:
            for seed in seeds:
                C, topics, _ = make_lda_corpus(n, WORDS, K, random_state=seed)
                exact = topics_error(PrivateLatentDirichletAllocation(K, random_state=0).fit(
                    C).components_, topics)
                uniform = topics_error(np.full((K, WORDS), 1.0 / WORDS), topics)
                for eps in EPSILONS:
                    for clip in clips:
                        model = PrivateLatentDirichletAllocation(
                            K, epsilon=eps, delta=1e-5, doc_clip=clip, random_state=0).fit(C)
                        records.append({
                            "n_docs": n, "seed": seed, "epsilon": eps, "doc_clip": str(clip),
                            "resolved_clip": model.doc_clip_,
                            "error": topics_error(model.components_, topics),
                            "non_private": exact, "uniform": uniform})
                        print(records[-1], flush=True)
                C = None
    _plot(records)
    write_report(records)
    return records


def _means(records):
    return seed_means(records, ("n_docs", "epsilon", "doc_clip"),
                      ("error", "non_private", "uniform"), first=("resolved_clip",))


def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _means(records)
    fig, axes = plt.subplots(1, len(CELLS), figsize=(12, 3.8), constrained_layout=True)
    for ax, (n, _, clips) in zip(axes, CELLS):
        for clip in clips:  # one colour per clip in both panels
            mine = [r for r in rows if r["n_docs"] == n and r["doc_clip"] == str(clip)]
            style = "s-" if clip == "auto" else "o--"
            ax.semilogx([r["epsilon"] for r in mine], [r["error"] for r in mine], style,
                        color=COLOURS[str(clip)], label=f"doc_clip={clip}")
        mine = [r for r in rows if r["n_docs"] == n]
        ax.axhline(mine[0]["non_private"], color="k", lw=1, label="non-private")
        ax.axhline(mine[0]["uniform"], color="grey", lw=1, ls=":", label="uniform topics")
        ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
        ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.set_ylabel("mean l1 topic error")
        ax.set_yscale("log")
        # where the rule resolves to a clip that was run, it was not run again: the title says so
        auto = {float(auto_doc_clip(n, WORDS, eps, 1e-5)) for eps in EPSILONS}
        note = ""
        if "auto" not in clips and len(auto) == 1:
            note = f"\n(doc_clip=auto is {auto.pop():g} here)"
        ax.set_title(f"private LDA, {n:.0e} documents, {WORDS} words, k={K}{note}", fontsize=9)
    # beside the panels: inside, it hid the non-private line
    axes[-1].legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="upper left",
                    bbox_to_anchor=(1.02, 1.0))
    fig.savefig(plot_path(NAME), dpi=100)
    plt.close(fig)


def write_report(records):
    rows = _means(records)
    rule = "; ".join(f"{n:.0e} documents, epsilon {eps:g}: {auto_doc_clip(n, WORDS, eps, 1e-5):.3g}"
                     for n in (10_000, 100_000, 1_000_000) for eps in EPSILONS)
    summary = ("Private topic model, the error of each doc_clip (mean over the seeds) against the "
               "non-private fit and the uniform topics (a data-independent guess), same run. "
               f"The clip doc_clip=\"auto\" resolves to: {rule}.")
    cols = ["n_docs", "epsilon", "doc_clip", "resolved_clip", "seeds", "error", "non_private",
            "uniform"]
    text = summary + "\n\n" + markdown_table(rows, cols)
    write_results(NAME, records, summary=text)
    from benchmarks import _common

    (_common.RESULTS / f"{NAME}.md").write_text(f"# {NAME}\n\n{text}\n")


if __name__ == "__main__":
    if "--plot" in sys.argv:  # the picture again from the saved records
        import json

        from benchmarks import _common

        _plot(json.loads((_common.RESULTS / f"{NAME}.json").read_text())["records"])
    else:
        run()
