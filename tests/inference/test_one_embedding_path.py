"""One image-to-embedding path: `evaluate` scores the very vectors `index build` stores, and the layers stay apart."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import TrainConfig
from retrieval.evaluate import evaluator
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.inference.forward import FLOAT32, Precision
from retrieval.inference.image_encoder import ImageEncoder

BATCH = 16  # evaluation and index build embed in batches of the same size: the same arithmetic on the CPU


def _with_amp(checkpoint: Path, amp: str, out: Path) -> Path:
    """`checkpoint` again with its run config's `train.amp` set to `amp`."""
    loaded = Checkpoint.read(checkpoint)
    run_config = {**loaded.run_config, "train": {**loaded.run_config["train"], "amp": amp}}
    dataclasses.replace(loaded, run_config=run_config).save(out)
    return out


def _evaluated_embeddings(monkeypatch, checkpoint: Path, csv_path: Path) -> dict[str, np.ndarray]:
    """`{absolute image path: embedding}` of the test split, as `retrieval evaluate` (`run_evaluation`) hands them to
    scoring."""
    seen = {}

    def recording_score_split(embeddings, split, *args, **kwargs):
        seen.update(zip((str(Path(path).resolve()) for path in split.dataset.paths), embeddings, strict=True))
        return original(embeddings, split, *args, **kwargs)

    original = evaluator.score_split  # `retrieval evaluate` imports it from here when it runs
    monkeypatch.setattr(evaluator, "score_split", recording_score_split)
    overrides = ["data.name=csv", f"data.path={csv_path}", "data.num_workers=0", f"data.eval_batch_size={BATCH}"]
    run_evaluation(EvaluationRequest(checkpoint, overrides=(*overrides, "train.device=cpu")))
    return seen


def _indexed_vectors(checkpoint: Path, csv_path: Path, out: Path) -> dict[str, np.ndarray]:
    """`{absolute image path: stored vector}` of a flat index of the CSV's test rows that `retrieval index build`
    (`build_index`) makes with `checkpoint`."""
    encoder = EncoderChoice(checkpoint=checkpoint, device="cpu")
    request = IndexBuildRequest(out, encoder, csv=csv_path, split="test", kind="flat", batch_size=BATCH)
    build_index(request)
    index = SearchIndex.load(out)
    rows = index.metadata_for(np.arange(index.ntotal))
    return {row["path"]: index.reconstruct(row["id"]) for row in rows}


@pytest.mark.parametrize("amp", ["auto", "bf16"])
def test_evaluate_scores_bit_for_bit_the_vectors_index_build_stores(
    amp, tiny_checkpoint, csv_dataset, tmp_path, monkeypatch, capsys
):
    """On the CPU `auto` is float32 and `bf16` autocasts; either way both commands compute the same bits."""
    checkpoint = _with_amp(tiny_checkpoint, amp, tmp_path / "best.pt")
    evaluated = _evaluated_embeddings(monkeypatch, checkpoint, csv_dataset)
    stored = _indexed_vectors(checkpoint, csv_dataset, tmp_path / "index")
    capsys.readouterr()
    assert len(evaluated) == 12 and sorted(stored) == sorted(evaluated)
    for path, vector in stored.items():
        assert vector.dtype == evaluated[path].dtype == np.float32
        assert np.array_equal(vector, evaluated[path]), path


def test_the_encoder_runs_with_the_run_precision(tiny_checkpoint, csv_dataset, tmp_path):
    """`train.amp` reaches embed/index/serve as it reaches evaluation: bf16 autocast changes the low bits only."""
    images = sorted((csv_dataset.parent / "images").glob("test_*.png"))
    plain = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    autocast = ImageEncoder.from_checkpoint(_with_amp(tiny_checkpoint, "bf16", tmp_path / "bf16.pt"), device="cpu")
    assert plain.precision == FLOAT32 and autocast.precision == Precision(torch.bfloat16, channels_last=False)
    full, rounded = (encoder.embed_files(images, progress=False).embeddings for encoder in (plain, autocast))
    assert not np.array_equal(full, rounded)
    np.testing.assert_allclose(rounded, full, atol=0.05)


def test_precision_for_run_follows_runtime_device_rules():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert Precision.for_run(TrainConfig(amp="auto", channels_last=True), cpu) == FLOAT32
    assert Precision.for_run(TrainConfig(amp="auto", channels_last=True), gpu) == Precision(torch.bfloat16, True)
    assert Precision.for_run(TrainConfig(amp="none", channels_last=False), gpu) == FLOAT32
    assert Precision.for_run(TrainConfig(amp="bf16"), cpu) == Precision(torch.bfloat16, False)


def _modules_after_import(*modules: str) -> list[str]:
    """The `retrieval.*` modules loaded by importing `modules` in a fresh interpreter."""
    code = f"import sys, {', '.join(modules)}; print('\\n'.join(m for m in sys.modules if m.startswith('retrieval.')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return result.stdout.split()


@pytest.mark.slow
def test_serve_index_and_inference_import_no_training_code():
    loaded = _modules_after_import(
        "retrieval.serve",
        "retrieval.index",
        "retrieval.inference",
        "retrieval.inference.image_encoder",
        "retrieval.inference.sources",
        "retrieval.embedding_files.file_formats",
        "retrieval.cli.index",
        "retrieval.cli.embed",
        "retrieval.cli.serve",
    )
    assert "retrieval.inference.image_encoder" in loaded and "retrieval.serve.app" in loaded
    assert [name for name in loaded if name.startswith(("retrieval.train", "retrieval.evaluate"))] == []


@pytest.mark.slow
def test_evaluation_imports_no_index_or_serving_code():
    loaded = _modules_after_import("retrieval.evaluate.evaluator", "retrieval.cli.evaluate")
    assert "retrieval.inference.forward" in loaded
    assert [name for name in loaded if name.startswith(("retrieval.index", "retrieval.serve"))] == []
