"""CSV files in other encodings: a byte-order mark is read through, anything not UTF-8 is one line in every command."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.data import read_csv_splits
from retrieval.data.csv_dataset import IMAGE_LIST_CSV, read_csv_rows
from retrieval.errors import UserError

NO_WORKERS = ["--num-workers", "0"]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, csv_dataset_factory) -> Path:
    """A small dataset CSV (UTF-8, no byte-order mark) whose last row's label is `café`."""
    csv_path = csv_dataset_factory(tmp_path_factory.mktemp("encoding") / "data", 2, 2, 2)
    lines = csv_path.read_text().splitlines()
    path, _, split = lines[-1].split(",")
    csv_path.write_text("\n".join([*lines, f"{path},café,{split}"]) + "\n")
    return csv_path


def _recoded(csv_path: Path, name: str, encoding: str) -> Path:
    """The same CSV beside the original (its image paths still resolve), written in another encoding."""
    copy = csv_path.with_name(name)
    copy.write_bytes(csv_path.read_text().encode(encoding))
    return copy


def test_a_byte_order_mark_is_not_part_of_the_first_column_name(dataset):
    with_bom = _recoded(dataset, "bom.csv", "utf-8-sig")
    assert with_bom.read_bytes().startswith(codecs.BOM_UTF8)
    assert read_csv_rows(with_bom, IMAGE_LIST_CSV) == read_csv_rows(dataset, IMAGE_LIST_CSV)
    splits, plain = read_csv_splits(with_bom), read_csv_splits(dataset)
    assert splits["test"].paths == plain["test"].paths and "café" in splits["test"].class_names


def test_a_latin_1_csv_names_the_file_line_and_byte_and_asks_for_utf_8(dataset):
    latin = _recoded(dataset, "latin.csv", "latin-1")
    offset = latin.read_bytes().index("é".encode("latin-1"))
    line = len(latin.read_text(encoding="latin-1").splitlines())  # the last row holds the label café
    with pytest.raises(UserError) as caught:
        read_csv_rows(latin)
    assert str(caught.value) == (
        f"{latin}:{line}: not UTF-8 text (byte 0xe9 at byte offset {offset}); "
        "re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`, or Excel's CSV UTF-8)"
    )
    utf16 = _recoded(dataset, "utf16.csv", "utf-16")  # Excel's "Unicode text": a UTF-16 byte-order mark
    with pytest.raises(UserError, match=r"utf16.csv:1: not UTF-8 text \(byte 0xff at byte offset 0\)"):
        read_csv_rows(utf16)


def test_a_quote_left_open_is_one_line_naming_the_file(tmp_path):
    broken = tmp_path / "broken.csv"
    broken.write_text('path,label,split\n"a.png,1,train\n' + "x" * 200_000 + "\n")
    with pytest.raises(UserError, match=r"broken.csv:\d+: not a well-formed CSV \(field larger than field limit"):
        read_csv_rows(broken)


@pytest.mark.parametrize("command", ["train", "evaluate", "embed", "index build", "index add"])
def test_every_command_that_reads_a_csv_refuses_latin_1_in_one_line(
    command, dataset, tiny_checkpoint, tmp_path, capsys
):
    latin = _recoded(dataset, "latin.csv", "latin-1")
    data = ["--set", "data.name=csv", "--set", f"data.path={latin}", "--set", "train.device=cpu"]
    argv = {
        "train": ["train", *data, "--output-dir", str(tmp_path / "run")],
        "evaluate": ["evaluate", "--checkpoint", str(tiny_checkpoint), *data],
        "embed": ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(latin), "--out", str(tmp_path / "e.npz")],
        "index build": ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(latin)],
        "index add": ["index", "add", "--index", str(tmp_path / "index"), "--csv", str(latin)],
    }[command]
    if command == "index add":
        build = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(dataset), *NO_WORKERS]
        assert main([*build, "--out", str(tmp_path / "index"), "--type", "flat"]) == 0
        capsys.readouterr()
    if command == "index build":
        argv += ["--out", str(tmp_path / "index")]
    extra = [] if command in ("train", "evaluate") else NO_WORKERS
    assert main([*argv, *extra]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: {latin}:") and "not UTF-8 text" in line


def test_embed_and_index_build_read_a_csv_with_a_byte_order_mark(dataset, tiny_checkpoint, tmp_path, capsys):
    with_bom = _recoded(dataset, "bom.csv", "utf-8-sig")
    out = tmp_path / "embeddings.npz"
    assert (
        main(["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(with_bom), "--out", str(out), *NO_WORKERS])
        == 0
    )
    build = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(with_bom), "--out"]
    assert main([*build, str(tmp_path / "index"), "--type", "flat", *NO_WORKERS]) == 0
    assert "vectors: 9 of 9 images" in capsys.readouterr().out
