"""The documentation keeps its promises: the README's and the quickstart's code runs, the Sphinx
build (gallery included) passes with warnings as errors, and the demo prints what it says."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".md":
        blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    else:  # reStructuredText: the indented body of each python code-block
        blocks = []
        for match in re.finditer(r"\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)", text):
            blocks.append("\n".join(line[3:] for line in match.group(1).splitlines()))
    assert blocks, f"no python blocks found in {path.name}"
    return "\n\n".join(blocks)


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart.rst"])
def test_documented_code_runs(doc, capsys):
    namespace = {"__name__": "__doc_example__"}
    exec(compile(_python_blocks(ROOT / doc), doc, "exec"), namespace)
    budget = namespace["budget"]
    spent, delta = budget.spent()
    assert 0 < spent <= budget.epsilon
    assert len(budget.history()) >= 4  # every private fit of the page is in the ledger


def test_readme_grid_search_records_every_fit():
    namespace = {"__name__": "__doc_example__"}
    exec(compile(_python_blocks(ROOT / "README.md"), "README.md", "exec"), namespace)
    # 3 candidates x 3 folds + the refit, as the README says
    assert len(namespace["budget"].history()) == 10


def test_demo_prints_table_and_ledger(tmp_path, capsys):
    from dptensor.demo import run_demo

    plot = tmp_path / "demo.png"
    assert run_demo(quick=True, plot=str(plot), epsilons=(0.5, 4.0)) == 0
    out = capsys.readouterr().out
    for name in ("PrivateTensorDecomposition", "StreamingTensorPower", "PrivatePCA", "AdaptivePrivatePCA",
                 "PrivateTensorCompletion"):
        rows = [line.split() for line in out.splitlines() if line.startswith(name + " ")]
        assert len(rows) >= 2, name
        errors = {float(r[1]): float(r[-3]) for r in rows}
        # more budget, less error: every estimator's error at epsilon 4 is below its error at 0.5
        assert errors[4.0] < errors[0.5], (name, errors)
    assert "spends" in out and "PrivacyAccountant" in out
    pytest.importorskip("matplotlib")
    assert plot.exists() and plot.stat().st_size > 10_000


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
    assert (out / "index.html").exists()
    assert (out / "privacy.html").exists() and (out / "gallery.html").exists()
