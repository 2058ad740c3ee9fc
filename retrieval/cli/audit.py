"""`retrieval audit`: near-duplicates, leaks, likely label errors, outliers and confused classes of a CSV's images.

Embeds the images with `--checkpoint` (torch) or `--model` (an ONNX export, no torch), builds
the FAISS kNN graph and writes REPORT_DIR: one CSV per section (each row names its image paths)
and `index.html` with thumbnails (`retrieval.audit`). The near-duplicate threshold is the
model's stored match threshold when it has one (`evaluate --save-threshold`), else `--threshold`
or the default 0.95.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_embedding_arguments
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError

if TYPE_CHECKING:
    from retrieval.inference.interface import Encoder

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "audit",
        help="find duplicates, split leaks, likely label errors and outliers with a trained embedding",
        description="Embed a CSV's images (path[,label,split]) and write REPORT_DIR: exact_duplicates.csv, "
        "near_duplicates.csv, leaks.csv, label_issues.csv, outliers.csv, confused_classes.csv, summary.json and "
        "index.html. Without labels only duplicates, leaks and outliers; without a split column no leaks. "
        "Any CSV of the report is an exclusion list: train --set data.exclude=REPORT_DIR/label_issues.csv, "
        "index build --exclude REPORT_DIR/near_duplicates.csv.",
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", type=Path, metavar="CKPT", help="a run's checkpoints/best.pt")
    model.add_argument("--model", type=Path, metavar="EXPORT_DIR", help="a `retrieval export` directory (onnxruntime)")
    parser.add_argument("--csv", type=Path, required=True, metavar="FILE", help="images: path[,label,split,...]")
    parser.add_argument("--out", type=Path, required=True, metavar="REPORT_DIR", help="report folder to write")
    parser.add_argument(
        "--threshold",
        type=_cosine,
        metavar="S",
        help="cosine at which two images are near-duplicates (default: the model's match threshold, else 0.95)",
    )
    parser.add_argument("-k", type=_at_least_one, default=10, help="neighbours per image in the kNN graph (default 10)")
    parser.add_argument("--no-hash", action="store_true", help="skip the exact-duplicate check (reads every file)")
    parser.add_argument("--show", type=_at_least_one, default=50, metavar="N", help="findings per page section")
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from retrieval.audit import AuditSettings, audit_embeddings, read_catalogue, threshold_of, write_report
    from retrieval.inference.sources import report_unreadable

    catalogue = read_catalogue(args.csv)  # before the model loads: a bad CSV is refused at once
    with showing_progress("audit") as log:
        for note in catalogue.missing:
            log.info(note)
        encoder = _encoder(args)
        threshold, source = threshold_of(encoder.match_threshold, args.threshold)
        log.info("embedding %d images", len(catalogue))
        embedded = encoder.embed_files(catalogue.paths, args.batch_size, args.num_workers)
        report_unreadable(embedded.failures)
        if len(embedded.positions) < 2:
            raise UserError(f"fewer than 2 readable images in {args.csv}; an audit compares images with each other")
        catalogue = catalogue.subset(embedded.positions)
        settings = AuditSettings(k=args.k, threshold=threshold, threshold_source=source, hash_files=not args.no_hash)
        findings = audit_embeddings(embedded.embeddings, catalogue, settings)
        summary = write_report(findings, embedded.embeddings, args.out, args.show, f"audit of {args.csv.name}")
    print(f"report: {args.out / 'index.html'}")
    print(f"near-duplicate threshold: {threshold:.4f} ({source})")
    for key in ("exact_duplicate_groups", "near_duplicate_groups", "leaked_rows", "label_issues", "outliers"):
        if getattr(summary, key) is not None:
            print(f"{key.replace('_', ' ')}: {getattr(summary, key)}")
    share = summary.test_nearest_neighbour_leak_share
    if share is not None and share == share:  # NaN: no test rows
        print(f"test queries whose nearest neighbour is a leak: {share:.4f}")
    return 0


def _encoder(args: argparse.Namespace) -> Encoder:
    """The encoder of `--model` (onnxruntime) or `--checkpoint` (torch, imported only then)."""
    if args.model is not None:
        from retrieval.export.onnx_encoder import OnnxEncoder

        return OnnxEncoder.from_export(args.model, device=args.device)
    from retrieval.inference.image_encoder import ImageEncoder

    return ImageEncoder.from_checkpoint(args.checkpoint, device=args.device)


def _cosine(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"takes a cosine in [-1, 1], like 0.95, got {text!r}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes an integer >= 1, got {text!r}")
    return value
