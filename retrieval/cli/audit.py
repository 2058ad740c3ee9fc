"""`retrieval audit`: near-duplicates, leaks, likely label errors, outliers and confused classes of a CSV's images.

Embeds a CSV's images with `--checkpoint` (torch) or `--model` (an ONNX export, no torch), or
reads the vectors and columns of an `index build` directory (`--index`, nothing embedded again),
builds the FAISS kNN graph and writes REPORT_DIR: one CSV per section (each row names its image
paths) and `index.html` with thumbnails (`retrieval.audit`). The near-duplicate threshold is the
model's stored match threshold when it has one (`evaluate --save-threshold`), else `--threshold`
or the default 0.95; leaks come from the copy check's ratio rule (`--leak-ratio`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_embedding_arguments, distance_ratio, existing_checkpoint
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError

if TYPE_CHECKING:
    import logging

    import numpy as np

    from retrieval.audit import Catalogue
    from retrieval.core.match_threshold import MatchThreshold
    from retrieval.inference.interface import Encoder

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
    parser.add_argument(
        "--threshold",
        type=_cosine,
        metavar="S",
        help="cosine at which two images are near-duplicates (default: the model's match threshold, else 0.95)",
    )
    parser.add_argument(
        "--leak-ratio",
        type=distance_ratio,
        metavar="R",
        help="a cross-split pair is a copy when its distance is at most R times the next image's (default 0.5, "
        "chosen on validation: docs/audit.md)",
    )
    parser.add_argument("-k", type=_at_least_one, default=10, help="neighbours per image in the kNN graph (default 10)")
    parser.add_argument("--no-hash", action="store_true", help="skip the exact-duplicate check (reads every file)")
    parser.add_argument("--show", type=_at_least_one, default=50, metavar="N", help="findings per page section")
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from retrieval.audit import AuditSettings, audit_embeddings, read_catalogue, threshold_of, write_report
    from retrieval.audit.leaks import MAX_RATIO
    from retrieval.audit.report import check_report_folder

    check_report_folder(args.out)  # before the model and the audit: a report that cannot be written costs nothing
    if args.index is None and args.checkpoint is None and args.model is None:
        raise UserError("--csv needs --checkpoint CKPT or --model EXPORT_DIR to embed its images (or give --index)")
    if args.index is not None and (args.checkpoint is not None or args.model is not None):
        raise UserError("--index audits the vectors it holds; drop --checkpoint/--model, or give --csv instead")
    catalogue = None if args.csv is None else read_catalogue(args.csv)  # before the model: a bad CSV fails at once
    if args.checkpoint is not None:
        existing_checkpoint(args.checkpoint)  # before PyTorch loads
    with showing_progress("audit") as log:
        if catalogue is None:
            catalogue, embeddings, stored_threshold = _indexed(args.index)
        else:
            catalogue, embeddings, stored_threshold = _embedded(args, catalogue, log)
        for note in catalogue.missing:
            log.info(note)
        threshold, source = threshold_of(stored_threshold, args.threshold)
        settings = AuditSettings(
            k=args.k,
            threshold=threshold,
            threshold_source=source,
            hash_files=not args.no_hash,
            leak_ratio=MAX_RATIO if args.leak_ratio is None else args.leak_ratio,
        )
        findings = audit_embeddings(embeddings, catalogue, settings)
        name = (args.csv or args.index).name
        summary = write_report(findings, embeddings, args.out, args.show, f"audit of {name}")
    print(f"report: {args.out / 'index.html'}")
    print(f"near-duplicate threshold: {threshold:.4f} ({source})")
    for key in ("exact_duplicate_groups", "near_duplicate_groups", "leaked_rows", "label_issues", "outliers"):
        if getattr(summary, key) is not None:
            print(f"{key.replace('_', ' ')}: {getattr(summary, key)}")
    share = summary.test_nearest_neighbour_leak_share
    if share is not None and share == share:  # NaN: no test rows
        print(f"test queries whose nearest neighbour is a leak: {share:.4f}")
    return 0


def _indexed(directory: Path) -> tuple[Catalogue, np.ndarray, MatchThreshold | None]:
    """The catalogue and vectors of an index directory; no model, so no stored match threshold."""
    from retrieval.audit.catalogue import index_catalogue
    from retrieval.index import SearchIndex

    catalogue, vectors = index_catalogue(SearchIndex.load(directory), directory)
    return catalogue, vectors, None


def _embedded(
    args: argparse.Namespace, catalogue: Catalogue, log: logging.Logger
) -> tuple[Catalogue, np.ndarray, MatchThreshold | None]:
    """The CSV's readable images and their embeddings by the model, with its stored match threshold."""
    from retrieval.inference.sources import report_unreadable

    encoder = _encoder(args)
    log.info("embedding %d images", len(catalogue))
    embedded = encoder.embed_files(catalogue.paths, args.batch_size, args.num_workers)
    report_unreadable(embedded.failures)
    if len(embedded.positions) < 2:
        raise UserError(f"fewer than 2 readable images in {args.csv}; an audit compares images with each other")
    return catalogue.subset(embedded.positions), embedded.embeddings, encoder.match_threshold


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
