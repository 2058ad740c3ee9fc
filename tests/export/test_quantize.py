"""`retrieval export --quantize int8`: the int8 bundle embeds like the float one and records its drop.

Its refusals (a drop past the tolerance, non-finite embeddings, options checked first) are the command's one-line
errors: `tests/cli/test_export_quantize_cli.py`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.export.bundle import MANIFEST_FILE, MODEL_FILE
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.onnx_export import export_checkpoint, export_onnx
from retrieval.export.quantize import write_int8_model
from retrieval.export.quantizers import QuantizeRequest
from tests.export.digits import on_digits


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, digits_checkpoint) -> Path:
    """The int8 export of `digits_checkpoint` trained on digits with a 20 % validation holdout."""
    folder = tmp_path_factory.mktemp("quantized")
    checkpoint = on_digits(digits_checkpoint, folder / "best.pt", val_fraction=0.2)
    out = folder / "int8"
    # A wide tolerance: this test is about what the bundle holds, not about this checkpoint's drop.
    # What `export --quantize int8 --calibration-images 32 --tolerance 0.5` runs.
    export_checkpoint(checkpoint, out, quantize=QuantizeRequest("int8", calibration_images=32, tolerance=0.5))
    return out


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
    build_index(IndexBuildRequest(tmp_path / "index", EncoderChoice(model=quantized), images=folder, kind="flat"))


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
