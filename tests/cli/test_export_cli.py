"""`retrieval export` and `index query|add --model` refused in one line (exit code 2), and `index add`'s printed line
over an index built from an export.

What exports hold and how indexes built from them search is tested as library calls in `tests/export/`."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest
import torch

from retrieval.cli.main import main
from retrieval.export import onnx_export
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.runtime.files import file_sha256
from tests.cli.errors import one_line_error
from tests.export.digits import index_copy_and_new_digits


def test_another_model_is_refused_in_one_line(
    capsys, onnx_index, exported, digits_checkpoint, digits_gallery, tmp_path
):
    other = tmp_path / "other"
    shutil.copytree(exported, other)
    model = onnx.load(other / "model.onnx")
    model.doc_string = "the same graph, another file: another model as far as an index can tell"
    onnx.save(model, other / "model.onnx")
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = file_sha256(other / "model.onnx")
    (other / "manifest.json").write_text(json.dumps(manifest))
    query = ["index", "query", "--index", str(onnx_index), "--image", str(next(digits_gallery.rglob("*.png")))]
    assert "is not the one this index was built with" in one_line_error(capsys, [*query, "--model", str(other)])
    assert "pass --model DIR" in one_line_error(capsys, [*query, "--checkpoint", str(digits_checkpoint)])
    add = ["index", "add", "--index", str(onnx_index), "--images", str(digits_gallery), "--model", str(other)]
    assert "is not the one this index was built with" in one_line_error(capsys, add)


def test_a_checkpoint_index_refuses_an_export(capsys, tiny_checkpoint, exported, digits_gallery, tmp_path):
    index_dir = tmp_path / "index"
    build_index(
        IndexBuildRequest(index_dir, EncoderChoice(checkpoint=tiny_checkpoint), images=digits_gallery, kind="flat")
    )
    query = ["index", "query", "--index", str(index_dir), "--image", str(next(digits_gallery.rglob("*.png")))]
    assert "was not built with an export" in one_line_error(capsys, [*query, "--model", str(exported)])


def test_the_export_command_refuses_in_one_line(capsys, monkeypatch, tiny_checkpoint, tmp_path):
    def fail(*args, **kwargs):
        raise torch.onnx.OnnxExporterError("No ONNX function found for <OpOverload(op='aten.fancy', overload='x')>")

    monkeypatch.setattr(torch.onnx, "export", fail)
    line = one_line_error(capsys, ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "out")])
    assert "op aten.fancy has no ONNX translation" in line
    assert "checkpoint not found" in one_line_error(
        capsys, ["export", "--checkpoint", str(tmp_path / "no.pt"), "--out", "x"]
    )


@pytest.mark.slow
def test_an_export_refused_on_parity_writes_nothing(capsys, monkeypatch, tiny_checkpoint, tmp_path):
    monkeypatch.setattr(onnx_export, "PARITY_TOLERANCE", -1.0)
    out = tmp_path / "out"
    line = one_line_error(capsys, ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out)])
    assert "differ from PyTorch's" in line and "nothing was written" in line
    assert not out.exists()


def test_index_add_prints_the_vectors_it_embedded_with_the_export(capsys, onnx_index, digits_images, tmp_path):
    """The printed line of `test_index_add_embeds_with_the_export_the_index_records`
    (`tests/export/test_export_index.py`), which adds the same 6 images through `add_to_index`."""
    index_dir, new = index_copy_and_new_digits(onnx_index, digits_images, tmp_path)
    assert main(["index", "add", "--index", str(index_dir), "--images", str(new), "--num-workers", "0"]) == 0
    assert "added 6 vectors" in capsys.readouterr().out
