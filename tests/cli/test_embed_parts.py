"""`retrieval embed --out DIR/` on the command line: under torchrun, after a kill, and its mistakes in one line.

42 images of 40 px (one unreadable), a 16-d `TINY_BACKBONE` at 32 px, parts of 8 images: 6 parts (conftest's
`parts_dataset`, embedded once in one process as `single_process_parts`). What one process writes, and a rerun
of a finished or damaged job, is tested without the command line in `tests/inference/test_embed_run.py`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import read_embeddings
from retrieval.embedding_files.parts_layout import SUCCESS_FILE, part_path, read_embedding_parts
from retrieval.inference.parts_job import KILL_AFTER_PARTS
from tests.inference.parts_checks import assert_same

PARTS = 6
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}


def _args(checkpoint: Path, csv_path: Path, out: str) -> list[str]:
    options = ["--part-rows", "8", "--batch-size", "5", "--num-workers", "0", "--device", "cpu"]
    return ["embed", "--checkpoint", str(checkpoint), "--csv", str(csv_path), "--out", out, *options]


@pytest.mark.slow
def test_two_processes_write_the_same_parts_as_one(tmp_path, tiny_checkpoint, parts_dataset, single_process_parts):
    out = tmp_path / "parts"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "retrieval"]
    done = subprocess.run(
        [*torchrun, *_args(tiny_checkpoint, parts_dataset, f"{out}/")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if line.startswith("embeddings: ")]
    assert summaries == [
        f"embeddings: {out}/ (41 x 16 in 6 part(s) of 8 images; 6 embedded now, 0 already done; "
        "1 unreadable image(s) skipped)"
    ]
    for part in range(PARTS):  # part by part: the same rows, whichever process wrote them
        assert_same(read_embeddings(part_path(out, part)), read_embeddings(part_path(single_process_parts, part)))
    assert_same(read_embedding_parts(out), read_embedding_parts(single_process_parts))


@pytest.mark.slow
def test_a_killed_job_resumes_to_what_an_uninterrupted_one_writes(
    tmp_path, tiny_checkpoint, parts_dataset, single_process_parts, capsys
):
    out = tmp_path / "parts"
    command = [sys.executable, "-m", "retrieval", *_args(tiny_checkpoint, parts_dataset, f"{out}/")]
    killed = subprocess.run(command, env={**ENV, KILL_AFTER_PARTS: "2"}, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (out / SUCCESS_FILE).exists()
    assert sorted(path.name for path in out.glob("part-*.json")) == ["part-00000.json", "part-00001.json"]
    finished = {part: part_path(out, part).stat().st_mtime_ns for part in (0, 1)}
    capsys.readouterr()

    assert main(_args(tiny_checkpoint, parts_dataset, f"{out}/")) == 0
    assert "4 embedded now, 2 already done" in capsys.readouterr().out
    assert {part: part_path(out, part).stat().st_mtime_ns for part in (0, 1)} == finished
    assert_same(read_embedding_parts(out), read_embedding_parts(single_process_parts))


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
    tmp_path,
    tiny_checkpoint,
    parts_dataset,
    single_process_parts,
    capsys,
    monkeypatch,
    out,
    extra,
    environment,
    message,
):
    monkeypatch.chdir(tmp_path)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    out = str(single_process_parts) if out == "SINGLE" else out
    args = ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(parts_dataset), "--out", out, *extra]
    assert main([*args, "--split", "test" if out == str(single_process_parts) else "all", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not any(tmp_path.iterdir())
