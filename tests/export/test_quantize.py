"""`retrieval export --quantize int8`: the int8 bundle embeds like the float one, records its drop, or is refused."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.cli.main import main
from retrieval.export.bundle import MANIFEST_FILE, MODEL_FILE
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.onnx_export import export_onnx
from retrieval.export.quantize import write_int8_model


def _on_digits(source: Path, path: Path, **data: object) -> Path:
    """`source` with its run config pointed at the digits demo data (and `data` keys), saved to `path`."""
    base = Checkpoint.read(source)
    config = copy.deepcopy(base.run_config)
    config["data"].update(name="digits", **data)
    dataclasses.replace(base, run_config=config).save(path)
    return path


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, digits_checkpoint) -> Path:
    """The int8 export of `digits_checkpoint` trained on digits with a 20 % validation holdout."""
    folder = tmp_path_factory.mktemp("quantized")
    checkpoint = _on_digits(digits_checkpoint, folder / "best.pt", val_fraction=0.2)
    out = folder / "int8"
    args = ["export", "--checkpoint", str(checkpoint), "--out", str(out), "--quantize", "int8"]
    # A wide tolerance: this test is about what the bundle holds, not about this checkpoint's drop.
    assert main([*args, "--calibration-images", "32", "--tolerance", "0.5"]) == 0
    return out


def _error(capsys, args: list[str]) -> str:
    """The one line `retrieval` prints on stderr for a user error (exit code 2)."""
    capsys.readouterr()
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.slow
def test_the_int8_bundle_embeds_like_the_float_one_through_onnx_encoder(quantized, exported, digits_images):
    model = onnx.load(str(quantized / MODEL_FILE))
    assert any(node.op_type == "QuantizeLinear" for node in model.graph.node)
    images = [Image.open(path) for path in digits_images[::30]]
    int8 = OnnxEncoder.from_export(quantized, device="cpu").embed_images(images)
    reference = OnnxEncoder.from_export(exported, device="cpu").embed_images(images)
    np.testing.assert_allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(int8 * reference, axis=1)
    assert cosine.min() > 0.9 and cosine.mean() > 0.97


@pytest.mark.slow
def test_the_manifest_records_calibration_metrics_and_drop(quantized, capsys):
    record = json.loads((quantized / MANIFEST_FILE).read_text())["quantization"]
    assert record["calibration_images"] == 32 and record["tolerance"] == 0.5
    assert record["split"] == "val" and record["calibration_split"] == "train"
    for name in ("recall@1", "map@r"):
        assert 0 < record["float"][name] <= 1 and 0 < record["int8"][name] <= 1
        assert record["drop"][name] == pytest.approx(record["float"][name] - record["int8"][name])
        assert record["drop"][name] <= 0.5
    assert 0.9 < record["embedding_cosine"]["min"] <= record["embedding_cosine"]["mean"] <= 1 + 1e-6
    assert 0.5 < record["nearest_neighbor_agreement"] <= 1


@pytest.mark.slow
def test_index_build_takes_the_int8_bundle(quantized, digits_images, tmp_path):
    folder = tmp_path / "images"
    for path in digits_images[::60]:
        (folder / path.parent.name).mkdir(parents=True, exist_ok=True)
        (folder / path.parent.name / path.name).write_bytes(path.read_bytes())
    args = ["index", "build", "--model", str(quantized), "--images", str(folder), "--out", str(tmp_path / "index")]
    assert main([*args, "--type", "flat", "--num-workers", "0"]) == 0


@pytest.mark.slow
def test_a_drop_past_the_tolerance_is_refused_and_writes_nothing(capsys, digits_checkpoint, tmp_path):
    # No validation split: the test split is measured, and named in the refusal.
    checkpoint = _on_digits(digits_checkpoint, tmp_path / "best.pt")
    out = tmp_path / "refused"
    args = ["export", "--checkpoint", str(checkpoint), "--out", str(out), "--quantize", "int8"]
    line = _error(capsys, [*args, "--calibration-images", "8", "--tolerance", "-1"])
    assert "loses too much on the test split" in line and "tolerance -1" in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("broken", [np.nan, np.inf])
def test_an_int8_model_that_gives_non_finite_embeddings_is_refused(
    capsys, digits_checkpoint, tmp_path, monkeypatch, broken
):
    """40 of 100 images embedded as NaN (or inf) by the int8 model: scoring would drop them as unreadable and pass."""
    from retrieval.export import quantize

    embed = quantize.embed_dataset
    calls = []

    def embed_some_broken(*args, **kwargs):
        embeddings = embed(*args, **kwargs)
        calls.append(len(embeddings))
        if len(calls) == 2:  # the second model embedded is the int8 one
            embeddings[:40] = broken
        return embeddings

    monkeypatch.setattr(quantize, "embed_dataset", embed_some_broken)
    monkeypatch.setattr(quantize, "write_int8_model", lambda source, target, _: shutil.copyfile(source, target))
    checkpoint = _on_digits(digits_checkpoint, tmp_path / "best.pt", val_fraction=0.1)  # ~90 validation images
    out = tmp_path / "int8"
    args = ["export", "--checkpoint", str(checkpoint), "--out", str(out), "--quantize", "int8"]
    line = _error(capsys, [*args, "--calibration-images", "8", "--tolerance", "1"])
    assert f"the int8 model gives non-finite (NaN or inf) embeddings for 40 of {calls[0]} val images" in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("flip_average", [False, True])
def test_the_head_and_the_normalization_stay_float(checkpoint_factory, tmp_path, flip_average):
    checkpoint = Checkpoint.read(checkpoint_factory(tmp_path / "best.pt", flip_average=flip_average))
    export_onnx(checkpoint.embedder().eval(), tmp_path / "float.onnx", in_chans=3, image_size=32)
    noise = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    write_int8_model(tmp_path / "float.onnx", tmp_path / "int8.onnx", [noise])
    nodes = onnx.load(str(tmp_path / "int8.onnx")).graph.node
    heads = [node for node in nodes if node.op_type == "Gemm"]
    assert len(heads) == (2 if flip_average else 1)
    assert all(node.input[1] == "head.weight" for node in heads)  # the float weight, no DequantizeLinear
    after_head = {output for node in heads for output in node.output}
    for node in nodes:  # nothing downstream of the head is quantized
        assert node.op_type != "QuantizeLinear" or not after_head.intersection(node.input)
        if after_head.intersection(node.input):
            after_head.update(node.output)
    assert any(node.op_type == "QuantizeLinear" for node in nodes)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tolerance", "0.02"], "apply to --quantize int8 only"),
        (["--quantize", "int8", "--calibration-images", "0"], "--calibration-images must be >= 1"),
        (["--quantize", "int8", "--tolerance", "nan"], "--tolerance must be a number"),
        (["--quantize", "int8", "--set", "train.epochs=2"], "data.* keys only"),
    ],
)
def test_quantization_options_are_checked_before_exporting(capsys, tiny_checkpoint, tmp_path, extra, message):
    out = tmp_path / "out"
    assert message in _error(capsys, ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out), *extra])
    assert not out.exists()
