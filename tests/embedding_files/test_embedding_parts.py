"""Embedding parts without a model: what `write_part` writes is what the readers give back, and damage is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from retrieval.core.column_types import typed_table
from retrieval.embedding_files.parts_layout import (
    SUCCESS_FILE,
    EmbedJob,
    finish_parts,
    iter_embedding_parts,
    part_finished,
    part_path,
    read_embedding_parts,
    read_success,
    start_parts,
    write_part,
)
from retrieval.errors import UserError

JOB = EmbedJob(source={"csv": "/data.csv", "split": "all"}, checkpoint_sha256="abc", part_rows=3, input_rows=7, dim=4)


def _rows(first: int, count: int) -> pa.Table:
    """Rows typed as the whole source is (labels int64 in every part, the empty one too)."""
    columns = {
        "path": [f"/images/{i}.png" for i in range(first, first + count)],
        "label": [str(i % 2) for i in range(first, first + count)],
        "split": ["test"] * count,
    }
    return typed_table(columns, {"label": "int", "split": "str"})


@pytest.fixture
def parts(tmp_path):
    """7 input rows in parts of 3: part 1 lost every image (0 rows), part 2 holds the last input row."""
    rng = np.random.default_rng(0)
    written = {0: rng.normal(size=(3, 4)).astype(np.float32), 1: np.zeros((0, 4), np.float32)}
    written[2] = rng.normal(size=(1, 4)).astype(np.float32)
    start_parts(tmp_path, JOB)
    for part, embeddings in written.items():
        write_part(tmp_path, part, 3 * part, embeddings, _rows(3 * part, len(embeddings)), 3 - len(embeddings))
    return tmp_path, written


def test_parts_read_back_whole_and_one_by_one_with_one_label_type(parts):
    directory, written = parts
    success = finish_parts(directory, JOB)
    assert success.rows == 4 and success.skipped == 3 + 2
    assert success.parts == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert json.loads((directory / SUCCESS_FILE).read_text()) == success.model_dump(exclude_unset=True)
    assert json.loads(part_path(directory, 2).with_suffix(".json").read_text())["first_row"] == 6

    each = list(iter_embedding_parts(directory))
    assert [len(part["ids"]) for part in each] == [3, 0, 1]
    for part, embeddings in zip(each, written.values(), strict=True):
        np.testing.assert_array_equal(part["embeddings"], embeddings)
        assert part["embeddings"].shape[1] == 4 and part["labels"].dtype == np.int64  # also the empty part
    whole = read_embedding_parts(directory)
    np.testing.assert_array_equal(whole["embeddings"], np.concatenate(list(written.values())))
    assert whole["ids"].tolist() == [f"/images/{i}.png" for i in (0, 1, 2, 6)]
    assert whole["labels"].tolist() == [0, 1, 0, 0] and whole["split"].tolist() == ["test"] * 4


def test_a_directory_without_success_is_incomplete(parts):
    directory, _ = parts
    with pytest.raises(UserError, match=r"^embedding .* is incomplete: rerun the same embed command to resume it$"):
        read_embedding_parts(directory)
    with pytest.raises(UserError, match="embedding directory not found"):
        next(iter_embedding_parts(directory / "missing"))


def test_a_changed_part_is_refused_and_no_longer_counts_as_finished(parts):
    directory, _ = parts
    finish_parts(directory, JOB)
    path = part_path(directory, 2)
    assert part_finished(directory, 2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert not part_finished(directory, 2)
    first = iter_embedding_parts(directory)
    assert len(next(first)["ids"]) == 3  # parts before the damaged one stream as usual
    with pytest.raises(UserError, match=r"part-00002.parquet is missing or does not match its .json \(sha256\)"):
        read_embedding_parts(directory)


def test_a_missing_part_or_another_job_is_refused(parts):
    directory, _ = parts
    with pytest.raises(UserError, match="holds the parts of another embed job \\(its checkpoint_sha256, part_rows"):
        start_parts(directory, JOB.model_copy(update={"part_rows": 4, "checkpoint_sha256": "def"}))
    left_by_a_kill = directory / f".{part_path(directory, 1).name}.4242.tmp"
    left_by_a_kill.write_bytes(b"half a part")
    start_parts(directory, JOB)  # the same job: resumed
    assert not left_by_a_kill.exists()
    part_path(directory, 1).with_suffix(".json").unlink()
    with pytest.raises(UserError, match="incomplete: part 1 is not there"):
        finish_parts(directory, JOB)
    assert not (directory / SUCCESS_FILE).exists()


def test_no_readable_image_at_all_writes_no_success(tmp_path):
    job = JOB.model_copy(update={"input_rows": 3})
    start_parts(tmp_path, job)
    write_part(tmp_path, 0, 0, np.zeros((0, 4), np.float32), _rows(0, 0), 3)
    with pytest.raises(UserError, match="none of the 3 images could be read"):
        finish_parts(tmp_path, job)


@pytest.mark.slow
def test_the_readers_import_no_torch():
    code = "import sys, retrieval.embedding_files.parts_layout; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"part": 2', r"part-00002.json is not valid JSON \(EOF while parsing"),
        ('{"part": 2}', r"part-00002.json.first_row is missing; rerun the same embed command to rewrite it"),
        ('{"part": 2, "first_row": 6, "rows": "one", "sha256": "x", "dim": 4}', "part-00002.json.rows must be int"),
    ],
)
def test_a_damaged_part_record_is_one_line_naming_the_file_and_the_part_is_written_again(parts, text, message):
    directory, _ = parts
    part_path(directory, 2).with_suffix(".json").write_text(text)
    with pytest.raises(UserError, match=message) as caught:
        finish_parts(directory, JOB)
    assert "\n" not in str(caught.value)
    assert not part_finished(directory, 2)  # the rerun the message asks for rewrites it


def test_a_damaged_success_record_is_one_line(parts):
    directory, _ = parts
    finish_parts(directory, JOB)
    (directory / SUCCESS_FILE).write_text('{"rows": 4, "dim": 4}')
    with pytest.raises(UserError, match=r"_SUCCESS.parts is missing; rerun the same embed command"):
        read_embedding_parts(directory)


def test_a_job_written_before_the_source_was_typed_resumes_and_its_success_reads(parts):
    """`_job.json` and `_SUCCESS` hold the source as the command line gave it (no null keys), old and new alike."""
    directory, _ = parts
    written = json.loads((directory / "_job.json").read_text())
    assert written["source"] == {"csv": "/data.csv", "split": "all"}
    start_parts(directory, JOB)  # the same job: resumed, not "another job"
    finish_parts(directory, JOB)
    assert json.loads((directory / SUCCESS_FILE).read_text())["source"] == written["source"]
    assert read_success(directory).source == JOB.source


def test_a_success_record_whose_source_has_the_wrong_type_names_it(parts):
    directory, _ = parts
    finish_parts(directory, JOB)
    success = json.loads((directory / SUCCESS_FILE).read_text())
    (directory / SUCCESS_FILE).write_text(json.dumps({**success, "source": {"csv": 3}}))
    with pytest.raises(UserError, match=r"_SUCCESS.source must be .*got 3; rerun the same embed command"):
        read_success(directory)
