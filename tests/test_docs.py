"""The documentation keeps its promises: every Python code block of README.md and docs/*.rst runs
as written, the numbers they print mean what the text says, the Sphinx build (gallery included)
passes with warnings as errors, and the demo prints what it says.

Each file's blocks run in order in one namespace, in a fresh working directory. A block is shown
but not run only when its first line says so, visibly, with the reason:
``# not run in the tests: <why>``. The gallery's ``.. plot::`` blocks are run by the Sphinx build
(the plot directive executes them, and ``-W`` turns a failure into an error).
"""
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.rst"))]
NOT_RUN = re.compile(r"#\s*not run in the tests:(.*)")
LANGUAGES = {"python", "bash", "text"}  # any other language must be added here on purpose


@dataclass
class Block:
    language: str
    line: int  # 1-based line of the first line of code
    code: str


def code_blocks(path: Path) -> list[Block]:
    """The fenced (Markdown) or ``code-block`` (reStructuredText, at any indentation) blocks."""
    lines = path.read_text().splitlines()
    blocks = []
    if path.suffix == ".md":
        fence = None
        for i, line in enumerate(lines):
            if fence is None and (m := re.match(r"```(\w*)\s*$", line)):
                fence, lang, body = i, m.group(1) or "text", []
            elif fence is not None and line.startswith("```"):
                blocks.append(Block(lang, fence + 2, "\n".join(body)))
                fence = None
            elif fence is not None:
                body.append(line)
        return blocks
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)\.\. (?:code-block|code|sourcecode)::\s*(\w*)", line)
        if not m:
            continue
        indent, j = len(m.group(1)), i + 1
        while j < len(lines) and re.match(r"\s+:\w[\w-]*:", lines[j]):  # directive options
            j += 1
        first, body = None, []
        for k in range(j, len(lines)):
            text = lines[k]
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            if text.strip() and first is None:
                first = k
            if first is not None:
                body.append(text)
        blocks.append(Block(m.group(2) or "text", (first or j) + 1, textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks


def _python_blocks(path: Path) -> list[Block]:
    return [b for b in code_blocks(path) if b.language == "python"]


def run_doc(doc: str, namespace: dict | None = None) -> dict:
    """Run every Python block of ``doc`` in order in one namespace; return the namespace."""
    namespace = {"__name__": "__doc_example__"} if namespace is None else namespace
    for block in _python_blocks(ROOT / doc):
        first = block.code.splitlines()[0] if block.code else ""
        if (m := NOT_RUN.match(first.strip())):
            assert len(m.group(1).strip()) > 10, f"{doc}:{block.line}: say why the block is not run"
            continue
        # blank lines keep the traceback's line numbers those of the file
        exec(compile("\n" * (block.line - 1) + block.code, str(ROOT / doc), "exec"), namespace)
    return namespace


# What each page's text says its code prints, checked on the values it computed.
def _check_readme(ns):
    budget, search = ns["budget"], ns["search"]
    # the whole search (runs, scores, choice, refit) is one spend of the search's epsilon
    assert [e.mechanism for e in budget.history()] == ["private_selection"]
    assert budget.spent()[0] == pytest.approx(search.epsilon, rel=1e-6)
    assert search.best_params_["privatepca__method"] in ("analyze_gauss", "power")
    assert ns["Z"].shape == (ns["X"].shape[0], 3)


def _check_quickstart(ns):
    from dptensor.metrics import recovery_error, sin_theta_distance

    budget = ns["budget"]
    assert len(budget.history()) == 8  # every fit of the page is private and in the ledger
    people = ns["people"]  # the grouped fit protects a person: its unit and public n say so
    assert people.privacy_cost_.unit == "group of rows" and people.n_samples_ == 5000
    assert sum(e.label.endswith("unit='group of rows')") for e in budget.history()) == 1
    # the page teaches delta well below 1/n: none of its fits may warn that it is not
    from dptensor import PrivacyWarning
    assert not [m for m in ns["__warnings__"] if isinstance(m, PrivacyWarning) and "1/n" in str(m)]
    assert 0 < budget.spent()[0] <= budget.epsilon
    # the bound comes from the generator's parameters and holds for every row: nothing clipped
    assert np.linalg.norm(ns["X"], axis=1).max() <= ns["bound"] + 1e-12
    assert max(recovery_error(ns["model"].components_, ns["V"])) < 0.2
    assert max(recovery_error(ns["stream"].components_, ns["stream_V"])) < 0.2
    assert ns["stream"].n_samples_seen_ == 3 * 3 * 40_000
    # "about 40% of the rows" are longer than the bound and clipped
    assert 0.35 < np.mean(np.linalg.norm(ns["Xp"], axis=1) > 1.0) < 0.45
    assert sin_theta_distance(ns["pca"].components_, ns["components"]) < 0.005  # "about 0.002"
    # the spikes differ, so the top direction is a real target, and it is found
    assert len(set(ns["spikes"])) == 3
    assert sin_theta_distance(ns["adaptive"].components_, ns["components"][:1]) < 0.05
    # "all but a handful of rows", "within a few percent", "within about 0.01"
    assert np.sum(np.linalg.norm(ns["Xg"], axis=1) > ns["gbound"]) < 20
    assert max(ns["dist"] / np.linalg.norm(ns["means"], axis=1)) < 0.08  # "within a few percent"
    assert np.abs(ns["gmm"].weights_[ns["perm"]] - ns["weights"]).max() < 0.02
    # "within about 0.04" (l1 over 100 words), and proportions that are distributions
    lda = ns["lda"]
    assert np.abs(lda.components_[ns["tperm"]] - ns["topics"]).sum(axis=1).mean() < 0.06
    np.testing.assert_allclose(lda.transform(ns["counts"][:3]).sum(axis=1), 1.0)


def _check_privacy(ns):
    assert len(ns["budget"].history()) == 10
    assert ns["budget"].ledger.endswith("search.sqlite")
    # the group bound's example applies: every spend of that ledger is Gaussian
    assert {leaf.mechanism for e in ns["budget"].history() for leaf in e.event.leaves()} == {"gaussian"}
    eps, delta = ns["budget"].spent()
    assert ns["group_eps"] > 3 * eps  # a group of 3 gets a weaker guarantee, more than 3x epsilon


def _check_dask(ns):
    from dptensor.metrics import recovery_error, sin_theta_distance

    assert max(recovery_error(ns["model"].components_, ns["V"])) < 0.3
    assert sin_theta_distance(ns["pca"].components_, ns["V"]) < 0.05


def _check_model_selection(ns):
    # the estimator's accountant was charged the whole search, and refused it: nothing spent
    assert ns["small"].history() == [] and not hasattr(ns["tuned"], "privacy_cost_")
    assert [e.mechanism for e in ns["budget"].history()] == ["private_selection"]
    # the search picks a model whose every component stands above its noise: a grid over
    # n_components, which captured variance always resolves to the largest, fails this
    best = ns["search"].best_estimator_
    assert np.all(best.explained_variance_ > 2 * best.explained_variance_noise_)
    # the search by person: its unit, and a cv_results_ of the released score only
    assert ns["per_person"].history()[0].label.endswith("unit='group of rows')")
    scores = ns["by_person"].cv_results_["mean_test_score"]
    assert np.isnan(scores).sum() == len(scores) - 1


CHECKS = {"README.md": _check_readme, "docs/quickstart.rst": _check_quickstart,
          "docs/privacy.rst": _check_privacy, "docs/dask.rst": _check_dask,
          "docs/model_selection.rst": _check_model_selection}
NEEDS = {"docs/dask.rst": ("dask.array", "distributed")}  # the [dask] extra
# Pages whose examples may warn, each with the reason the warning is part of the example; every
# other page runs without a warning, in this process or in a worker (whose stderr is the test's).
MAY_WARN: dict[str, str] = {
    "docs/quickstart.rst": "the completion example learns nothing at its size and epsilon, and "
                           "the page shows that it says so (components and offsets below their "
                           "noise levels)",
    "docs/choosing.rst": "the completion recipes' data have no day effect (and the first no "
                         "interaction): the page explains the fits' noise-level warnings",
}


WITH_PYTHON = [doc for doc in DOCS if _python_blocks(ROOT / doc)]


def test_every_code_block_is_found_and_has_a_known_language():
    assert set(CHECKS) <= set(WITH_PYTHON)  # the extractor finds the blocks of the pages checked below
    found = {doc: code_blocks(ROOT / doc) for doc in DOCS}
    for doc, blocks in found.items():
        for b in blocks:
            assert b.language in LANGUAGES, f"{doc}:{b.line}: code block in {b.language!r}"
            assert b.code.strip(), f"{doc}:{b.line}: empty code block"


def test_the_extractor_reads_nested_blocks_and_honours_the_not_run_marker(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(textwrap.dedent("""\
        Title
        =====

        .. code-block:: python
           :caption: first

           a = 1

        Term
           Definition.

           .. code-block:: python

              b = a + 1
              if b:
                  c = b * 10

        .. code-block:: python

           # not run in the tests: it would connect to a server of your own
           raise RuntimeError("not run")

        .. code-block:: bash

           echo hi
        """))
    blocks = code_blocks(page)
    assert [(b.language, b.line) for b in blocks] == [("python", 7), ("python", 14), ("python", 20),
                                                       ("bash", 25)]
    assert blocks[1].code == "b = a + 1\nif b:\n    c = b * 10"
    assert run_doc(str(page))["c"] == 20
    (tmp_path / "bad.md").write_text("```python\n# not run in the tests:\nraise RuntimeError\n```\n")
    with pytest.raises(AssertionError, match="say why"):
        run_doc(str(tmp_path / "bad.md"))


@pytest.mark.parametrize("doc", WITH_PYTHON)
def test_documented_code_runs_and_prints_what_the_text_says(doc, tmp_path, monkeypatch, capfd):
    for module in NEEDS.get(doc, ()):
        pytest.importorskip(module, reason=f"{doc} needs the [dask] extra")
    monkeypatch.chdir(tmp_path)  # the pages write files (a ledger, data on disk) where they run
    namespace = {"__name__": "__doc_example__"}
    try:
        with warnings.catch_warnings(record=True) as caught:  # a page's checks may read them
            warnings.simplefilter("always")
            run_doc(doc, namespace)
        namespace["__warnings__"] = [w.message for w in caught]
        CHECKS.get(doc, lambda ns: None)(namespace)
        if doc not in MAY_WARN:  # an example that warns is not well posed, or must say why
            assert not namespace["__warnings__"], namespace["__warnings__"]
            assert "Warning:" not in capfd.readouterr().err
    finally:
        for name in ("client", "cluster"):  # a page's Dask cluster is shut down with it
            if hasattr(namespace.get(name), "close"):
                namespace[name].close()


def test_demo_prints_table_and_ledger(tmp_path, capsys):
    from dptensor.demo import run_demo

    plot = tmp_path / "demo.png"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run_demo(quick=True, plot=str(plot), epsilons=(0.5, 4.0), n_draws=2) == 0
    # a first run shows no warnings: the fits' noise warnings are counted in the printed notes
    assert [str(w.message) for w in caught] == []
    out = capsys.readouterr().out
    for name in ("PrivateTensorDecomposition", "StreamingTensorPower", "PrivatePCA", "AdaptivePrivatePCA",
                 "PrivateTensorCompletion"):
        rows = [line.split() for line in out.splitlines() if line.startswith(name + " ")]
        assert len(rows) >= 2, name
        errors = {float(r[1]): float(r[-4]) for r in rows}  # the median of the draws
        # more budget, less error: every estimator's error at epsilon 4 is below its error at 0.5
        assert errors[4.0] < errors[0.5], (name, errors)
        for r in rows:  # the range of the draws holds their median
            lo, hi = map(float, r[-3].split(".."))
            assert lo <= float(r[-4]) <= hi, r
    assert "median of 2 seeded draws" in out
    # the topic model's level curve is explained where the user reads, not left to look wrong
    assert ("PrivateLatentDirichletAllocation: most of its private error is the bias of "
            "clipping") in out
    assert "spends" in out and "PrivacyAccountant" in out
    pytest.importorskip("matplotlib")
    assert plot.exists() and plot.stat().st_size > 10_000


def test_demo_checks_the_plot_path_before_any_fit(tmp_path, capsys, monkeypatch):
    """A plot path that cannot be written is refused at once, in words, not by a traceback
    after the whole demo has run."""
    from dptensor import demo
    from dptensor.__main__ import main

    def no_fit(*args, **kwargs):
        raise AssertionError("the demo started fitting")

    monkeypatch.setattr(demo, "studies", no_fit)
    for bad, why in [(tmp_path / "missing" / "x.png", "does not exist"),
                     (tmp_path, "is a directory"), (tmp_path / "x.notatype", "file type")]:
        assert main(["demo", "--plot", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("dptensor demo: cannot write the plot") and why in err, err
        with pytest.raises(ValueError, match=why):
            demo.run_demo(plot=str(bad))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("matplotlib")
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out), "-d", str(tmp_path / "doctrees")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    # the gallery's plots run in the build: a warning there is printed, not an error under -W
    assert "Warning:" not in proc.stderr, proc.stderr[-5000:]
    assert (out / "index.html").exists()
    assert (out / "privacy.html").exists() and (out / "gallery.html").exists()
