"""``dptensor info`` says whether the fast extra is active: seeded values depend on it."""
import sys

from dptensor.__main__ import main


def test_info_names_the_fast_extra_either_way(capsys, monkeypatch):
    assert main(["info"]) == 0
    line = next(r for r in capsys.readouterr().out.splitlines() if r.startswith("numba"))
    assert "fast extra" in line and "seeded" in line
    monkeypatch.setitem(sys.modules, "numba", None)  # as on an installation without numba
    assert main(["info"]) == 0
    line = next(r for r in capsys.readouterr().out.splitlines() if r.startswith("numba"))
    assert line.split()[1:3] == ["not", "installed"] and "NumPy paths" in line
