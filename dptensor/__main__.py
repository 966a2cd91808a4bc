"""Command line: ``dptensor {demo,bench,ledger,info}`` (also ``python -m dptensor``)."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from .demo import check_plot_path, run_demo

    try:  # before the fits, not after a minute of them
        check_plot_path(args.plot)
    except ValueError as exc:
        print(f"dptensor demo: {exc}", file=sys.stderr)
        return 2
    return run_demo(quick=args.quick, plot=args.plot)


def _bench(args) -> int:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "run_all.py").exists():
        print("the benchmark suite ships with the source checkout (benchmarks/ beside dptensor/); "
              "run this command from a clone of the repository", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    from benchmarks.run_all import discover
    from benchmarks.run_all import main as bench_main

    names = sorted(n.removeprefix("bench_") for n in discover())
    unknown = [n for n in args.only or [] if n.removeprefix("bench_") not in names]
    if unknown:
        print(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(names)}",
              file=sys.stderr)
        return 2
    argv = ["--quick"] if args.quick else []
    return bench_main(argv + (["--only", *args.only] if args.only else []))


def _ledger(args) -> int:
    import datetime
    import math

    from .accounting import LedgerError, epsilon_of
    from .accounting.ledger import read_ledger, resolve, upgrade

    try:  # read only (unless upgrading): inspecting never writes, and works on a read-only copy
        if args.upgrade:
            print(f"upgraded   {upgrade(args.path)} spends now carry the hash chain")
        (total, delta), entries, hashes = read_ledger(args.path)
    except LedgerError as exc:  # a BaseException: say it plainly, without a traceback
        print(f"dptensor ledger: {exc}", file=sys.stderr)
        return 2
    spent = epsilon_of([e.event for e in entries], delta) if entries else 0.0
    unlimited = math.isinf(total)
    print(f"ledger     {resolve(args.path)}")
    print(f"budget     epsilon={'unlimited' if unlimited else f'{total:.6g}'} at delta={delta:g}")
    print(f"spent      epsilon={spent:.6g} ({len(entries)} spends, composed)")
    print(f"remaining  epsilon={'unlimited' if unlimited else f'{max(0.0, total - spent):.6g}'}")
    print(f"chain      {hashes[-1]} (after the last spend; see 'The ledger file' in the guide)")
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.time, datetime.timezone.utc)
        when = when.strftime("%Y-%m-%d %H:%M:%S")
        params = ", ".join(f"{k}={v}" for k, v in e.parameters.items())
        print(f"{e.index:>4d}  {when} UTC  pid={e.pid:<7d} {e.label or '-'}  "
              f"{e.mechanism}({params})  "
              f"eps={e.epsilon:.4g} delta={e.delta:g}  chain={hashes[e.index + 1][:16]}")
    return 0


def _numba_line() -> str:
    # a seed reproduces a fit only where the extras match (the compiled samplers draw other
    # values), so the report says which side of that line this installation is on
    try:
        import numba
    except ImportError:
        return "not installed (the fast extra): NumPy paths, other seeded noise values than with it"
    return f"{numba.__version__} (the fast extra): compiled loops, other seeded noise values " \
           "than without it"


def _info(args) -> int:
    import platform

    import numpy
    import scipy
    import sklearn

    from . import __version__

    print(f"dptensor      {__version__}")
    print(f"python        {platform.python_version()} ({platform.machine()}, {platform.system()})")
    for mod in (numpy, scipy, sklearn):
        print(f"{mod.__name__:<13s} {mod.__version__}")
    print(f"numba         {_numba_line()}")
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            print(f"{pool.get('internal_api', '?'):<13s} {pool.get('version', '?')} "
                  f"threads={pool.get('num_threads')} arch={pool.get('architecture', '?')}")
    except ImportError:
        print("threadpoolctl not installed: BLAS details unavailable")
    return 0


def main(argv=None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="dptensor",
                                     description="Private and streaming spectral learning.")
    parser.add_argument("--version", action="version", version=f"dptensor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="fit the seven estimators on synthetic data; print a "
                                       "privacy-utility table")
    demo.add_argument("--quick", action="store_true", help="smaller problems, for a smoke test")
    demo.add_argument("--plot", default="dptensor_demo.png",
                      help="where to write the privacy-utility plot ('' for none)")
    demo.set_defaults(func=_demo)
    bench = sub.add_parser("bench", help="run the benchmark suite, writing benchmarks/results/")
    bench.add_argument("--quick", action="store_true", help="small sizes only")
    bench.add_argument("--only", nargs="+", metavar="NAME",
                       help="run only these benchmarks "
                            "(e.g. pca, completion: benchmarks/bench_NAME.py)")
    bench.set_defaults(func=_bench)
    ledger = sub.add_parser("ledger",
                            help="print a ledger file: budget, spent, remaining and every spend")
    ledger.add_argument("path", help="the SQLite file of a PrivacyAccountant(..., ledger=PATH)")
    ledger.add_argument("--upgrade", action="store_true",
                        help="first give a ledger of an older dptensor the hash chain that detects "
                             "edits, adopting its spends as they are now")
    ledger.set_defaults(func=_ledger)
    info = sub.add_parser("info", help="print versions, BLAS and thread settings")
    info.set_defaults(func=_info)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `dptensor ledger x.sqlite | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
