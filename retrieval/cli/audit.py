"""`retrieval audit`: near-duplicates, leaks, likely label errors, outliers and confused classes of a CSV's images.

Embeds a CSV's images with `--checkpoint` (torch) or `--model` (an ONNX export, no torch), or
reads the vectors and columns of an `index build` directory (`--index`, nothing embedded again),
builds the FAISS kNN graph and writes REPORT_DIR: one CSV per section (each row names its image
paths) and `index.html` with thumbnails (`retrieval.audit`). The near-duplicate threshold is
`--threshold`, else chosen on the catalogue's different-label pairs (`retrieval.audit.threshold`);
leaks come from the copy check's ratio rule (`--leak-ratio`). Settings are the config's `audit:`
section (`--config`, `--set audit.KEY=VALUE`); the flags are shorthands for its keys.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_config_arguments, add_embedding_arguments
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError

if TYPE_CHECKING:
    from retrieval.config import AuditConfig

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "audit",
        help="find duplicates, split leaks, likely label errors and outliers with a trained embedding",
        description="Embed a CSV's images (path[,label,split]) and write REPORT_DIR: exact_duplicates.csv, "
        "near_duplicates.csv, leaks.csv, label_issues.csv, outliers.csv, confused_classes.csv, summary.json and "
        "index.html. Without labels only duplicates, leaks and outliers; without a split column no leaks. "
        "--index INDEX_DIR audits an index build directory's vectors and columns instead, without a model. "
        "Any CSV of the report is an exclusion list: train --set data.exclude=REPORT_DIR/label_issues.csv, "
        "index build --exclude REPORT_DIR/near_duplicates.csv.",
    )
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--checkpoint", type=Path, metavar="CKPT", help="a run's checkpoints/best.pt")
    model.add_argument("--model", type=Path, metavar="EXPORT_DIR", help="a `retrieval export` directory (onnxruntime)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--csv", type=Path, metavar="FILE", help="images: path[,label,split,...], with a model")
    source.add_argument(
        "--index",
        type=Path,
        metavar="INDEX_DIR",
        help="an `index build` directory: audit its vectors and columns (path, label, split) without a model",
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="REPORT_DIR",
        help="report folder to write: a new or empty folder, or an earlier report (replaced whole)",
    )
    add_config_arguments(parser, "the audit section's defaults; other sections are not read", "audit.k=20")
    # Shorthands for keys of the config's audit section (`retrieval.config.AuditConfig` checks every value).
    parser.add_argument("--threshold", metavar="S", help="near-duplicate cosine: --set audit.threshold=S")
    parser.add_argument("--leak-ratio", metavar="R", help="copy check's distance ratio: --set audit.leak_ratio=R")
    parser.add_argument("-k", help="neighbours per image in the kNN graph: --set audit.k=K")
    parser.add_argument("--show", metavar="N", help="findings per page section: --set audit.show=N")
    parser.add_argument("--no-hash", action="store_true", help="no exact-duplicate check (no file read again)")
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from retrieval.export.audit_run import AuditRequest, run_audit
    from retrieval.export.encoder_choice import EncoderChoice

    request = AuditRequest(
        out=args.out,
        settings=_settings(args),  # a bad key or value before anything is read
        csv=args.csv,
        index=args.index,
        encoder=EncoderChoice(checkpoint=args.checkpoint, model=args.model, device=args.device),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    with showing_progress("audit"):
        summary = run_audit(request)
    print(f"report: {args.out / 'index.html'}")
    if summary.threshold is not None:
        print(f"near-duplicate threshold: {summary.threshold:.4f} ({summary.threshold_source})")
    keys = ("exact_duplicate_groups", "near_duplicate_groups", "leaked_rows", "recoloured_leaks", "label_issues")
    for key in (*keys, "outliers"):
        if getattr(summary, key) is not None:
            print(f"{key.replace('_', ' ')}: {getattr(summary, key)}")
    share = summary.test_nearest_neighbour_leak_share
    if share is not None and share == share:  # NaN: no test rows
        print(f"test queries whose nearest neighbour is a leak: {share:.4f}")
    for warning in summary.warnings:
        print(warning)
    return 0


def _settings(args: argparse.Namespace) -> AuditConfig:
    """The config's audit section: `--config`, then `--set`, then the shorthand flags, which set the same keys."""
    from retrieval.config import load_audit_config

    flags = {"threshold": args.threshold, "leak_ratio": args.leak_ratio, "k": args.k, "show": args.show}
    shorthands = [f"audit.{key}={value}" for key, value in flags.items() if value is not None]
    settings = load_audit_config(args.config, [*args.overrides, *shorthands])
    if args.no_hash:
        checks = [check for check in settings.checks if check != "exact_duplicates"]
        if not checks:
            raise UserError("--no-hash leaves audit.checks with no check to run; add one (--set audit.checks=...)")
        settings = settings.model_copy(update={"checks": checks})
    return settings
