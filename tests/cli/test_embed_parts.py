"""`retrieval embed --out DIR/`: parts that do not depend on the number of processes, and a resumable job.

42 images of 40 px (one unreadable), a 16-d resnet10t at 32 px, parts of 8 images: 6 parts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import read_embeddings
from retrieval.embedding_files.parts_layout import SUCCESS_FILE, part_path, read_embedding_parts
from retrieval.errors import UserError
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.inference.parts_job import KILL_AFTER_PARTS

PARTS = 6
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}


def _args(checkpoint: Path, csv_path: Path, out: str) -> list[str]:
    options = ["--part-rows", "8", "--batch-size", "5", "--num-workers", "0", "--device", "cpu"]
    return ["embed", "--checkpoint", str(checkpoint), "--csv", str(csv_path), "--out", out, *options]


def _assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """The same rows in the same order; embeddings equal to float32 rounding (other thread counts sum otherwise)."""
    assert actual.keys() == expected.keys()
    for key in expected:
        if key == "embeddings":
            np.testing.assert_allclose(actual[key], expected[key], rtol=0, atol=1e-6)
        else:
            assert actual[key].tolist() == expected[key].tolist(), key


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, csv_dataset_factory):
    csv_path = csv_dataset_factory(tmp_path_factory.mktemp("data"), train_classes=4, test_classes=3, per_class=6)
    (csv_path.parent / "images/train_1_3.png").write_bytes(b"not an image")  # row 9, in part 1
    return csv_path


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_checkpoint, dataset):
    """One process, no torchrun: the reference every other run must equal."""
    out = tmp_path_factory.mktemp("single") / "parts"
    assert main(_args(tiny_checkpoint, dataset, f"{out}/")) == 0
    return out


def test_one_process_writes_the_layout_with_the_rows_of_a_one_file_output(tmp_path, tiny_checkpoint, dataset, single):
    names = sorted(path.name for path in single.iterdir())
    assert names == sorted(
        ["_SUCCESS", "_job.json", *(f"part-{p:05d}.{ext}" for p in range(PARTS) for ext in ("parquet", "json"))]
    )
    one_file = tmp_path / "embeddings.parquet"
    assert main(["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(dataset), "--out", str(one_file)]) == 0
    expected = read_embeddings(one_file)
    assert len(expected["ids"]) == 41
    _assert_same(read_embedding_parts(single), expected)
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    reference = encoder.embed_files(expected["ids"].tolist(), batch_size=7, progress=False).embeddings
    np.testing.assert_allclose(read_embedding_parts(single)["embeddings"], reference, atol=1e-5)


@pytest.mark.slow
def test_two_processes_write_the_same_parts_as_one(tmp_path, tiny_checkpoint, dataset, single):
    out = tmp_path / "parts"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "retrieval"]
    done = subprocess.run(
        [*torchrun, *_args(tiny_checkpoint, dataset, f"{out}/")], env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if line.startswith("embeddings: ")]
    assert summaries == [
        f"embeddings: {out}/ (41 x 16 in 6 part(s) of 8 images; 6 embedded now, 0 already done; "
        "1 unreadable image(s) skipped)"
    ]
    for part in range(PARTS):  # part by part: the same rows, whichever process wrote them
        _assert_same(read_embeddings(part_path(out, part)), read_embeddings(part_path(single, part)))
    _assert_same(read_embedding_parts(out), read_embedding_parts(single))


@pytest.mark.slow
def test_a_killed_job_resumes_to_what_an_uninterrupted_one_writes(tmp_path, tiny_checkpoint, dataset, single, capsys):
    out = tmp_path / "parts"
    command = [sys.executable, "-m", "retrieval", *_args(tiny_checkpoint, dataset, f"{out}/")]
    killed = subprocess.run(command, env={**ENV, KILL_AFTER_PARTS: "2"}, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (out / SUCCESS_FILE).exists()
    assert sorted(path.name for path in out.glob("part-*.json")) == ["part-00000.json", "part-00001.json"]
    finished = {part: part_path(out, part).stat().st_mtime_ns for part in (0, 1)}
    capsys.readouterr()

    assert main(_args(tiny_checkpoint, dataset, f"{out}/")) == 0
    assert "4 embedded now, 2 already done" in capsys.readouterr().out
    assert {part: part_path(out, part).stat().st_mtime_ns for part in (0, 1)} == finished
    _assert_same(read_embedding_parts(out), read_embedding_parts(single))


def test_a_rerun_of_a_finished_job_embeds_nothing(tiny_checkpoint, dataset, single, capsys, monkeypatch):
    before = {path.name: path.read_bytes() for path in single.glob("part-*")}

    def no_embedding(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished part was embedded again")

    monkeypatch.setattr(ImageEncoder, "embed_files", no_embedding)
    assert main(_args(tiny_checkpoint, dataset, str(single))) == 0  # an existing folder: no trailing slash needed
    assert "0 embedded now, 6 already done" in capsys.readouterr().out
    assert {path.name: path.read_bytes() for path in single.glob("part-*")} == before


def test_a_corrupt_part_is_detected_and_rewritten_by_a_rerun(tmp_path, tiny_checkpoint, dataset, single, capsys):
    out = shutil.copytree(single, tmp_path / "parts")
    damaged = part_path(out, 3)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    with pytest.raises(UserError, match="part-00003.parquet is missing or does not match its .json"):
        read_embedding_parts(out)
    capsys.readouterr()
    assert main(_args(tiny_checkpoint, dataset, f"{out}/")) == 0
    assert "1 embedded now, 5 already done" in capsys.readouterr().out
    _assert_same(read_embedding_parts(out), read_embedding_parts(single))


@pytest.mark.parametrize(
    ("out", "extra", "environment", "message"),
    [
        ("x.parquet", [], {"WORLD_SIZE": "2"}, "is one file, but torchrun started several processes; pass a folder"),
        ("x.parquet", ["--part-rows", "8"], {}, "--part-rows is for a folder of parts; pass --out x/"),
        ("x/", ["--part-rows", "0"], {}, "--part-rows must be >= 1, got 0"),
        ("x", [], {}, "end the name with .npz, .npy, .parquet to choose the format, or with / for a folder"),
        ("SINGLE", ["--part-rows", "4"], {}, "holds the parts of another embed job \\(its input_rows, part_rows"),
    ],
)
def test_bad_part_arguments_exit_2_with_one_line(
    tmp_path, tiny_checkpoint, dataset, single, capsys, monkeypatch, out, extra, environment, message
):
    monkeypatch.chdir(tmp_path)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    out = str(single) if out == "SINGLE" else out
    args = ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(dataset), "--out", out, *extra]
    assert main([*args, "--split", "test" if out == str(single) else "all", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not any(tmp_path.iterdir())
