"""A pretraining run without the command line (`retrieval.pretrain.run`): the backbone file `train` loads, an exact
resume with the images the checkpoint records, and the request's checks before PyTorch loads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.errors import UserError
from retrieval.models.embedder import create_backbone
from retrieval.pretrain.pretrainer import PretrainCheckpoint
from retrieval.pretrain.run import PretrainReport, PretrainRequest, check_pretraining, run_pretraining
from tests.conftest import TINY_BACKBONE
from tests.pretrain.pretraining import TINY


def _pretrain(csv: Path, run: Path, *overrides: str) -> PretrainReport:
    return run_pretraining(PretrainRequest(csv=csv, output_dir=run, overrides=(*TINY, *overrides)))


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simclr", "simsiam"])
def test_pretrained_backbone_loads_into_train_whole_and_says_the_head_starts_fresh(
    method, csv_dataset, tmp_path, caplog
):
    """Was `tests/pretrain/test_pretrain_cli.py`'s test of the same name, through `main` (its lines: `text()`)."""
    run = tmp_path / "pre"
    report = _pretrain(csv_dataset, run, "pretrain.epochs=2", f"pretrain.method={method}")
    out = report.text()
    weights = run / "backbone.safetensors"
    assert f"backbone weights: {weights}" in out and "next: retrieval train" in out
    assert report.main_process and report.result.weights == weights
    assert [record["epoch"] for record in _records(run)] == [1, 2]
    trained = load_file(weights)
    fresh = create_backbone(TINY_BACKBONE).state_dict()
    assert trained.keys() == fresh.keys()
    assert any(not torch.equal(trained[key], fresh[key]) for key in trained if key.endswith("weight"))
    with caplog.at_level(logging.INFO, logger="retrieval"):
        loaded = create_backbone(TINY_BACKBONE, weights=weights).state_dict()
    assert all(torch.equal(loaded[key], trained[key]) for key in trained)
    assert "the head and proxies start fresh" in caplog.text


@pytest.mark.slow
def test_resume_continues_exactly_where_an_uninterrupted_run_would_be(csv_dataset, tmp_path):
    """Was `tests/pretrain/test_pretrain_cli.py`'s test of the same name, through `main`."""
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    _pretrain(csv_dataset, straight, "pretrain.epochs=2")
    _pretrain(csv_dataset, interrupted, "pretrain.epochs=1")
    # The checkpoint records the images as given, the plain dict of earlier versions.
    saved = torch.load(interrupted / "checkpoints" / "last.pt", weights_only=True)["source"]
    assert saved == {"csv": str(csv_dataset), "split": "all"}
    run_pretraining(PretrainRequest(resume=interrupted, overrides=("pretrain.epochs=2",)))
    assert [r["loss"] for r in _records(interrupted)] == [r["loss"] for r in _records(straight)]
    resumed, expected = load_file(interrupted / "backbone.safetensors"), load_file(straight / "backbone.safetensors")
    assert all(torch.equal(resumed[key], expected[key]) for key in expected)
    # Another head than the run's cannot take its weights: one line, not torch's key listing.
    with pytest.raises(UserError, match="cannot resume: the checkpoint's model state does not fit") as error:
        run_pretraining(PretrainRequest(resume=interrupted, overrides=("pretrain.hidden_dim=64",)))
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_bf16_autocast_pretrains_on_the_cpu(csv_dataset, tmp_path):
    """Was `tests/pretrain/test_pretrain_cli.py`'s test of the same name, through `main`."""
    _pretrain(csv_dataset, tmp_path / "bf16", "pretrain.epochs=1", "train.amp=bf16")
    assert torch.isfinite(torch.tensor(_records(tmp_path / "bf16")[0]["loss"]))


def test_a_request_needs_images_and_a_folder_or_a_run_to_resume_and_not_both(tmp_path):
    with pytest.raises(UserError, match="needs --images DIR or --csv FILE, and --output-dir DIR"):
        PretrainRequest(output_dir=tmp_path)
    with pytest.raises(UserError, match="needs --images DIR or --csv FILE, and --output-dir DIR"):
        PretrainRequest(images=tmp_path)
    with pytest.raises(UserError, match="leave out --images and --csv"):
        PretrainRequest(resume=tmp_path, csv=tmp_path / "x.csv")
    with pytest.raises(ValueError, match="split must be one of all, train, val, test, gallery"):
        PretrainRequest(csv=tmp_path / "x.csv", split="validation", output_dir=tmp_path)


def test_the_check_reads_a_new_runs_images_and_finds_a_resumed_runs_checkpoint(csv_dataset, tmp_path):
    request = PretrainRequest(csv=csv_dataset, split="test", output_dir=tmp_path / "run")
    assert request.source() == ImageSourceSpec(csv=str(csv_dataset), split="test")
    images = check_pretraining(request)
    assert images is not None and len(images.paths) == 12 and all(path.parent.name == "images" for path in images.paths)
    with pytest.raises(UserError, match="no pretraining checkpoint at"):
        check_pretraining(PretrainRequest(resume=tmp_path))
    with pytest.raises(UserError, match="image folder not found"):
        check_pretraining(PretrainRequest(images=tmp_path / "missing", output_dir=tmp_path / "run"))


def test_a_resume_reads_the_images_its_checkpoint_records(csv_dataset, tmp_path):
    """Checkpoints of every version hold `{"csv": FILE, "split": SPLIT}` or `{"images": DIR}`: read as specs."""
    from retrieval.inference.sources import spec_source

    path = tmp_path / "last.pt"
    for source in ({"csv": str(csv_dataset), "split": "train"}, {"images": str(csv_dataset.parent / "images")}):
        torch.save(
            {
                "format": "retrieval-pretrain",
                "model": {"w": torch.ones(2)},
                "optimizer": {"state": {}, "param_groups": []},
                "epoch": 0,
                "config": {},
                "source": source,
            },
            path,
        )
        spec = PretrainCheckpoint.read(path).source
        assert spec.model_dump(exclude_unset=True) == source
        expected = 16 if "csv" in source else 28  # the CSV's train rows; every image in the folder
        assert len(spec_source(spec).paths) == expected


@pytest.mark.slow
def test_pretraining_records_reach_the_runs_loggers(csv_dataset, tmp_path):
    """`train.loggers` mirror pretraining's records as they do training's (one epoch loop for both)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "pre"
    _pretrain(csv_dataset, run, "pretrain.epochs=2", "train.loggers=[tensorboard]")
    events = EventAccumulator(str(run / "tensorboard")).Reload()
    losses = events.Scalars("loss")
    assert [event.step for event in losses] == [1, 2]
    assert [event.value for event in losses] == pytest.approx([r["loss"] for r in _records(run)], rel=1e-6)
    assert events.Scalars("result/loss")[0].value == pytest.approx(_records(run)[-1]["loss"], rel=1e-6)
