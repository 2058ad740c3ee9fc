"""`evaluate --verification` / `--save-threshold`, then `index query --min-score`, on digits with a tiny model.

The commands' refusals, the labelled opt-in's printed lines and the no-match line are `tests/cli`'s
(`test_evaluate_cli.py`, `test_index_cli.py`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.data import EvalSplit, RetrievalData
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from retrieval.evaluate.verification import evaluate_verification, verification_lines
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.index import SearchIndex
from retrieval.metrics.verification import pairs_of, roc_auc

DIGITS = ["--set", "data.name=digits", "--set", "data.image_size=16", "--set", "data.num_workers=0"]
DIGITS += ["--set", "train.device=cpu"]


def test_thresholds_are_chosen_on_validation_applied_to_test_saved_and_used_by_the_index(
    checkpoint_factory, csv_dataset, tmp_path
):
    """Through the library calls `evaluate`, `index build` and `index query` run (their printed text and `--json`
    records are `report.text()`, `record()` and `json_text()`)."""
    checkpoint = checkpoint_factory(tmp_path / "best.pt")
    weights = Checkpoint.read(checkpoint).model
    overrides = (*DIGITS[1::2], "data.val_fraction=0.2")
    evaluated = run_evaluation(EvaluationRequest(checkpoint, overrides=overrides, save_threshold=5e-3))
    lines = evaluated.text().splitlines()
    assert lines[-5].startswith("Recall@1: ") and lines[-1].startswith("MAP@R: ")  # still the closing lines
    report = json.loads(evaluated.record().json_text())["verification"]
    assert report["chosen_on"] == "val" and 0.5 <= report["roc_auc"] <= 1
    assert report["test_pairs"]["scored"] == report["test_pairs"]["total"] == 899 * 898 // 2
    assert report["selection_pairs"]["scored"] == 179 * 178 // 2
    points = {point["target_fmr"]: point for point in report["operating_points"]}
    assert sorted(points) == [1e-4, 1e-3, 5e-3, 1e-2]
    for fmr, point in points.items():
        assert point["selection_fmr"] <= fmr and 0 <= point["test_fnmr"] <= 1 and 0 <= point["test_fmr"] <= 1
        line = f"threshold {point['threshold']:.4f}, test FNMR {point['test_fnmr']:.4f} at test FMR"
        assert any(line in text for text in lines), line
    assert points[1e-2]["threshold"] <= points[1e-3]["threshold"] <= points[1e-4]["threshold"]
    head = f"verification: ROC AUC {report['roc_auc']:.4f} on 403,651 test pairs"
    assert any(text.startswith(head) and "chosen on the 15,931 validation pairs" in text for text in lines)

    saved = Checkpoint.read(checkpoint)  # still a valid checkpoint, its checksums rewritten
    assert saved.match_threshold is not None and saved.match_threshold.to_dict() == {
        "score": points[5e-3]["threshold"],
        "target_fmr": 5e-3,
        "chosen_on": "val",
        "selection_fnmr": points[5e-3]["selection_fnmr"],
        "test_fmr": points[5e-3]["test_fmr"],
        "test_fnmr": points[5e-3]["test_fnmr"],
        "dataset": "digits",
    }
    assert all(np.array_equal(saved.model[name], weights[name]) for name in weights)

    index = tmp_path / "index"
    build_index(IndexBuildRequest(index, EncoderChoice(checkpoint=checkpoint), csv=csv_dataset, kind="flat"))
    assert SearchIndex.load(index).manifest.as_dict()["match_threshold"] == saved.match_threshold.to_dict()
    image = csv_dataset.parent / "images" / "train_2_3.png"
    (answer,) = query_index(QueryRequest(index, images=(image,), k=28, min_score="stored")).answers
    assert answer.min_score == saved.match_threshold.score
    assert answer.results and all(result.score >= answer.min_score for result in answer.results)

    other = tmp_path / "other.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(other)
    (nothing,) = query_index(QueryRequest(index, images=(other,), min_score="1")).answers
    # `index query --min-score 1` prints "no match above 1.0000" for it: tests/cli/test_index_cli.py
    assert not nothing.results and nothing.min_score == 1.0


def test_without_a_validation_split_or_the_opt_in_only_roc_auc_is_reported() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 5)
    embeddings = rng.standard_normal((20, 8)).astype(np.float32)
    data = RetrievalData(train=None, train_labels=labels, num_classes=4, test=EvalSplit(None, labels))

    def embed(split: EvalSplit) -> np.ndarray:
        raise AssertionError("no split but test should be embedded")

    report = evaluate_verification(embeddings, data, select_on_test=False, embed=embed)
    assert report.chosen_on is None and "operating_points" not in report.model_dump(exclude_unset=True)
    assert report.roc_auc == pytest.approx(roc_auc(pairs_of(embeddings, labels)))
    head, reason = verification_lines(report)
    assert head.startswith("verification: ROC AUC ") and head.endswith("on 190 test pairs (40 same-class)")
    assert reason.startswith("verification: no validation split, so no thresholds were chosen (ROC AUC only)")
    counts = report.test_pairs.model_copy(update={"scored": 180, "total": 5000, "sampled": True})
    sampled = report.model_copy(update={"test_pairs": counts})
    assert verification_lines(sampled)[0].endswith("on 180 test pairs (sampled uniformly from 5,000; 40 same-class)")
