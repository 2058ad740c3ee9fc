"""A CSV that is not UTF-8 is one line in every command that reads one (`train`, `evaluate`, `embed`, `index`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from tests.cli.errors import error_line
from tests.data.test_csv_encoding import recoded, with_cafe_row

NO_WORKERS = ["--num-workers", "0"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, csv_dataset_factory) -> Path:
    """The dataset CSV of tests/data/test_csv_encoding.py: small, UTF-8, its last row's label `café`."""
    return with_cafe_row(csv_dataset_factory(tmp_path_factory.mktemp("encoding") / "data", 2, 2, 2))


@pytest.mark.parametrize("command", ["train", "evaluate", "embed", "index build", "index add"])
def test_every_command_that_reads_a_csv_refuses_latin_1_in_one_line(
    command, dataset, tiny_checkpoint, tmp_path, capsys
):
    latin = recoded(dataset, "latin.csv", "latin-1")
    data = ["--set", "data.name=csv", "--set", f"data.path={latin}", "--set", "train.device=cpu"]
    argv = {
        "train": ["train", *data, "--output-dir", str(tmp_path / "run")],
        "evaluate": ["evaluate", "--checkpoint", str(tiny_checkpoint), *data],
        "embed": ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(latin), "--out", str(tmp_path / "e.npz")],
        "index build": ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(latin)],
        "index add": ["index", "add", "--index", str(tmp_path / "index"), "--csv", str(latin)],
    }[command]
    if command == "index add":  # an index to add to, built as `index build --type flat` builds it
        encoder = EncoderChoice(checkpoint=tiny_checkpoint)
        build_index(IndexBuildRequest(tmp_path / "index", encoder, csv=dataset, kind="flat"))
        capsys.readouterr()
    if command == "index build":
        argv += ["--out", str(tmp_path / "index")]
    extra = [] if command in ("train", "evaluate") else NO_WORKERS
    assert main([*argv, *extra]) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {latin}:") and "not UTF-8 text" in line
