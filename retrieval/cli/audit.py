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
    import logging

    import numpy as np

    from retrieval.audit.catalogue import Catalogue
    from retrieval.audit.trust import Selection
    from retrieval.config import AuditConfig
    from retrieval.core.match_threshold import MatchThreshold
    from retrieval.export.encoder_choice import EncoderChoice
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
    add_config_arguments(parser, "the audit section's defaults; other sections are not read", "audit.k=20")
    # Shorthands for keys of the config's audit section (`retrieval.config.AuditConfig` checks every value).
    parser.add_argument("--threshold", metavar="S", help="near-duplicate cosine: --set audit.threshold=S")
    parser.add_argument("--leak-ratio", metavar="R", help="copy check's distance ratio: --set audit.leak_ratio=R")
    parser.add_argument("-k", help="neighbours per image in the kNN graph: --set audit.k=K")
    parser.add_argument("--show", metavar="N", help="findings per page section: --set audit.show=N")
    parser.add_argument("--no-hash", action="store_true", help="no exact-duplicate check (no file read again)")
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from retrieval.audit.catalogue import read_catalogue
    from retrieval.audit.report import check_report_folder, write_report
    from retrieval.export.encoder_choice import EncoderChoice

    check_report_folder(args.out)  # before the model and the audit: a report that cannot be written costs nothing
    choice = EncoderChoice(checkpoint=args.checkpoint, model=args.model, device=args.device)
    if args.index is None and not choice.chosen:
        raise UserError("--csv needs --checkpoint CKPT or --model EXPORT_DIR to embed its images (or give --index)")
    if args.index is not None and choice.chosen:
        raise UserError("--index audits the vectors it holds; drop --checkpoint/--model, or give --csv instead")
    settings = _settings(args)  # before the model too: a bad key or value costs nothing
    catalogue = None if args.csv is None else read_catalogue(args.csv)  # before the model: a bad CSV fails at once
    choice.check()  # before PyTorch loads: a checkpoint that is not there
    from retrieval.audit.findings import audit_embeddings  # cleanlab, scikit-learn: after every check above

    with showing_progress("audit") as log:
        selection = None  # the checkpoint's model-selection record (no checkpoint: none)
        if catalogue is None:
            catalogue, embeddings, stored_threshold = _indexed(args.index)
        else:
            encoder, selection = _encoder(choice)
            catalogue, embeddings = _embedded(args, encoder, catalogue, log)
            stored_threshold = encoder.match_threshold
        for note in catalogue.missing:
            log.info(note)
        findings = audit_embeddings(embeddings, catalogue, settings, stored=stored_threshold, selection=selection)
        name = (args.csv or args.index).name
        summary = write_report(findings, embeddings, args.out, settings.show, f"audit of {name}")
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


def _indexed(directory: Path) -> tuple[Catalogue, np.ndarray, MatchThreshold | None]:
    """The catalogue and vectors of an index directory; no model, so no stored match threshold."""
    from retrieval.audit.catalogue import index_catalogue
    from retrieval.index import SearchIndex

    catalogue, vectors = index_catalogue(SearchIndex.load(directory), directory)
    return catalogue, vectors, None


def _embedded(
    args: argparse.Namespace, encoder: Encoder, catalogue: Catalogue, log: logging.Logger
) -> tuple[Catalogue, np.ndarray]:
    """The CSV's readable images and their embeddings by the model."""
    from retrieval.inference.sources import report_unreadable

    log.info("embedding %d images", len(catalogue))
    embedded = encoder.embed_files(catalogue.paths, args.batch_size, args.num_workers)
    report_unreadable(embedded.failures)
    if len(embedded.positions) < 2:
        raise UserError(f"fewer than 2 readable images in {args.csv}; an audit compares images with each other")
    return catalogue.subset(embedded.positions), embedded.embeddings


def _encoder(choice: EncoderChoice) -> tuple[Encoder, Selection | None]:
    """The chosen model's encoder, and the checkpoint's model-selection record (an export keeps none)."""
    from retrieval.export.encoder_choice import open_encoder

    if choice.checkpoint is None:
        return open_encoder(choice), None
    from retrieval.audit.trust import Selection
    from retrieval.checkpoint import Checkpoint

    checkpoint = Checkpoint.read(choice.checkpoint)  # read once: for its selection record and its model
    selection = Selection(checkpoint.config().train.select_on, checkpoint.best_score, checkpoint.best_epoch)
    return open_encoder(choice, checkpoint), selection


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
