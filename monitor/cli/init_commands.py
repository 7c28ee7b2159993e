"""``monitor init`` (a stream's files from a held-out CSV / JSONL file) and ``monitor events``
(a predictions file as wire-format events): the front door (:mod:`monitor.frontdoor`) on files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from monitor.cli.common import UserError
from monitor.settings import Settings


def add_init(sub: Any) -> None:
    p = sub.add_parser(
        "init", help="write a stream's calibration and configuration from held-out data",
        description="Reads held-out labeled rows (CSV with a header, or JSONL objects): every "
        "column but the target, the prediction / probability columns, --ts-column and "
        "--id-column is a "
        "feature (or name them with --features). Class names in the target are mapped to "
        "class indexes, the mapping written into the configuration (classes:).",
    )
    p.add_argument("--calibration", required=True, metavar="FILE",
                   help="held-out rows the model never trained on (.csv or .jsonl)")
    _columns(p)
    p.add_argument("--features", type=_names, metavar="A,B,...",
                   help="feature columns in order (default: every other column)")
    p.add_argument("--classes", type=_names, metavar="A,B,...",
                   help="classes in the order of the probability columns (default: the "
                   "sorted distinct labels)")
    p.add_argument("--task", choices=("classification", "regression"),
                   help="default: classification for probability columns or class names")
    p.add_argument("--id-column", metavar="COLUMN", help="event ids (not a feature)")
    p.add_argument("--name", default="my-stream", help="stream name (default: my-stream)")
    p.add_argument("--out", default="monitor-stream", metavar="DIR",
                   help="folder written (default: monitor-stream)")
    p.set_defaults(handler=_cmd_init)
    e = sub.add_parser(
        "events", help="write a predictions file (CSV / JSONL) as events of a stream",
        description="Each row becomes a prediction event of the stream CONFIG describes (its "
        "features are the calibration's columns); with --target, its label too: inline, or "
        "a label event --label-delay rows later. Class names are mapped through the "
        "configuration's classes.",
    )
    e.add_argument("--from", dest="source", required=True, metavar="FILE",
                   help="rows of predictions (.csv or .jsonl)")
    e.add_argument("--config", required=True, help="the stream configuration (monitor init)")
    _columns(e, target_required=False)
    e.add_argument("--id-column", metavar="COLUMN", help="event ids (default: e-000000, ...)")
    e.add_argument("--label-delay", type=int, metavar="ROWS",
                   help="write each label as its own event this many rows after its "
                   "prediction (default: inline)")
    e.add_argument("--out", metavar="FILE",
                   help="events file written (default: NAME_events.jsonl beside CONFIG)")
    e.set_defaults(handler=_cmd_events)


def _columns(p: argparse.ArgumentParser, target_required: bool = True) -> None:
    p.add_argument("--target", required=target_required, metavar="COLUMN",
                   help="the true labels" + ("" if target_required else " (optional)"))
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--prediction", metavar="COLUMN",
                       help="the model's predictions (numbers; class names: one-hot)")
    given.add_argument("--proba-columns", type=_names, metavar="P0,P1,...",
                       help="the predicted probabilities, one column per class, in order")
    p.add_argument("--ts-column", metavar="COLUMN",
                   help="event times (ISO 8601 or epoch numbers)")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give comma-separated column names")
    return names


def _cmd_init(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.frontdoor import FrontDoorError, stream_from

    try:
        files = stream_from(
            args.calibration, target=args.target, prediction=args.prediction,
            proba=args.proba_columns, features=args.features, name=args.name, task=args.task,
            classes=args.classes, ts=args.ts_column, ids=args.id_column, out_dir=args.out,
        )
    except FrontDoorError as exc:
        raise UserError(f"{args.calibration}: {exc}") from None
    print(f"wrote {files.config_path} ({files.task}, {len(files.features)} features"
          + (f", classes {list(files.classes)}" if files.classes else "") + ")")
    print(f"wrote {files.calibration_path} ({files.n_calibration} calibration rows)")
    for warning in files.warnings:
        print(f"warning: {warning}")
    columns = (f"--prediction {args.prediction}" if args.prediction
               else f"--proba-columns {','.join(args.proba_columns)}")
    ts = f" --ts-column {args.ts_column}" if args.ts_column else ""
    ts += f" --id-column {args.id_column}" if args.id_column else ""
    events = Path(args.out) / f"{files.name}_events.jsonl"
    print("next:")
    print(f"  monitor events --config {files.config_path} --from PREDICTIONS.csv "
          f"--target {args.target} {columns}{ts} --out {events}")
    for command in files.commands(str(events)):
        print(f"  {command}")
    return 0


def _cmd_events(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.frontdoor import FrontDoorError, to_events

    try:
        path = to_events(
            args.source, args.config, args.out, target=args.target, prediction=args.prediction,
            proba=args.proba_columns, ts=args.ts_column, ids=args.id_column,
            label_delay=args.label_delay,
        )
    except FrontDoorError as exc:
        raise UserError(f"{args.source}: {exc}") from None
    with path.open("rb") as fh:
        n = sum(1 for _ in fh)
    print(f"wrote {path} ({n} events)")
    print(f"next:\n  monitor run --config {args.config} --source file:{path}")
    return 0
