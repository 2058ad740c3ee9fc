"""`retrieval evaluate`: Recall@K / MAP@R of a checkpoint on the test split of its (or another) dataset.

`--backbone NAME [--weights FILE]` scores a timm model without training instead (its pooled
features, `retrieval.inference.backbone`) on the data of `--config` / `--set` (the digits demo by default).

On closed-set data it also reports results per training-frequency group and, on request, scores
the proxy classifier (`--classification DIR`), calibrates it (`--calibrate`), measures pair-level
verification with match thresholds (`--verification`, `--save-threshold`) and draws a grid of
queries with their results (`--grid FILE.png`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from retrieval.cli._common import add_config_arguments, existing_checkpoint, output_file, with_folder
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError
from retrieval.report.grid_modes import GRID_MODES
from retrieval.runtime.files import write_text

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from retrieval.checkpoint import Checkpoint
    from retrieval.config import Config
    from retrieval.data import EvalSplit, RetrievalData
    from retrieval.evaluate.proxy_classifier import ProxyClassifier
    from retrieval.models import Embedder

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("evaluate", help="measure Recall@K and MAP@R of a checkpoint")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, metavar="CKPT", help="a run's checkpoints/best.pt")
    source.add_argument(
        "--backbone", metavar="NAME", help="a timm model without training: its pooled features, L2-normalized"
    )
    parser.add_argument("--weights", type=Path, metavar="FILE", help="--backbone's .safetensors/.pth state dict")
    add_config_arguments(parser)
    parser.add_argument(
        "--json",
        type=output_file,
        metavar="FILE",
        help="also write the metrics and their 95%% intervals to FILE as JSON",
    )
    parser.add_argument(
        "--per-query",
        type=output_file,
        metavar="FILE.npz",
        help="also write every query's Recall@1 and AP@R to FILE.npz, for `retrieval compare`",
    )
    parser.add_argument("--grid", type=output_file, metavar="FILE.png", help="draw queries with their top-5 results")
    parser.add_argument(
        "--rerank",
        metavar="SPEC",
        help="re-rank results: qe | dba | kreciprocal (parameters chosen on validation), or e.g. qe:k=2,alpha=3",
    )
    parser.add_argument(
        "--grid-queries", choices=GRID_MODES, default="worst", help="which queries --grid draws (default: worst)"
    )
    parser.add_argument("--grid-rows", type=_positive_int, default=8, metavar="N", help="queries in the grid")
    parser.add_argument(
        "--classification",
        type=Path,
        metavar="DIR",
        help="closed-set data: score the proxy classifier (PR curves, confusion, ECE, Brier) into DIR",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="closed-set data: fit a softmax temperature on the validation split; ECE and Brier before/after",
    )
    parser.add_argument(
        "--calibration-share",
        type=_share,
        default=1.0,
        metavar="F",
        help="share of the validation split used to fit the temperature (default: 1, all of it)",
    )
    parser.add_argument(
        "--verification",
        action="store_true",
        help="pair-level verification: ROC AUC, and FNMR at FMR 1e-2/1e-3/1e-4 with thresholds chosen on the "
        "validation split, applied once to test",
    )
    parser.add_argument(
        "--save-threshold",
        type=_fmr,
        metavar="FMR",
        help="store the threshold of this false match rate (e.g. 1e-3; implies --verification) in the checkpoint; "
        "`index build` copies it, `index query --min-score stored` uses it",
    )
    parser.add_argument(
        "--exclude-leaks",
        action="store_true",
        help="embed the train/val images too and score without the test images that are near-copies of one "
        "(identical files are always checked, with a warning)",
    )
    parser.add_argument(
        "--leak-threshold",
        type=float,
        metavar="S",
        help="cosine at which --exclude-leaks counts a test image as a copy (default: 0.95, as retrieval audit)",
    )


def run(args: argparse.Namespace) -> int:
    """Score the model; a missing checkpoint or a config typo fails before PyTorch loads."""
    from retrieval.config import check_config

    if args.checkpoint is not None:
        existing_checkpoint(args.checkpoint)
    check_config(args.config, args.overrides)
    with showing_progress("evaluate"):  # in a log, where no bar shows, a line every so often while embedding
        return _evaluate(args)


def _evaluate(args: argparse.Namespace) -> int:
    from retrieval.data import build_data
    from retrieval.evaluate.evaluator import embed_dataset, format_metrics, score_split
    from retrieval.evaluate.match_thresholds import check_threshold_request
    from retrieval.evaluate.rerank_choice import choose_rerank
    from retrieval.evaluate.uncertainty import QueryValues, format_uncertainty, save_query_values, uncertainty_summary
    from retrieval.inference.forward import Precision
    from retrieval.metrics import GROUP_NAMES, frequency_groups
    from retrieval.runtime.device import place_model, resolve_device

    checkpoint, config = _model_and_config(args)
    device = resolve_device(config.train.device)
    precision = Precision.for_run(config.train, device)
    model = checkpoint.embedder(config.model.flip_average)  # `--set model.flip_average` applies
    place_model(model, device, precision.channels_last)  # moves the module in place
    data = build_data(config.data, model.data_config(), config.augment, checkpoint.model_config.in_chans)

    embedded: dict[int, np.ndarray] = {}

    def embed_data(dataset: Dataset) -> np.ndarray:
        return embed_dataset(
            model,
            dataset,
            config.data.eval_batch_size,
            device,
            num_workers=config.data.num_workers,
            amp_dtype=precision.amp_dtype,
            channels_last=precision.channels_last,
            pin_memory=config.data.pin_memory and device.type == "cuda",
        )

    def embed(split: EvalSplit) -> np.ndarray:
        """The split's embeddings, computed once whichever options (calibration, verification, re-ranking) ask."""
        if id(split) not in embedded:
            embedded[id(split)] = embed_data(split.dataset)
        return embedded[id(split)]

    classifier = _classifier_for(checkpoint, config, data)
    _check_requests(args, classifier, data)  # before any image is embedded
    check_threshold_request(args.save_threshold, data, config.train.select_on_test)
    embeddings = embed(data.test)
    class_groups = frequency_groups(data.train_labels, data.num_classes)
    rerank = None
    if args.rerank:
        rerank = choose_rerank(args.rerank, None if data.val is None else (embed(data.val), data.val))
    scored_test, leak_warning = _leak_check(args, config, data, embeddings, embed_data)
    metrics, scores = score_split(
        embeddings,
        scored_test,
        class_groups,
        None if classifier is None else classifier.proxies,
        None if rerank is None else rerank.reranker,
    )
    values = QueryValues.from_scores(scores)
    uncertainty = uncertainty_summary(values)
    if args.per_query:
        save_query_values(with_folder(args.per_query), values)
    grouped = f"{GROUP_NAMES[0]}/recall@1" in metrics
    notes = [_group_line(metrics, _trained_elsewhere(args, checkpoint, config))] if grouped else []
    extras: dict[str, Any] = {"uncertainty": uncertainty.as_dict()}
    if rerank is not None:
        notes.append(rerank.line())
        extras["rerank"] = rerank.record()
    calibrated = None
    if args.calibrate:
        assert classifier is not None and data.val is not None  # _check_requests refused the request otherwise
        calibrated = extras["calibration"] = _calibration(args, embed, embeddings, data.test, data.val, classifier)
        notes.append(_calibration_line(calibrated))
    if args.classification:
        assert classifier is not None  # _check_requests refused the request otherwise
        report = _classification(args.classification, embeddings, data.test, classifier, calibrated)
        extras["classification"] = {"directory": str(args.classification), "accuracy": report["accuracy"]}
        notes.append(f"classification: accuracy {report['accuracy']:.4f}, written to {args.classification}")
    if args.verification or args.save_threshold is not None:
        notes.extend(_verification(args, checkpoint, config, data, embeddings, embed, extras))
    if args.grid:
        _grid(args, embeddings, data.test, model)
        notes.append(f"grid of {args.grid_queries} queries written to {args.grid}")
    if leak_warning:
        print(leak_warning, file=sys.stderr)
        extras["leaks"] = {"warning": leak_warning, "excluded": bool(args.exclude_leaks)}
    if args.json:
        write_text(with_folder(args.json), json.dumps({**metrics, **extras}, indent=2) + "\n")
    print("\n".join([*notes, format_uncertainty(uncertainty), format_metrics(metrics)]))
    return 0


def _leak_check(
    args: argparse.Namespace,
    config: Config,
    data: RetrievalData,
    embeddings: np.ndarray,
    embed_data: Callable[[Dataset], np.ndarray],
) -> tuple[EvalSplit, str | None]:
    """The test split to score (without near-copies of train/val images with --exclude-leaks) and a warning line."""
    from retrieval.evaluate.leak_check import identical_test_rows, near_copy_test_rows, warning_line, without_rows

    if args.leak_threshold is not None and not args.exclude_leaks:
        raise UserError("--leak-threshold sets the cosine of --exclude-leaks; add --exclude-leaks")
    if not args.exclude_leaks:
        identical = identical_test_rows(config.data)
        if identical is None or not identical.any():
            return data.test, None
        return data.test, warning_line(identical, "identical files to", excluded=False)
    threshold = 0.95 if args.leak_threshold is None else args.leak_threshold
    leaked = near_copy_test_rows(config.data, data.test, embeddings, embed_data, threshold)
    if leaked is None:
        raise UserError(f"--exclude-leaks compares image files; data.name {config.data.name} has none")
    if not leaked.any():
        return data.test, None
    return without_rows(data.test, leaked), warning_line(leaked, f"near-copies (cosine >= {threshold}) of", True)


def _verification(
    args: argparse.Namespace,
    checkpoint: Checkpoint,
    config: Config,
    data: RetrievalData,
    embeddings: np.ndarray,
    embed: Callable[[EvalSplit], np.ndarray],
    extras: dict[str, Any],
) -> list[str]:
    """Verification into `extras`, the threshold of `--save-threshold` into the checkpoint; the lines to print."""
    from retrieval.evaluate.match_thresholds import (
        evaluate_verification,
        fmr_text,
        threshold_record,
        verification_lines,
    )
    from retrieval.metrics.verification import FMR_TARGETS

    fmrs = sorted({*FMR_TARGETS, *([args.save_threshold] if args.save_threshold is not None else [])}, reverse=True)
    report = extras["verification"] = evaluate_verification(embeddings, data, config.train.select_on_test, embed, fmrs)
    lines = verification_lines(report)
    if args.save_threshold is not None:
        record = threshold_record(report, args.save_threshold, config.data.name)
        dataclasses.replace(checkpoint, match_threshold=record).save(args.checkpoint)
        lines.append(
            f"threshold {record.score:.4f} (FMR {fmr_text(args.save_threshold)}) saved to {args.checkpoint}; "
            "indexes built from it before have its old sha256: build them again to use it"
        )
    return lines


def _model_and_config(args: argparse.Namespace) -> tuple[Checkpoint, Config]:
    """The `--checkpoint` with its run's config, or the `--backbone` on the config of `--config` / `--set`."""
    from retrieval.checkpoint import Checkpoint
    from retrieval.config import load_config
    from retrieval.inference.backbone import backbone_checkpoint, backbone_config

    if args.backbone is not None and args.save_threshold is not None:
        raise UserError("--save-threshold writes into a checkpoint; a --backbone has none: evaluate a trained run")
    if args.backbone is None:
        if args.weights is not None:
            raise UserError("--weights gives the weights of --backbone NAME; a checkpoint holds its own")
        checkpoint = Checkpoint.load(args.checkpoint)
        return checkpoint, checkpoint.config(args.config, args.overrides)
    config = backbone_config(load_config(args.config, args.overrides), args.backbone, args.weights)
    return backbone_checkpoint(config), config


def _classifier_for(checkpoint: Checkpoint, config: Config, data: RetrievalData) -> ProxyClassifier | None:
    """The proxy classifier when its classes are this data's training classes, else None."""
    from retrieval.evaluate.proxy_classifier import load_proxy_classifier

    classifier = load_proxy_classifier(checkpoint, config)
    if classifier is None or len(classifier.proxies) != data.num_classes:
        return None
    return classifier


def _check_requests(args: argparse.Namespace, classifier: ProxyClassifier | None, data: RetrievalData) -> None:
    """Refuse --classification / --calibrate on data or checkpoints they cannot apply to, and a bad --rerank."""
    from retrieval.core.rerank import parse_rerank
    from retrieval.evaluate.proxy_classifier import closed_set_rows

    if args.rerank:
        parse_rerank(args.rerank)
    for flag, asked in (("--classification", args.classification), ("--calibrate", args.calibrate)):
        if not asked:
            continue
        if classifier is None:
            raise UserError(
                f"{flag} needs a checkpoint trained with a proxy loss on this data's training classes (its proxies "
                "are the classifier); pair losses (circle, triplet, multi_similarity, ...) and soft_triple's several "
                "centres a class have none, another dataset's proxies name other classes"
            )
        closed_set_rows(data.test, flag)
    if args.calibrate:
        if data.val is None:
            raise UserError(
                "--calibrate fits the temperature on the validation split, and this data has none; set "
                "data.val_fraction (e.g. --set data.val_fraction=0.2, as in training) or add split=val rows"
            )
        closed_set_rows(data.val, "--calibrate (validation split)")


def _calibration(
    args: argparse.Namespace,
    embed: Callable[[EvalSplit], np.ndarray],
    test_embeddings: np.ndarray,
    test: EvalSplit,
    val: EvalSplit,
    classifier: ProxyClassifier,
) -> dict[str, Any]:
    """Temperature fitted on (a share of) the validation split, scored on the closed-set test images."""
    from retrieval.evaluate.proxy_classifier import calibrate

    val_rows, _ = _closed_set(val, "--calibrate (validation split)")
    if args.calibration_share < 1:
        count = max(1, round(args.calibration_share * len(val_rows)))
        val_rows = np.sort(np.random.default_rng(0).choice(val_rows, size=count, replace=False))
    val_embeddings = embed(val)
    test_rows, test_classes = _closed_set(test, "--calibrate")
    result = calibrate(
        classifier,
        (val_embeddings[val_rows], np.asarray(val.train_class)[val_rows]),
        (test_embeddings[test_rows], test_classes),
    )
    return {**result, "calibration_share": args.calibration_share}


def _closed_set(split: EvalSplit, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `split` whose class trained, and those classes (`closed_set_rows` refuses a split without any)."""
    from retrieval.evaluate.proxy_classifier import closed_set_rows

    rows = closed_set_rows(split, what)
    return rows, np.asarray(split.train_class)[rows]


def _classification(
    out_dir: Path,
    embeddings: np.ndarray,
    test: EvalSplit,
    classifier: ProxyClassifier,
    calibrated: dict[str, Any] | None,
) -> dict[str, Any]:
    from retrieval.metrics.calibration import temperature_softmax
    from retrieval.metrics.classification import calibration_summary, classification_report
    from retrieval.report.classification_plots import plot_classification

    rows, targets = _closed_set(test, "--classification")
    probabilities = temperature_softmax(classifier.logits(embeddings[rows]))
    report = {"logit_scale": classifier.scale, **classification_report(probabilities, targets)}
    after = None
    if calibrated is not None:
        scaled = temperature_softmax(classifier.logits(embeddings[rows]), calibrated["temperature"])
        after = calibration_summary(scaled, targets)
        report["calibrated"] = {"temperature": calibrated["temperature"], **after}
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_classification(report, out_dir, after)
    write_text(out_dir / "classification.json", json.dumps(report) + "\n")
    return report


def _grid(args: argparse.Namespace, embeddings: np.ndarray, test: EvalSplit, model: Embedder) -> None:
    from retrieval.report.query_grid import display_image, draw_query_grid, rank_queries, select_queries

    ranked = rank_queries(embeddings, test)
    chosen = select_queries(ranked, args.grid_rows, args.grid_queries)
    config = model.data_config()

    def image_of(row: int) -> np.ndarray:
        return display_image(test.dataset[row][0], config["mean"], config["std"])

    title = "worst-ranked queries" if args.grid_queries == "worst" else "random queries"
    caption = f"{title}: top-5 results (green: same class)"
    draw_query_grid(ranked, chosen, test.labels, image_of, with_folder(args.grid), caption, test.class_names)


def _trained_elsewhere(args: argparse.Namespace, checkpoint: Checkpoint, config: Config) -> str | None:
    """What the model trained on when it is not this data's training split (None when it is).

    The frequency groups count this data's training images a class; for a model that never saw
    them, head / mid / tail say nothing about what it learned, and the line says so.
    """
    if args.backbone is not None:
        return "the backbone never trained on these classes"
    trained = checkpoint.run_config.get("data") or {}
    data = config.data
    if (trained.get("name"), trained.get("path"), trained.get("root")) == (data.name, data.path, data.root):
        return None
    source = trained.get("path") or trained.get("root") or trained.get("name")
    return f"the checkpoint trained on {source}, not on these classes"


def _group_line(metrics: dict[str, Any], trained_elsewhere: str | None = None) -> str:
    """`by training frequency (head / mid / tail): Recall@1 a / b / c, proxy accuracy d / e / f`.

    With `trained_elsewhere` (`_trained_elsewhere`), the line ends by saying the groups are of classes the
    model never trained on.
    """
    from retrieval.metrics import GROUP_NAMES

    present = [name for name in GROUP_NAMES if f"{name}/recall@1" in metrics]
    line = f"by training frequency ({' / '.join(present)}): Recall@1 "
    line += " / ".join(f"{metrics[f'{name}/recall@1']:.4f}" for name in present)
    if "proxy_accuracy" in metrics:
        accuracies = [metrics.get(f"{name}/proxy_accuracy", float("nan")) for name in present]
        line += ", proxy accuracy " + " / ".join(f"{value:.4f}" for value in accuracies)
        line += f" (all {metrics['proxy_accuracy']:.4f})"
    if trained_elsewhere is not None:
        line += f"; groups of this data's training split: {trained_elsewhere}"
    return line


def _calibration_line(calibration: dict[str, Any]) -> str:
    before, after = calibration["before"], calibration["after"]
    return (
        f"calibration: temperature {calibration['temperature']:.4f} fitted on {calibration['num_calibration_images']} "
        f"validation images; test ECE {before['ece']:.4f} -> {after['ece']:.4f}, "
        f"Brier {before['brier']:.4f} -> {after['brier']:.4f}"
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fmr(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a false match rate must lie in (0, 1), like 1e-3, got {value}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {value}")
    return value
