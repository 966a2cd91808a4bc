"""Run every benchmark of the suite in one process and write a combined summary.

``python -m dptensor bench [--quick]`` (or ``python -m benchmarks.run_all``) imports each
``benchmarks/bench_*.py`` module, calls its ``run(quick)``, which writes its own JSON, markdown
and plots under ``benchmarks/results/``, and then writes ``benchmarks/results/SUMMARY.md`` with
every benchmark's markdown table and the machine it ran on. ``--quick`` writes under
``benchmarks/results/quick/`` instead (not committed), so a smoke test never replaces the full
results that README's table is built from.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
import warnings
from pathlib import Path

from benchmarks import _common
from benchmarks._common import machine_info

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dptensor bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (about a minute)")
    parser.add_argument("--only", nargs="*", default=None, help="benchmark names (bench_<name>) to run")
    args = parser.parse_args(argv)
    if args.quick:  # smoke-test numbers never overwrite the committed full results
        _common.RESULTS = _common.RESULTS / "quick"
    names = discover()
    if args.only:
        names = [n for n in names if n in args.only or n.removeprefix("bench_") in args.only]
    status = {}
    # The benchmarks fit non-private references on purpose, beside the private fits they measure.
    warnings.filterwarnings("ignore", message=".*released its fit without a privacy guarantee")
    for name in _progress(names):
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            module.run(quick=args.quick)
            status[name] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1)}
        except Exception:  # one broken peer must not hide the other results
            traceback.print_exc()
            status[name] = {"ok": False, "seconds": round(time.perf_counter() - t0, 1)}
    write_summary(status, quick=args.quick)
    if not args.quick:  # the README shows full runs only
        from benchmarks.headline import main as headline

        headline()
    return 0 if all(s["ok"] for s in status.values()) else 1


def write_summary(status: dict, quick: bool) -> Path:
    """SUMMARY.md and SUMMARY.json for the benchmarks run now, beside those of earlier runs.

    ``--only`` runs a few benchmarks: the other sections of the summary are kept from the previous
    SUMMARY.json (their results files are untouched), so a one-benchmark run does not shrink it.
    """
    RESULTS = _common.RESULTS
    RESULTS.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    earlier = _earlier_status(RESULTS, exclude=status)
    status = dict(sorted({**earlier, **status}.items()))
    parts = ["# Benchmark summary", "",
             f"Run {'--quick' if quick else 'full'} on {info['date']}: Python {info['python']}, "
             f"{info['cpus']} CPUs, NumPy {info['numpy']}, scikit-learn {info['sklearn']}.",
             "Regenerate with `python -m dptensor bench` (or `make bench`).", ""]
    if earlier:
        parts[3:3] = [f"This run: {', '.join(n for n in status if n not in earlier)}; the other sections "
                      "are from earlier runs."]
    for name, st in status.items():
        md = RESULTS / f"{name.removeprefix('bench_')}.md"
        seconds = "" if st.get("seconds") is None else f", {st['seconds']} s"
        parts.append(f"## {name} ({'ok' if st['ok'] else 'FAILED'}{seconds})\n")
        if md.exists():
            parts.append(md.read_text().split("\n", 1)[1].strip() + "\n")
    path = RESULTS / "SUMMARY.md"
    path.write_text("\n".join(parts))
    (RESULTS / "SUMMARY.json").write_text(json.dumps({"machine": info, "status": status}, indent=2))
    print(f"wrote {path}")
    return path


def _earlier_status(results: Path, exclude) -> dict:
    """The previous summary's status of the benchmarks not run now that still exist."""
    try:
        previous = json.loads((results / "SUMMARY.json").read_text())["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    names = set(discover())
    return {n: st for n, st in previous.items() if n in names and n not in exclude}


def _progress(items):
    """A progress line per benchmark when the terminal is interactive."""
    for i, item in enumerate(items, 1):
        if sys.stderr.isatty():
            print(f"[{i}/{len(items)}] {item}", file=sys.stderr, flush=True)
        yield item


if __name__ == "__main__":
    sys.exit(main())
