"""Export directories whose files match their manifest but are wrong: one line and exit 2, never a traceback or a hang.

Each case copies the tests' real export (`TINY_BACKBONE`, 32 px RGB, a fixed `(B, 3, 32, 32)` input),
damages one file and records the damage in the manifest, as a hand-edited or half-copied
directory would look; `index build --model` and `serve --model` both refuse it.

That an undamaged export embeds is `tests/export/test_bundle_checks.py`'s.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from retrieval.errors import UserError
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.runtime.files import file_sha256
from tests.cli.errors import one_line_error
from tests.export.digits import flat_onnx_index

_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "truncated model": ({"truncate": True}, "onnxruntime cannot load"),
    "other channels": (
        {"channels": "L", "in_chans": 1, "mean": [0.5], "std": [0.5]},
        "takes tensor(float) (batch, 3, 32, 32), but preprocess.json makes float32 (B, 1, 32, 32) images (L, ",
    ),
    "other image size": ({"image_size": 48}, "but preprocess.json makes float32 (B, 3, 48, 48) images"),
    "huge image size": (
        {"image_size": 1_000_000},
        "preprocess.json.image_size must be an integer from 1 to 4096, got 1000000",
    ),
    "zero std": (
        {"std": [0, 0, 0]},
        "preprocess.json.std must be numbers from 0.001 to 1 (pixels in [0, 1] are divided by them), got (0",
    ),
    "nan mean": (
        {"mean": [float("nan"), 0.5, 0.5]},
        "preprocess.json.mean must be finite numbers in [0, 1] (of pixels in [0, 1]), got (nan, 0.5, 0.5)",
    ),
    # Hand edits that once loaded and embedded NaN, overflowed, or were read as another value (issue 36):
    "subnormal std": (
        {"std": [1e-45] * 3},
        "preprocess.json.std must be numbers from 0.001 to 1 (pixels in [0, 1] are divided by them), got (1e-45",
    ),
    "huge mean": (
        {"mean": [1e308] * 3},
        "preprocess.json.mean must be finite numbers in [0, 1] (of pixels in [0, 1]), got (1e+308",
    ),
    "tiny crop_pct": (
        {"resize_mode": "center_crop", "crop_pct": 1e-9},
        "preprocess.json.crop_pct must be in (0, 1] for center_crop, with image_size / crop_pct",
    ),
    "image_size as text": ({"image_size": "32"}, "preprocess.json.image_size must be int, got '32'"),
    "fractional image_size": ({"image_size": 32.7}, "preprocess.json.image_size must be int, got 32.7"),
    "image_size true": ({"image_size": True}, "preprocess.json.image_size must be int, got True"),
    "nested preprocess.json": ({"preprocess_text": "[" * 100_000 + "]" * 100_000}, "(RecursionError)"),
    "tflite kind": ({"manifest": {"kind": "tflite"}}, "manifest.json.kind must be one of onnx, got 'tflite'"),
    "other embedding_dim": (
        {"manifest": {"embedding_dim": 3072}},
        "gives 16-d embeddings, but manifest.json's embedding_dim is 3072",
    ),
}


def _damaged(exported: Path, folder: Path, change: dict[str, Any]) -> Path:
    """A copy of `exported` with `change` applied.

    `truncate`: half of model.onnx; `preprocess_text`: preprocess.json's whole text; `manifest`: manifest.json
    fields; any other key: a preprocess.json field.
    """
    copy = folder / "damaged"
    shutil.copytree(exported, copy)
    change = dict(change)
    if change.pop("truncate", False):
        model = (copy / "model.onnx").read_bytes()
        (copy / "model.onnx").write_bytes(model[: len(model) // 2])
    if "preprocess_text" in change:
        (copy / "preprocess.json").write_text(change.pop("preprocess_text"))
    manifest = {**json.loads((copy / "manifest.json").read_text()), **change.pop("manifest", {})}
    if change:
        preprocess = json.loads((copy / "preprocess.json").read_text())
        (copy / "preprocess.json").write_text(json.dumps({**preprocess, **change}))
    manifest["files"] = {name: file_sha256(copy / name) for name in manifest["files"]}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.fixture(scope="module")
def index_of_export(tmp_path_factory, exported, ten_digits) -> Path:
    """A flat index built with the undamaged export (`index build --model EXPORT --images DIR --type flat`)."""
    return flat_onnx_index(tmp_path_factory.mktemp("index") / "index", exported, ten_digits)


@pytest.mark.parametrize("case", list(_CASES))
def test_a_wrong_export_is_refused_in_one_line_by_index_build_and_serve(
    case, exported, ten_digits, index_of_export, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: pytest.fail("serve started with a wrong export"))
    change, message = _CASES[case]
    damaged = _damaged(exported, tmp_path, change)
    build = ["index", "build", "--model", str(damaged), "--images", str(ten_digits), "--out", str(tmp_path / "index")]
    assert message in one_line_error(capsys, build)
    assert not (tmp_path / "index").exists()
    serve = ["serve", "--index", str(index_of_export), "--model", str(damaged), "--port", "0"]
    assert message in one_line_error(capsys, serve)
    with pytest.raises(UserError, match="export the model again"):
        OnnxEncoder.from_export(damaged, device="cpu")


def test_the_error_names_the_model_file(exported, ten_digits, tmp_path, capsys) -> None:
    damaged = _damaged(exported, tmp_path, _CASES["truncated model"][0])
    build = ["index", "build", "--model", str(damaged), "--images", str(ten_digits), "--out", str(tmp_path / "index")]
    assert f"{damaged.resolve() / 'model.onnx'}" in one_line_error(capsys, build)
