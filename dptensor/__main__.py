"""Command line: ``python -m dptensor {demo,bench,info}``."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo(quick=args.quick, plot=args.plot)


def _bench(args) -> int:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "run_all.py").exists():
        print("the benchmark suite ships with the source checkout (benchmarks/ beside dptensor/); "
              "run this command from a clone of the repository", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    from benchmarks.run_all import main as bench_main

    return bench_main(["--quick"] if args.quick else [])


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
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            print(f"{pool.get('internal_api', '?'):<13s} {pool.get('version', '?')} "
                  f"threads={pool.get('num_threads')} arch={pool.get('architecture', '?')}")
    except ImportError:
        print("threadpoolctl not installed: BLAS details unavailable")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dptensor",
                                     description="Private and streaming spectral learning.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="fit every estimator on synthetic data; print a privacy-utility table")
    demo.add_argument("--quick", action="store_true", help="smaller problems, for a smoke test")
    demo.add_argument("--plot", default="dptensor_demo.png",
                      help="where to write the privacy-utility plot ('' for none)")
    demo.set_defaults(func=_demo)
    bench = sub.add_parser("bench", help="run the benchmark suite, writing benchmarks/results/")
    bench.add_argument("--quick", action="store_true", help="small sizes only")
    bench.set_defaults(func=_bench)
    info = sub.add_parser("info", help="print versions, BLAS and thread settings")
    info.set_defaults(func=_info)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
