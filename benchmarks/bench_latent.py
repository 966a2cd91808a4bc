"""Spectral latent variable models against scikit-learn's EM and variational LDA, private and not.

Five parts, one run (peers in the same process, same data):

1. **Gaussian mixture, non-private**: k = 10 spherical components in d = 100 (means with iid
   N(0, 0.5^2) entries, so about 7 sigma apart; weights from 1 to 2, normalised), n from 1e4 to
   1e6. :class:`~dptensor.latent.PrivateGaussianMixture` (epsilon = inf) against scikit-learn's
   ``GaussianMixture`` at its defaults (full covariances, k-means start). Error: relative
   Frobenius error of the means after matching, and the largest weight error.
2. **Gaussian mixture, private**: the same data, epsilon in {0.5, 1, 2, 4, 8}, delta = 1e-5,
   ``data_norm`` from the generator's parameters (never read off the data).
3. **Gaussian mixture at large d** (``gmm_large_d``): the same generator at d = 2500, n = 5e4,
   beyond the d x d limit (2000), so ``whitening="auto"`` takes the power method (never d x d);
   the dense whitening and scikit-learn's spherical EM side by side, and private fits.
4. **LDA**: k = 10 topics (Dirichlet(0.1) over 2000 words), alpha0 = 1, documents of 100-500
   words. :class:`~dptensor.latent.PrivateLatentDirichletAllocation` against scikit-learn's
   ``LatentDirichletAllocation`` at its defaults (batch variational Bayes, 10 passes; its default
   priors 1/k match the generator), and the spectral fit refined by 3 EM steps
   (``refine_iter=3``, non-private only). Error: mean l1 distance between matched topic-word
   distributions. Then the private fit against epsilon and n, at 2000 words (up to 10^6 documents,
   the goal's setting: epsilon = 1 within 2x of the non-private fit) and at 100 words, and
   at the largest setting the ways of releasing the whitening (Analyze Gauss, power method) and
   the unclipped worst-case sensitivities (``doc_clip=None``).
5. **Reuters** (395 stories, 4258 words; needs ``pip install lda``, else skipped): topics of both
   models side by side, held-out perplexity (both scored with the same fold-in), UMass coherence of
   the top 10 words, and private fits.

The machine is shared and has 2 cores, so timings are noisy (one run each, peers in the same run);
``--quick`` runs smaller sizes (scikit-learn's GaussianMixture at n = 1e4 only, no 1e6 rows, the
large-d part at n = 1e4, the private LDA at 10^4 documents): a few minutes instead of about
twenty-five.

Run ``python benchmarks/bench_latent.py [--quick]``; ``--plot-only`` redraws the picture from the
saved JSON.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import markdown_table, plot_path, timed, write_results  # noqa: E402
from dptensor import PrivacyWarning  # noqa: E402
from dptensor.datasets import (gaussian_mixture_norm_bound, make_gaussian_mixture,  # noqa: E402
                               make_lda_corpus)
from dptensor.latent import PrivateGaussianMixture, PrivateLatentDirichletAllocation, match_rows  # noqa: E402

NAME = "latent"
K = 10
DELTA = 1e-5
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
EPSILONS_LDA = (1.0, 4.0, 16.0, 64.0)
#: BLAS threads for every fit (ours and scikit-learn's alike): on a shared 2-core machine two
#: threads per GEMM thrash as soon as another process runs (measured: a 10^5 x 100 Gram matrix
#: 25x slower than with one thread), which made the timings meaningless.
BLAS_THREADS = int(os.environ.get("BENCH_BLAS_THREADS", "1"))


def means_error(means, true):
    perm, _ = match_rows(means, true)
    return float(np.linalg.norm(means[perm] - true) / np.linalg.norm(true)), perm


def topics_error(topics, true):
    perm, _ = match_rows(topics, true)
    return float(np.mean(np.abs(topics[perm] - true).sum(axis=1)))


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# -- Gaussian mixture -----------------------------------------------------------------------------

def gmm(quick):
    from sklearn.mixture import GaussianMixture

    ns = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    sk_max = 10_000 if quick else 1_000_000
    epsilons = (1.0, 8.0) if quick else EPSILONS
    records = []
    for n in ns:
        X, means, weights, _ = make_gaussian_mixture(n, 100, K, separation=0.5, random_state=n)
        bound = gaussian_mixture_norm_bound(means, 1.0, 100)
        t, model = timed(lambda: _quiet(PrivateGaussianMixture(K, random_state=0).fit, X))
        err, perm = means_error(model.means_, means)
        row = {"part": "gmm", "n": n, "spectral_error": err, "spectral_s": t,
               "spectral_weight_error": float(np.max(np.abs(model.weights_[perm] - weights)))}
        if n <= sk_max:
            t_sk, sk = timed(lambda: GaussianMixture(K, random_state=0).fit(X))
            err_sk, perm_sk = means_error(sk.means_, means)
            row.update(sklearn_error=err_sk, sklearn_s=t_sk, sklearn_n_iter=int(sk.n_iter_),
                       sklearn_weight_error=float(np.max(np.abs(sk.weights_[perm_sk] - weights))),
                       error_ratio=err / err_sk, speedup=t_sk / t)
        records.append(row)
        print(row, flush=True)
        for eps in epsilons:
            t, pm = timed(lambda: PrivateGaussianMixture(K, epsilon=eps, delta=DELTA, data_norm=bound,
                                                         random_state=0).fit(X))
            perr, _ = means_error(pm.means_, means)
            records.append({"part": "gmm_private", "n": n, "epsilon": eps, "error": perr,
                            "non_private_error": err, "ratio_to_non_private": perr / err, "seconds": t,
                            "data_norm": bound})
            print(records[-1], flush=True)
        X = None  # the rows go before the next size is drawn
    return records


def gmm_large_d(quick):
    """d = 2500 > 2000: ``whitening="auto"`` never forms d x d (power method over the rows)."""
    from sklearn.mixture import GaussianMixture

    n, d = (10_000 if quick else 50_000), 2500
    X, means, weights, _ = make_gaussian_mixture(n, d, K, separation=0.5, random_state=d)
    bound = gaussian_mixture_norm_bound(means, 1.0, d)
    records = []

    def add(model, name, eps, t):
        err, _ = means_error(model.means_, means)
        records.append({"part": "gmm_large_d", "n": n, "d": d, "model": name, "epsilon": eps, "error": err,
                        "seconds": t})
        print(records[-1], flush=True)

    for whitening in ("auto", "dense"):
        t, model = timed(lambda: _quiet(PrivateGaussianMixture(K, whitening=whitening, random_state=0).fit, X))
        add(model, f"spectral, {model.whitening_} whitening", np.inf, t)
    t, sk = timed(lambda: GaussianMixture(K, covariance_type="spherical", random_state=0).fit(X))
    add(sk, "scikit-learn EM (spherical)", np.inf, t)
    for eps in ((4.0,) if quick else (1.0, 4.0, 16.0)):
        t, pm = timed(lambda: PrivateGaussianMixture(K, epsilon=eps, delta=DELTA, data_norm=bound,
                                                     random_state=0).fit(X))
        add(pm, f"spectral, {pm.whitening_} whitening", eps, t)
    return records


# -- LDA ------------------------------------------------------------------------------------------

def lda(quick):
    from sklearn.decomposition import LatentDirichletAllocation

    ns = (1_000, 3_000) if quick else (1_000, 3_000, 10_000)
    records = []
    for n in ns:
        C, topics, _ = make_lda_corpus(n, 2000, K, random_state=n)
        t, model = timed(lambda: _quiet(PrivateLatentDirichletAllocation(K, random_state=0).fit, C))
        t_em, refined = timed(lambda: _quiet(PrivateLatentDirichletAllocation(K, refine_iter=3, random_state=0).fit, C))
        t_sk, sk = timed(lambda: LatentDirichletAllocation(K, random_state=0).fit(C))
        err = topics_error(model.components_, topics)
        err_sk = topics_error(sk.components_ / sk.components_.sum(axis=1, keepdims=True), topics)
        row = {"part": "lda", "n_docs": n, "n_words": 2000, "spectral_error": err, "spectral_s": t,
               "sklearn_error": err_sk, "sklearn_s": t_sk, "error_ratio": err / err_sk, "speedup": t_sk / t,
               "refined_error": topics_error(refined.components_, topics), "refined_s": t_em}
        records.append(row)
        print(row, flush=True)
    # private: the pair moment's noise grows like sqrt(d) / n, so the vocabulary sets what n is needed
    settings = ([(2000, 10_000), (100, 10_000)] if quick else
                [(2000, 10_000), (2000, 100_000), (100, 10_000), (100, 100_000), (2000, 1_000_000)])
    # the whitening and clipping variants at 10^5 documents (10^6 takes minutes a fit: the goal's
    # epsilon = 1 and one more there)
    largest = (2000, 10_000 if quick else 100_000)
    for n_words, n in settings:
        C, topics, _ = make_lda_corpus(n, n_words, K, random_state=7)
        exact_fit = _quiet(PrivateLatentDirichletAllocation(K, random_state=0).fit, C)
        exact = topics_error(exact_fit.components_, topics)
        # at the largest setting: both ways of releasing the whitening, and no clipping; at 100
        # words (wider-spread document norms) a larger clip, whose bias is smaller
        modes = {largest: [("auto", 1.0), ("power", 1.0), ("auto", None)],
                 (100, 10_000 if quick else 100_000): [("auto", 1.0), ("auto", 2.0)]}.get(
                     (n_words, n), [("auto", 1.0)])
        for eps in ((1.0, 16.0) if quick else (1.0, 4.0) if n >= 1_000_000 else EPSILONS_LDA):
            for whitening, clip in modes:
                model = PrivateLatentDirichletAllocation(K, epsilon=eps, delta=DELTA, whitening=whitening,
                                                         doc_clip=clip, random_state=0)
                t, pm = timed(lambda: model.fit(C))
                records.append({"part": "lda_private", "n_docs": n, "n_words": n_words, "epsilon": eps,
                                "whitening": pm.whitening_, "doc_clip": "none" if clip is None else clip,
                                "error": topics_error(pm.components_, topics),
                                "non_private_error": exact, "seconds": t})
                print(records[-1], flush=True)
        C = None  # the corpus goes before the next one is drawn
    return records


# -- Reuters --------------------------------------------------------------------------------------

def umass_coherence(topics, C, top=10):
    """Mean UMass coherence of each topic's top words: sum over pairs of
    log((D(w_i, w_j) + 1) / D(w_j)) with D document frequencies in C (higher is better)."""
    B = (C > 0).astype(np.float64).tocsc()
    scores = []
    for row in topics:
        words = np.argsort(-row)[:top]
        sub = B[:, words]
        co = (sub.T @ sub).toarray()
        df = np.diag(co)
        s = [np.log((co[i, j] + 1.0) / max(df[j], 1.0)) for i in range(1, top) for j in range(i)]
        scores.append(np.mean(s))
    return float(np.mean(scores))


def heldout_perplexity(topics, alpha, C):
    """Perplexity of held-out documents under topic-word matrix ``topics``, each document's
    proportions folded in by the same fixed-point steps for every model."""
    scorer = PrivateLatentDirichletAllocation(len(topics))
    scorer.components_, scorer.alpha_, scorer.n_features_in_ = topics, np.asarray(alpha), C.shape[1]
    return scorer.perplexity(C)


def reuters(quick):
    try:
        from dptensor.datasets import load_reuters

        C, vocab, _ = load_reuters()
    except ImportError:
        print("lda not installed: Reuters part skipped")
        return [], ""
    from sklearn.decomposition import LatentDirichletAllocation

    rng = np.random.default_rng(0)
    order = rng.permutation(C.shape[0])
    train, test = C[order[:316]], C[order[316:]]
    records, lines = [], []

    def add(name, topics, alpha, seconds, eps=np.inf):
        records.append({"part": "reuters", "model": name, "epsilon": eps, "seconds": seconds,
                        "heldout_perplexity": heldout_perplexity(topics, alpha, test),
                        "umass_coherence": umass_coherence(topics, train)})
        print(records[-1], flush=True)
        lines.append(f"**{name}** (epsilon={eps:g}): " + "; ".join(
            " ".join(vocab[j] for j in np.argsort(-row)[:6]) for row in topics))

    t, ours = timed(lambda: _quiet(PrivateLatentDirichletAllocation(K, random_state=0).fit, train))
    add("spectral", ours.components_, ours.alpha_, t)
    t, refined = timed(lambda: _quiet(PrivateLatentDirichletAllocation(K, refine_iter=3, random_state=0).fit, train))
    add("spectral + 3 EM steps", refined.components_, refined.alpha_, t)
    t, sk = timed(lambda: LatentDirichletAllocation(K, random_state=0).fit(train))
    add("sklearn", sk.components_ / sk.components_.sum(axis=1, keepdims=True), np.full(K, 1.0 / K), t)
    for eps in (1.0, 100.0):
        model = PrivateLatentDirichletAllocation(K, epsilon=eps, delta=DELTA, random_state=0)
        t, pm = timed(lambda: model.fit(train))
        add("spectral, private", pm.components_, pm.alpha_, t, eps)
    uniform = np.full((1, C.shape[1]), 1.0 / C.shape[1])
    records.append({"part": "reuters", "model": "uniform words", "epsilon": np.inf,
                    "heldout_perplexity": heldout_perplexity(uniform, [1.0], test)})
    return records, "\n\n".join(lines)


# -- report ---------------------------------------------------------------------------------------

def _plot(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6), constrained_layout=True)
    for n in sorted({r["n"] for r in records if r["part"] == "gmm_private"}):
        mine = [r for r in records if r["part"] == "gmm_private" and r["n"] == n]
        line, = ax1.loglog([r["epsilon"] for r in mine], [r["error"] for r in mine], "o-",
                           label=f"n = {n:.0e}")
        ax1.axhline(mine[0]["non_private_error"], ls="--", color=line.get_color(), lw=1)
    ticks = sorted({r["epsilon"] for r in records if r["part"] == "gmm_private"})
    ax1.set_xticks(ticks, [f"{e:g}" for e in ticks])
    ax1.minorticks_off()
    ax1.set_xlabel("epsilon")
    ax1.set_ylabel("relative error of the means")
    ax1.set_title("private Gaussian mixture (k=10, d=100; dashed: non-private)", fontsize=9)
    ax1.legend(fontsize=8)
    for n_words in sorted({r["n_words"] for r in records if r["part"] == "lda_private"}):
        sizes = {r["n_docs"] for r in records if r["part"] == "lda_private" and r["n_words"] == n_words}
        for n in sorted(sizes):
            mine = [r for r in records if r["part"] == "lda_private" and r["n_words"] == n_words
                    and r["n_docs"] == n and r["whitening"] == "dense" and r["doc_clip"] == 1.0]
            # the largest corpus is fitted at fewer epsilons (minutes a fit): the legend says so
            few = "" if len(mine) == len(EPSILONS_LDA) else " (epsilon " + ", ".join(
                f"{r['epsilon']:g}" for r in mine) + " only)"
            line, = ax2.semilogx([r["epsilon"] for r in mine], [r["error"] for r in mine], "o-",
                                 label=f"{n_words} words, {n:.0e} docs{few}")
            ax2.axhline(mine[0]["non_private_error"], ls="--", color=line.get_color(), lw=1)
    ax2.set_xticks(EPSILONS_LDA, [f"{e:g}" for e in EPSILONS_LDA])
    ax2.minorticks_off()
    ax2.set_xlabel("epsilon")
    ax2.set_ylabel("mean l1 topic error")
    ax2.set_yscale("log")
    ax2.set_title("private LDA (k=10, doc_clip=1; dashed: non-private)", fontsize=9)
    ax2.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: it hid the lines
    fig.savefig(plot_path(NAME), dpi=100)
    plt.close(fig)


def run(quick: bool = False) -> list[dict]:
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    with warnings.catch_warnings(), threadpool_limits(BLAS_THREADS):
        warnings.simplefilter("ignore", PrivacyWarning)
        records = gmm(quick) + gmm_large_d(quick) + lda(quick)
        reuters_records, topics_text = reuters(quick)
    records += reuters_records
    try:
        _plot(records)
    except ImportError:
        print("matplotlib not installed: no plot")
    write_report(records, topics_text, time.perf_counter() - t0)
    return records


def _groups(records, *keys):
    out = {}
    for r in records:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return sorted(out.items())


def write_report(records, topics_text: str, seconds: float):
    """The markdown (one table per part, a summary that states every goal) and the JSON."""
    g = [r for r in records if r["part"] == "gmm" and "speedup" in r]
    lt = [r for r in records if r["part"] == "lda"]
    gp = [r for r in records if r["part"] == "gmm_private" and r["epsilon"] == 1.0]
    gl = [r for r in records if r["part"] == "gmm_large_d"]
    lp = [r for r in records if r["part"] == "lda_private"]
    rt = {r["model"]: r for r in records if r["part"] == "reuters" and r["epsilon"] == np.inf}

    def lda_at(rs, eps, **match):
        hit = [r for r in rs if r["epsilon"] == eps and all(r[k] == v for k, v in match.items())]
        return f"{hit[0]['error']:.3g}" if hit else "-"

    summary = [
        f"Shared 2-core machine, {BLAS_THREADS} BLAS thread(s) for every fit: timings are noisy (one run each, "
        "peers in the same run). Errors: relative "
        "Frobenius error of the matched means; mean l1 distance of the matched topic-word distributions.",
        "Gaussian mixture, spectral against EM (scikit-learn's defaults: one k-means start): " + "; ".join(
            f"n = {r['n']:.0e}: error ratio {r['error_ratio']:.2f}, speedup {r['speedup']:.0f}x" for r in g)
        + ". Where the ratio is far below 1, EM stopped in a poor local optimum (its error is in the table); "
        "where EM found the mixture, its error is the smaller (it is the efficient estimator).",
        "Private Gaussian mixture at epsilon = 1: " + ", ".join(
            f"n = {r['n']:.0e}: {r['ratio_to_non_private']:.2f}x the non-private error" for r in gp) + ".",
        ("Gaussian mixture at d = 2500 (gmm_large_d; whitening=\"auto\" takes the power method, never d x d): "
         + "; ".join(f"{r['model']} at epsilon = {r['epsilon']:g}: error {r['error']:.3g} in {r['seconds']:.1f} s"
                     for r in gl) + ".") if gl else "",
        "LDA, spectral against variational Bayes (scikit-learn's defaults): " + "; ".join(
            f"{r['n_docs']} documents: error ratio {r['error_ratio']:.2f}, speedup {r['speedup']:.0f}x "
            f"(3 EM steps after the spectral fit: error {r['refined_error']:.3g} in {r['refined_s']:.1f} s)"
            for r in lt) + ".",
        "Private LDA (lda_private; each document's terms clipped to their typical size, doc_clip=1): "
        + "; ".join(f"{w} words, {n} documents: error {lda_at(rs, 1.0, doc_clip=1.0, whitening=rs[0]['whitening'])}"
                    f" at epsilon = 1, {lda_at(rs, 16.0, doc_clip=1.0, whitening=rs[0]['whitening'])} at 16 "
                    f"(non-private {rs[0]['non_private_error']:.3g})"
                    for (w, n), rs in _groups(lp, "n_words", "n_docs"))
        + "".join(f". At {r['n_docs']:.0e} documents and {r['n_words']} words, epsilon = 1: "
                  f"error {r['error']:.3g}, {r['error'] / r['non_private_error']:.2f}x the non-private "
                  "fit's (goal: within 2x)"
                  for r in lp if r["n_docs"] >= 1_000_000 and r["epsilon"] == 1.0)
        + ". At 10^5 documents and 2000 words, the power-method whitening (d x 2k noise, never d x d) and "
        "the unclipped worst-case sensitivities (doc_clip=None, the previous release) are in the table; at "
        "100 words and the most documents, doc_clip=1 leaves a bias floor that doc_clip=2 avoids at large "
        "epsilon (the table).",
        (f"Reuters held-out perplexity: spectral {rt['spectral']['heldout_perplexity']:.0f}, with 3 EM steps "
         f"{rt['spectral + 3 EM steps']['heldout_perplexity']:.0f}, scikit-learn "
         f"{rt['sklearn']['heldout_perplexity']:.0f}, uniform words {rt['uniform words']['heldout_perplexity']:.0f}. "
         "Reuters (395 stories) is far too small for a private topic model: compare its private fits' "
         "perplexity with uniform word frequencies.") if rt else "",
        f"Total {seconds:.0f} s.",
    ]
    summary = [line for line in summary if line]
    tables = []
    for part, cols in (("gmm", ["n", "spectral_error", "sklearn_error", "error_ratio",
                                "spectral_weight_error", "sklearn_weight_error", "spectral_s", "sklearn_s",
                                "speedup", "sklearn_n_iter"]),
                       ("gmm_private", ["n", "epsilon", "error", "non_private_error", "ratio_to_non_private",
                                        "seconds"]),
                       ("gmm_large_d", ["n", "d", "model", "epsilon", "error", "seconds"]),
                       ("lda", ["n_docs", "n_words", "spectral_error", "sklearn_error", "error_ratio",
                                "spectral_s", "sklearn_s", "speedup", "refined_error", "refined_s"]),
                       ("lda_private", ["n_docs", "n_words", "epsilon", "whitening", "doc_clip", "error",
                                        "non_private_error", "seconds"]),
                       ("reuters", ["model", "epsilon", "heldout_perplexity", "umass_coherence", "seconds"])):
        rows = [r for r in records if r["part"] == part]
        if rows:
            tables.append(f"### {part}\n\n" + markdown_table(rows, cols))
    text = "\n\n".join(summary) + "\n\n" + "\n\n".join(tables)
    if topics_text:
        text += "\n\n### Reuters topics (top 6 words each)\n\n" + topics_text
    write_results(NAME, records, summary=text, columns=["part"], extra={"reuters_topics": topics_text,
                                                                         "seconds": seconds})
    # the markdown is the tables above (one per part), not one table of mixed records
    from benchmarks import _common

    (_common.RESULTS / f"{NAME}.md").write_text(f"# {NAME}\n\n{text}\n")


if __name__ == "__main__":
    if "--plot-only" in sys.argv:  # redraw the picture from the saved JSON
        from benchmarks._common import load_results

        _plot(load_results(NAME)["records"])
    else:
        run(quick="--quick" in sys.argv)
