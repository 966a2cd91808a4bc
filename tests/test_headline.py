"""The README's benchmark table says whether each goal was met, and keeps a peer's whole status."""
import json

from benchmarks import headline


def test_a_goal_carries_its_verdict_in_the_direction_of_its_measure():
    assert headline._goal(28.5, 30) == "goal 30x, not met"  # a speed-up: higher is better
    assert headline._goal(6.61, 2) == "goal 2x, met"
    assert headline._goal(1.82, 1.3, higher=False) == "goal 1.3x, not met"  # a time ratio
    assert headline._goal(1.04, 1.3, higher=False) == "goal 1.3x, met"
    assert headline._goal(16, 70, "%") == "goal 70%, not met"


def test_the_committed_table_rows_with_a_goal_all_say_met_or_not(monkeypatch, tmp_path):
    """Every goal the README states is followed by its verdict, and a peer that timed out at a
    smaller n says so (the table claims no timeout that was not measured)."""
    status = "timeout (>30 s at n=5000; not rerun)"
    record = {"d": 50, "n": 50000, "epsilon": 1.0, "default_sin2": 0.002, "default_s": 0.04,
              "diffprivlib_sin2": None, "diffprivlib_status": status}
    (tmp_path / "pca.json").write_text(json.dumps({"records": [record]}))
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    (row,) = headline.rows()
    assert row["peer"] == f"diffprivlib {status}"
    monkeypatch.undo()
    for row in headline.rows():
        if "goal" in row["ratio"]:
            assert row["ratio"].rstrip(")").endswith(("met", "not met")), row
