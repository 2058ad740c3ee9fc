"""Evaluating a checkpoint (or an untrained timm backbone) end to end, from an `EvaluationRequest`.

`retrieval evaluate` parses its flags into a request and prints the `EvaluationReport`; a Python user
calls `run_evaluation` the same way. Beyond Recall@K / MAP@R with intervals on the test split (and
per training-frequency group on closed-set data), a request can re-rank (`rerank`, parameters chosen
on validation), score and calibrate the proxy classifier (`classification`, `calibrate`), measure
pair-level verification and store a match threshold in the checkpoint (`verification`,
`save_threshold`), leave out test images that are near-copies of training ones (`exclude_leaks`), and
draw a grid of queries (`grid`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.core.rerank import parse_rerank
from retrieval.errors import UserError
from retrieval.report.grid_modes import GRID_MODES
from retrieval.runtime.files import write_text

if TYPE_CHECKING:
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.config import Config
    from retrieval.core.learned_rerank import RerankerFiles
    from retrieval.data import EvalSplit, RetrievalData
    from retrieval.evaluate.learned_rerank import SplitReranker
    from retrieval.evaluate.proxy_classifier import Calibration, ProxyClassifier
    from retrieval.evaluate.records import EvaluationRecord, LearnedRerankNote, ProxyClassification
    from retrieval.evaluate.uncertainty import Uncertainty
    from retrieval.evaluate.verification import VerificationReport
    from retrieval.inference.forward import Precision
    from retrieval.models import Embedder

__all__ = ["EvaluationReport", "EvaluationRequest", "run_evaluation"]


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate and what to do beyond Recall@K / MAP@R; the flags of `retrieval evaluate`, by name.

    Attributes:
        checkpoint: a run's checkpoint; or else `backbone`, a timm model name scored without training
            (`weights`: its state dict file).
        config, overrides: the config file and `section.key=value` overrides (the digits demo when
            `config` is None; with a checkpoint, they apply to its saved config where they can).
        per_query: write every query's Recall@1 and AP@R here (`.npz`, for `retrieval compare`).
        rerank: a re-ranking spec (`qe`, `dba`, `kreciprocal`, or with parameters, `qe:k=2,alpha=3`).
        reranker: a learned re-ranker's directory (`retrieval reranker`) of this checkpoint: test is scored with
            it and with the embedding alone, both printed.
        classification: score the proxy classifier into this folder; `calibrate`: fit a softmax
            temperature on (`calibration_share` of) the validation split.
        verification: pair-level verification; `save_threshold`: the false match rate whose threshold
            is stored in the checkpoint (implies verification).
        exclude_leaks: score without the test images that copy a train/val image by `retrieval audit`'s copy
            check (`leak_ratio`: its distance ratio, the audit's default when None).
        grid: draw `grid_rows` queries (`grid_queries`: worst or random) with their top-5 results here.

    A request that cannot apply (a `UserError` from `run_evaluation`) is worded with the flag of
    `retrieval evaluate` that asks for it, the one place users make it.

    Raises:
        ValueError: not exactly one of checkpoint and backbone, or a value out of its range.
    """

    checkpoint: Path | None = None
    backbone: str | None = None
    weights: Path | None = None
    config: Path | None = None
    overrides: tuple[str, ...] = ()
    per_query: Path | None = None
    rerank: str | None = None
    reranker: Path | None = None
    classification: Path | None = None
    calibrate: bool = False
    calibration_share: float = 1.0
    verification: bool = False
    save_threshold: float | None = None
    exclude_leaks: bool = False
    leak_ratio: float | None = None
    grid: Path | None = None
    grid_queries: str = "worst"
    grid_rows: int = 8

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.backbone is None):
            raise ValueError("an EvaluationRequest takes exactly one of checkpoint and backbone")
        if not 0 < self.calibration_share <= 1:
            raise ValueError(f"calibration_share must lie in (0, 1], got {self.calibration_share}")
        if self.save_threshold is not None and not 0 < self.save_threshold < 1:
            raise ValueError(f"save_threshold is a false match rate in (0, 1), got {self.save_threshold}")
        if self.leak_ratio is not None and not 0 <= self.leak_ratio < 1:
            raise ValueError(f"leak_ratio must lie in [0, 1), got {self.leak_ratio}")
        if self.grid_rows < 1:
            raise ValueError(f"grid_rows must be >= 1, got {self.grid_rows}")
        if self.grid_queries not in GRID_MODES:
            raise ValueError(f"grid_queries must be one of {', '.join(GRID_MODES)}, got {self.grid_queries!r}")
        if self.rerank:
            parse_rerank(self.rerank)  # a bad spec is the user's: refused here, before PyTorch loads


@dataclass(frozen=True)
class EvaluationReport:
    """What an evaluation measured: the metrics, what each option added, and the lines that say it.

    Attributes:
        metrics: Recall@K, MAP@R, R-precision (and per group, proxy accuracy where they apply).
        extras: the record `evaluate --json` writes: the metrics and each option's results by name
            (`uncertainty`, `rerank`, `calibration`, `classification`, `verification`, `leaks`).
        notes: one line per option, printed before the intervals and the metrics.
        uncertainty: the 95% intervals of Recall@1 and MAP@R.
        leak_warning: the line about test images that are copies of training ones, if any.
    """

    metrics: dict[str, float]
    extras: EvaluationRecord
    notes: list[str]
    uncertainty: Uncertainty
    leak_warning: str | None

    def record(self) -> EvaluationRecord:
        """The metrics and the options' results in one record: `evaluate --json`'s file (`.json_text()`)."""
        return self.extras

    def text(self) -> str:
        """The lines `retrieval evaluate` prints: the notes, the intervals, then the metrics."""
        from retrieval.evaluate.evaluator import format_metrics
        from retrieval.evaluate.uncertainty import format_uncertainty

        return "\n".join([*self.notes, format_uncertainty(self.uncertainty), format_metrics(self.metrics)])


def run_evaluation(request: EvaluationRequest) -> EvaluationReport:
    """Score the model on the test split and do what `request` asks for beyond it; the report of it all.

    The files it asks for (per-query values, the grid, the classification folder) are written, and
    `save_threshold` writes the threshold into the checkpoint; the JSON record and the printing are the
    caller's (`EvaluationReport.record`, `.text`).

    Raises:
        UserError: a request that cannot apply to this model or data (refused before any image is embedded
            where it can be), or a config mistake.
    """
    from retrieval.data import build_data
    from retrieval.evaluate.evaluator import embed_as_configured, score_split
    from retrieval.evaluate.records import EvaluationRecord, LeakNote
    from retrieval.evaluate.rerank_choice import choose_rerank
    from retrieval.evaluate.uncertainty import QueryValues, save_query_values, uncertainty_summary
    from retrieval.evaluate.verification import check_threshold_request
    from retrieval.inference.forward import Precision
    from retrieval.metrics import GROUP_NAMES, frequency_groups
    from retrieval.runtime.device import place_model, resolve_device

    checkpoint, config = _model_and_config(request)
    device = resolve_device(config.train.device)
    precision = Precision.for_run(config.train, device)
    model = checkpoint.embedder(config.model.flip_average)  # `--set model.flip_average` applies
    place_model(model, device, precision.channels_last)  # moves the module in place
    data = build_data(config.data, model.data_config(), config.augment, checkpoint.model_config.in_chans)

    embedded: dict[int, np.ndarray] = {}

    def embed(split: EvalSplit) -> np.ndarray:
        """The split's embeddings, computed once whichever options (calibration, verification, re-ranking) ask."""
        if id(split) not in embedded:
            embedded[id(split)] = embed_as_configured(model, split.dataset, config.data, device, precision)
        return embedded[id(split)]

    classifier = _classifier_for(checkpoint, config, data)
    _check_requests(request, classifier, data)  # before any image is embedded
    learned = _learned_reranker(request, config)
    check_threshold_request(request.save_threshold, data, config.train.select_on_test)
    scored_test, leak_warning = _leak_check(request, config, data)
    embeddings = embed(data.test)
    class_groups = frequency_groups(data.train_labels, data.num_classes)
    rerank = None
    if request.rerank:
        rerank = choose_rerank(request.rerank, None if data.val is None else (embed(data.val), data.val))
    proxies = None if classifier is None else classifier.proxies
    split_reranker = None
    if learned is not None and learned.manifest.applied:
        split_reranker = _split_reranker(learned, checkpoint, config, scored_test, embeddings, device, precision)
    metrics, scores = score_split(
        embeddings,
        scored_test,
        class_groups,
        proxies,
        split_reranker if rerank is None else rerank.reranker,
    )
    values = QueryValues.from_scores(scores)
    uncertainty = uncertainty_summary(values)
    if request.per_query:
        save_query_values(request.per_query, values)
    grouped = f"{GROUP_NAMES[0]}/recall@1" in metrics
    notes = [_group_line(metrics, _trained_elsewhere(request, checkpoint, config))] if grouped else []
    extras = EvaluationRecord(metrics=metrics, uncertainty=uncertainty)
    if rerank is not None:
        notes.append(rerank.line())
        extras.rerank = rerank.record()
    if learned is not None:
        alone = metrics if split_reranker is None else score_split(embeddings, scored_test, class_groups, proxies)[0]
        notes.extend(_learned_outputs(learned, metrics, alone, extras))
    notes.extend(_classifier_outputs(request, classifier, data, embeddings, embed, extras))
    if request.verification or request.save_threshold is not None:
        extras.verification, lines = _verification(request, checkpoint, config, data, embeddings, embed)
        notes.extend(lines)
    if request.grid:
        _grid(request, embeddings, data.test, model)
        notes.append(f"grid of {request.grid_queries} queries written to {request.grid}")
    if leak_warning:
        extras.leaks = LeakNote(warning=leak_warning, excluded=request.exclude_leaks)
    return EvaluationReport(metrics, extras, notes, uncertainty, leak_warning)


def _classifier_outputs(
    request: EvaluationRequest,
    classifier: ProxyClassifier | None,
    data: RetrievalData,
    embeddings: np.ndarray,
    embed: Callable[[EvalSplit], np.ndarray],
    extras: EvaluationRecord,
) -> list[str]:
    """`--calibrate` and `--classification` through the proxies: their files and records written, their lines."""
    from retrieval.evaluate.records import ClassificationNote

    lines = []
    calibrated = None
    if request.calibrate:
        assert classifier is not None and data.val is not None  # _check_requests refused the request otherwise
        calibrated = extras.calibration = _calibration(request, embed, embeddings, data.test, data.val, classifier)
        lines.append(_calibration_line(calibrated))
    if request.classification:
        assert classifier is not None  # _check_requests refused the request otherwise
        report = _classification(request.classification, embeddings, data.test, classifier, calibrated)
        extras.classification = ClassificationNote(directory=str(request.classification), accuracy=report.accuracy)
        lines.append(f"classification: accuracy {report.accuracy:.4f}, written to {request.classification}")
    return lines


def _learned_reranker(request: EvaluationRequest, config: Config) -> RerankerFiles | None:
    """The checked re-ranker directory of `--reranker`, refused unless it belongs to this checkpoint and image size."""
    from retrieval.core.learned_rerank import read_reranker
    from retrieval.runtime.files import file_sha256

    if request.reranker is None:
        return None
    if request.checkpoint is None:
        raise UserError("--reranker re-scores a trained checkpoint's results; pass --checkpoint CKPT, not --backbone")
    if request.rerank:
        raise UserError("--rerank and --reranker are two re-rankings; evaluate one at a time")
    files = read_reranker(request.reranker)
    files.manifest.belongs_to(file_sha256(request.checkpoint), f"checkpoint {request.checkpoint}")
    if files.manifest.image_size != config.data.image_size:
        raise UserError(
            f"the re-ranker was trained at data.image_size={files.manifest.image_size}, this evaluation runs at "
            f"{config.data.image_size}; leave data.image_size as the re-ranker had it"
        )
    return files


def _split_reranker(
    files: RerankerFiles,
    checkpoint: Checkpoint,
    config: Config,
    split: EvalSplit,
    embeddings: np.ndarray,
    device: torch.device,
    precision: Precision,
) -> SplitReranker:
    """The re-ranker's blend on `split`, its images described once by the PyTorch pair model."""
    from retrieval.evaluate.learned_rerank import describe_split, load_pair_model, split_reranker
    from retrieval.runtime.device import place_model

    model = load_pair_model(files, checkpoint.embedder(), checkpoint.model_config.in_chans)
    place_model(model, device, precision.channels_last)
    data = config.data
    descriptors = describe_split(model, split.dataset, data.eval_batch_size, device, precision, data.num_workers)
    manifest = files.manifest
    return split_reranker(manifest.blend, model.head, embeddings, descriptors, split, base=manifest.base_augmentation())


def _learned_outputs(
    files: RerankerFiles, reranked: dict[str, float], alone: dict[str, float], extras: EvaluationRecord
) -> list[str]:
    """The learned re-ranker's record set in `extras`, and its printed lines."""
    extras.reranker = _learned_note(files, reranked, alone)
    return _learned_lines(files, reranked, alone)


def _learned_note(files: RerankerFiles, reranked: dict[str, float], alone: dict[str, float]) -> LearnedRerankNote:
    from retrieval.evaluate.records import LearnedRerankNote

    manifest = files.manifest
    return LearnedRerankNote(
        directory=str(files.directory),
        depth=manifest.depth,
        weight=manifest.weight,
        base=manifest.base,
        applied=manifest.applied,
        reranked=reranked,
        embedding_alone=alone,
    )


def _learned_lines(files: RerankerFiles, reranked: dict[str, float], alone: dict[str, float]) -> list[str]:
    """The verdict on validation, then test's two rows: the embedding alone and re-ranked."""
    manifest = files.manifest
    over = "" if manifest.base is None else f" over {manifest.base}"
    label = (
        f"re-ranked (N={manifest.depth}, w={manifest.weight:g}{over})"
        if manifest.applied
        else "re-ranked (not applied)"
    )
    width = max(len(label), len("embedding alone"))
    lines = [manifest.verdict(), f"{'test':<{width}}  Recall@1     MAP@R"]
    for name, values in (("embedding alone", alone), (label, reranked)):
        lines.append(f"{name:<{width}}  {values['recall@1']:>8.4f}  {values['map@r']:>8.4f}")
    return lines


def _leak_check(request: EvaluationRequest, config: Config, data: RetrievalData) -> tuple[EvalSplit, str | None]:
    """The test split to score (without copies of train/val images with --exclude-leaks) and a warning line."""
    from retrieval.audit.leaks import MAX_RATIO
    from retrieval.evaluate.leak_check import copied_test_rows, identical_test_rows, warning_line, without_rows

    if request.leak_ratio is not None and not request.exclude_leaks:
        raise UserError("--leak-ratio sets the copy check of --exclude-leaks; add --exclude-leaks")
    if not request.exclude_leaks:
        identical = identical_test_rows(config.data)
        if identical is None or not identical.any():
            return data.test, None
        return data.test, warning_line(identical, "identical files to", excluded=False)
    ratio = MAX_RATIO if request.leak_ratio is None else request.leak_ratio
    leaked = copied_test_rows(config.data, ratio)
    if leaked is None:
        raise UserError(f"--exclude-leaks compares image files; data.name {config.data.name} has none")
    if not leaked.any():
        return data.test, None
    line = warning_line(leaked, f"copies (the audit's copy check, ratio <= {ratio}) of", excluded=True)
    return without_rows(data.test, leaked), line


def _verification(
    request: EvaluationRequest,
    checkpoint: Checkpoint,
    config: Config,
    data: RetrievalData,
    embeddings: np.ndarray,
    embed: Callable[[EvalSplit], np.ndarray],
) -> tuple[VerificationReport, list[str]]:
    """Verification and the lines to print; the threshold of `--save-threshold` goes into the checkpoint."""
    from retrieval.evaluate.verification import (
        evaluate_verification,
        fmr_text,
        threshold_record,
        verification_lines,
    )
    from retrieval.metrics.verification import FMR_TARGETS

    fmrs = sorted(
        {*FMR_TARGETS, *([request.save_threshold] if request.save_threshold is not None else [])}, reverse=True
    )
    report = evaluate_verification(embeddings, data, config.train.select_on_test, embed, fmrs)
    lines = verification_lines(report)
    if request.save_threshold is not None:
        record = threshold_record(report, request.save_threshold, config.data.name)
        assert request.checkpoint is not None  # a --backbone has none: _model_and_config refused the request
        dataclasses.replace(checkpoint, match_threshold=record).save(request.checkpoint)
        lines.append(
            f"threshold {record.score:.4f} (FMR {fmr_text(request.save_threshold)}) saved to {request.checkpoint}; "
            "indexes built from it before have its old sha256: build them again to use it"
        )
    return report, lines


def _model_and_config(request: EvaluationRequest) -> tuple[Checkpoint, Config]:
    """The `--checkpoint` with its run's config, or the `--backbone` on the config of `--config` / `--set`."""
    from retrieval.checkpoint import Checkpoint
    from retrieval.config import load_config
    from retrieval.inference.backbone import backbone_checkpoint, backbone_config

    if request.backbone is not None and request.save_threshold is not None:
        raise UserError("--save-threshold writes into a checkpoint; a --backbone has none: evaluate a trained run")
    if request.checkpoint is not None:
        if request.weights is not None:
            raise UserError("--weights gives the weights of --backbone NAME; a checkpoint holds its own")
        checkpoint = Checkpoint.read(request.checkpoint)
        return checkpoint, checkpoint.config(request.config, request.overrides)
    assert request.backbone is not None  # EvaluationRequest holds exactly one of the two
    config = backbone_config(load_config(request.config, request.overrides), request.backbone, request.weights)
    return backbone_checkpoint(config), config


def _classifier_for(checkpoint: Checkpoint, config: Config, data: RetrievalData) -> ProxyClassifier | None:
    """The proxy classifier when its classes are this data's training classes, else None."""
    from retrieval.evaluate.proxy_classifier import load_proxy_classifier

    classifier = load_proxy_classifier(checkpoint, config)
    if classifier is None or len(classifier.proxies) != data.num_classes:
        return None
    return classifier


def _check_requests(request: EvaluationRequest, classifier: ProxyClassifier | None, data: RetrievalData) -> None:
    """Refuse --classification / --calibrate on data or checkpoints they cannot apply to."""
    from retrieval.evaluate.proxy_classifier import closed_set_rows

    for flag, asked in (("--classification", request.classification), ("--calibrate", request.calibrate)):
        if not asked:
            continue
        if classifier is None:
            raise UserError(
                f"{flag} needs a checkpoint trained with a proxy loss on this data's training classes (its proxies "
                "are the classifier); pair losses (circle, triplet, multi_similarity, ...) and soft_triple's several "
                "centres a class have none, another dataset's proxies name other classes"
            )
        closed_set_rows(data.test, flag)
    if request.calibrate:
        if data.val is None:
            raise UserError(
                "--calibrate fits the temperature on the validation split, and this data has none; set "
                "data.val_fraction (e.g. --set data.val_fraction=0.2, as in training) or add split=val rows"
            )
        closed_set_rows(data.val, "--calibrate (validation split)")


def _calibration(
    request: EvaluationRequest,
    embed: Callable[[EvalSplit], np.ndarray],
    test_embeddings: np.ndarray,
    test: EvalSplit,
    val: EvalSplit,
    classifier: ProxyClassifier,
) -> Calibration:
    """Temperature fitted on (a share of) the validation split, scored on the closed-set test images."""
    from retrieval.evaluate.proxy_classifier import calibrate

    val_rows, _ = _closed_set(val, "--calibrate (validation split)")
    if request.calibration_share < 1:
        count = max(1, round(request.calibration_share * len(val_rows)))
        val_rows = np.sort(np.random.default_rng(0).choice(val_rows, size=count, replace=False))
    val_embeddings = embed(val)
    test_rows, test_classes = _closed_set(test, "--calibrate")
    result = calibrate(
        classifier,
        (val_embeddings[val_rows], np.asarray(val.train_class)[val_rows]),
        (test_embeddings[test_rows], test_classes),
    )
    return result.model_copy(update={"calibration_share": request.calibration_share})


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
    calibrated: Calibration | None,
) -> ProxyClassification:
    """The proxy classifier's report on the closed-set test images, written with its plots into `out_dir`."""
    from retrieval.evaluate.records import CalibratedSummary, ProxyClassification
    from retrieval.metrics.calibration import temperature_softmax
    from retrieval.metrics.classification import calibration_summary, classification_report
    from retrieval.report.classification_plots import plot_classification

    rows, targets = _closed_set(test, "--classification")
    probabilities = temperature_softmax(classifier.logits(embeddings[rows]))
    fields = {"logit_scale": classifier.scale, **dict(classification_report(probabilities, targets))}
    after = None
    if calibrated is not None:
        scaled = temperature_softmax(classifier.logits(embeddings[rows]), calibrated.temperature)
        after = calibration_summary(scaled, targets)
        fields["calibrated"] = CalibratedSummary.model_validate({"temperature": calibrated.temperature, **dict(after)})
    report = ProxyClassification.model_validate(fields)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_classification(report, out_dir, after)
    write_text(out_dir / "classification.json", report.model_dump_json(exclude_unset=True) + "\n")
    return report


def _grid(request: EvaluationRequest, embeddings: np.ndarray, test: EvalSplit, model: Embedder) -> None:
    """The query grid of `request.grid`: `grid_rows` queries (the worst-ranked or random), their top-5 results."""
    from retrieval.report.query_grid import display_image, draw_query_grid, rank_queries, select_queries

    grid = request.grid
    assert grid is not None  # drawn only when asked
    ranked = rank_queries(embeddings, test)
    chosen = select_queries(ranked, request.grid_rows, request.grid_queries)
    config = model.data_config()

    def image_of(row: int) -> np.ndarray:
        return display_image(test.dataset[row][0], config["mean"], config["std"])

    title = "worst-ranked queries" if request.grid_queries == "worst" else "random queries"
    caption = f"{title}: top-5 results (green: same class)"
    draw_query_grid(ranked, chosen, test.labels, image_of, grid, caption, test.class_names)


def _trained_elsewhere(request: EvaluationRequest, checkpoint: Checkpoint, config: Config) -> str | None:
    """What the model trained on when it is not this data's training split (None when it is).

    The frequency groups count this data's training images a class; for a model that never saw
    them, head / mid / tail say nothing about what it learned, and the line says so.
    """
    if request.backbone is not None:
        return "the backbone never trained on these classes"
    trained = checkpoint.run_config.get("data") or {}
    data = config.data
    if (trained.get("name"), trained.get("path"), trained.get("root")) == (data.name, data.path, data.root):
        return None
    source = trained.get("path") or trained.get("root") or trained.get("name")
    return f"the checkpoint trained on {source}, not on these classes"


def _group_line(metrics: dict[str, float], trained_elsewhere: str | None = None) -> str:
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


def _calibration_line(calibration: Calibration) -> str:
    before, after = calibration.before, calibration.after
    return (
        f"calibration: temperature {calibration.temperature:.4f} fitted on {calibration.num_calibration_images} "
        f"validation images; test ECE {before.ece:.4f} -> {after.ece:.4f}, "
        f"Brier {before.brier:.4f} -> {after.brier:.4f}"
    )
