"""CSV files in other encodings: a byte-order mark is read through, anything not UTF-8 is refused naming the line.

That every command refuses it in one line: tests/cli/test_csv_encoding_cli.py.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from retrieval.data import read_csv_splits
from retrieval.data.csv_dataset import IMAGE_LIST_CSV, read_csv_rows
from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.inference.embed_run import EmbedRequest, check_embed_request, run_embed


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, csv_dataset_factory) -> Path:
    """A small dataset CSV (UTF-8, no byte-order mark) whose last row's label is `café`."""
    return with_cafe_row(csv_dataset_factory(tmp_path_factory.mktemp("encoding") / "data", 2, 2, 2))


def with_cafe_row(csv_path: Path) -> Path:
    """`csv_path` with its last row repeated, labelled `café` (a character latin-1 writes as one byte)."""
    lines = csv_path.read_text().splitlines()
    path, _, split = lines[-1].split(",")
    csv_path.write_text("\n".join([*lines, f"{path},café,{split}"]) + "\n")
    return csv_path


def recoded(csv_path: Path, name: str, encoding: str) -> Path:
    """The same CSV beside the original (its image paths still resolve), written in another encoding."""
    copy = csv_path.with_name(name)
    copy.write_bytes(csv_path.read_text().encode(encoding))
    return copy


def test_a_byte_order_mark_is_not_part_of_the_first_column_name(dataset):
    with_bom = recoded(dataset, "bom.csv", "utf-8-sig")
    assert with_bom.read_bytes().startswith(codecs.BOM_UTF8)
    assert read_csv_rows(with_bom, IMAGE_LIST_CSV) == read_csv_rows(dataset, IMAGE_LIST_CSV)
    splits, plain = read_csv_splits(with_bom), read_csv_splits(dataset)
    assert splits["test"].paths == plain["test"].paths and "café" in splits["test"].class_names


def test_a_latin_1_csv_names_the_file_line_and_byte_and_asks_for_utf_8(dataset):
    latin = recoded(dataset, "latin.csv", "latin-1")
    offset = latin.read_bytes().index("é".encode("latin-1"))
    line = len(latin.read_text(encoding="latin-1").splitlines())  # the last row holds the label café
    with pytest.raises(UserError) as caught:
        read_csv_rows(latin)
    assert str(caught.value) == (
        f"{latin}:{line}: not UTF-8 text (byte 0xe9 at byte offset {offset}); "
        "re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`, or Excel's CSV UTF-8)"
    )
    utf16 = recoded(dataset, "utf16.csv", "utf-16")  # Excel's "Unicode text": a UTF-16 byte-order mark
    with pytest.raises(UserError, match=r"utf16.csv:1: not UTF-8 text \(byte 0xff at byte offset 0\)"):
        read_csv_rows(utf16)


def test_a_quote_left_open_is_one_line_naming_the_file(tmp_path):
    broken = tmp_path / "broken.csv"
    broken.write_text('path,label,split\n"a.png,1,train\n' + "x" * 200_000 + "\n")
    with pytest.raises(UserError, match=r"broken.csv:\d+: not a well-formed CSV \(field larger than field limit"):
        read_csv_rows(broken)


def test_embed_and_index_build_read_a_csv_with_a_byte_order_mark(dataset, tiny_checkpoint, tmp_path):
    """Through the library calls `embed` and `index build` run (the build prints "vectors: 9 of 9 images")."""
    with_bom = recoded(dataset, "bom.csv", "utf-8-sig")
    out = tmp_path / "embeddings.npz"
    embed = EmbedRequest(tiny_checkpoint, str(out), csv=with_bom)
    run_embed(embed, check_embed_request(embed))
    encoder = EncoderChoice(checkpoint=tiny_checkpoint)
    built = build_index(IndexBuildRequest(tmp_path / "index", encoder, csv=with_bom, kind="flat"))
    assert (built.vectors, built.images) == (9, 9)
