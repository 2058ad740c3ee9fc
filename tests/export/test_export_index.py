"""Exports made, checked and read back; `index build|query|add --model` and `serve` over an index built from an export.

The commands' one-line refusals, and what `index add` prints, are `tests/cli/test_export_cli.py`'s."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from torch import nn

from retrieval.errors import UserError
from retrieval.export.bundle import read_export
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_add import IndexAddRequest, add_to_index
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.export.onnx_export import export_onnx
from retrieval.runtime.files import file_sha256
from retrieval.serve import create_app
from tests.export.digits import index_copy_and_new_digits


def _query(index_dir: Path, images: list[Path], *model: str) -> list[list[str]]:
    """The result paths of `index query -k 5 [--model DIR]` for each image, through `query_index`."""
    exported = Path(model[1]) if model else None  # `--model DIR`, the one flag the tests pass
    answers = query_index(QueryRequest(index_dir, images=tuple(images), k=5, model=exported)).answers
    return [[result.path for result in answer.results] for answer in answers]


def test_index_build_and_query_with_an_export_find_what_the_checkpoint_finds(
    onnx_index, exported, digits_checkpoint, digits_gallery, tmp_path
):
    queries = sorted(digits_gallery.rglob("*.png"))[::7]
    by_export = _query(onnx_index, queries, "--model", str(exported))
    assert _query(onnx_index, queries) == by_export  # the export the index records
    assert [paths[0] for paths in by_export] == [str(query.resolve()) for query in queries]
    checkpoint_index = tmp_path / "checkpoint_index"
    encoder = EncoderChoice(checkpoint=digits_checkpoint)
    build_index(IndexBuildRequest(checkpoint_index, encoder, images=digits_gallery, kind="flat"))
    assert _query(checkpoint_index, queries) == by_export
    manifest = json.loads((onnx_index / "manifest.json").read_text())
    assert manifest["model"]["onnx_sha256"] == file_sha256(exported / "model.onnx")


def test_a_changed_or_incomplete_export_is_refused(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    with open(broken / "model.onnx", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(UserError, match="interrupted or changed"):
        read_export(broken)
    (broken / "manifest.json").unlink()
    with pytest.raises(UserError, match="has no manifest.json"):
        read_export(broken)
    with pytest.raises(UserError, match="does not exist"):
        read_export(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"embedding_dim": "128"}, "manifest.json.embedding_dim must be int, got '128'"),
        ({"match_threshold": {"fmr": 0.001}}, "manifest.json.match_threshold"),
        ({"source_checkpoint_sha256": None}, "manifest.json.source_checkpoint_sha256 must be"),
        ({"format": 2}, "has format 2, this version reads 1"),
    ],
)
def test_a_hand_edited_manifest_is_refused_naming_the_field(exported, tmp_path, edit, message):
    """Files that match their sha256 but a manifest field of the wrong type: one line naming the field."""
    edited = tmp_path / "edited"
    shutil.copytree(exported, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    (edited / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        read_export(edited)
    assert "\n" not in str(caught.value)


def test_an_export_manifest_reads_back_as_written(exported):
    """The typed manifest keeps every key the export wrote, under its own name (`model_config`)."""
    written = json.loads((exported / "manifest.json").read_text())
    assert read_export(exported).manifest.record() == written


class _CumulativeMax(nn.Module):
    """A model with an op the ONNX exporter has no translation for (`aten.cummax`)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.cummax(images.flatten(1), dim=1).values


def test_an_op_without_onnx_translation_is_refused_naming_it(tmp_path):
    with pytest.raises(UserError, match=r"op aten\.cummax has no ONNX translation") as raised:
        export_onnx(_CumulativeMax(), tmp_path / "model.onnx", in_chans=1, image_size=4)
    assert "\n" not in str(raised.value) and not (tmp_path / "model.onnx").exists()


def test_serve_searches_an_index_built_from_an_export(onnx_index, exported, digits_gallery):
    image = sorted(digits_gallery.rglob("*.png"))[3]
    with TestClient(create_app(onnx_index, model_dir=exported, device="cpu", reload_interval=0)) as client:
        info = client.get("/info").json()
        answer = client.post("/search", files={"image": ("q.png", io.BytesIO(image.read_bytes()), "image/png")})
    assert info["model"]["onnx_sha256"] == file_sha256(exported / "model.onnx")
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["path"].endswith(image.name)


def test_index_add_embeds_with_the_export_the_index_records(onnx_index, exported, digits_images, tmp_path):
    index_dir, new = index_copy_and_new_digits(onnx_index, digits_images, tmp_path)
    report = add_to_index(IndexAddRequest(index_dir, images=new))  # what `index add --images NEW` runs
    assert len(report.ids) == 6  # the command prints it: tests/cli/test_export_cli.py
    found = _query(index_dir, sorted(new.iterdir()), "--model", str(exported))
    assert [paths[0] for paths in found] == [str(path.resolve()) for path in sorted(new.iterdir())]
