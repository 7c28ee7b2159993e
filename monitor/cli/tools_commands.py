"""``monitor demo`` and ``monitor bench``."""

from __future__ import annotations

import argparse
from typing import Any

from monitor.settings import Settings


def add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on embedded defaults and real bundled data")
    p.add_argument("--out", default="demo-out", help="folder for the generated stream and plot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--serve", action="store_true", help="keep the API up on the demo database")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.demo import run_demo

    return run_demo(args.out, settings, seed=args.seed, serve=args.serve, as_json=args.json)


def add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="throughput and statistical benchmarks")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="reduced sizes (seconds)")
    p.set_defaults(handler=_cmd_bench)


def _cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.ops.benchmarks import run_benchmarks

    return run_benchmarks(settings, quick=args.quick, as_json=args.json)
