"""`retrieval index query --where`: an expression or a JSON file, and one-line errors before any embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval.cli.main import main

NO_WORKERS = ["--num-workers", "0"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_checkpoint, csv_dataset_factory) -> tuple[Path, Path]:
    """(csv, index dir) of a 28-image CSV dataset, half train and half test."""
    root = tmp_path_factory.mktemp("where")
    csv_path = csv_dataset_factory(root / "data")
    index = root / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(index)]
    assert main([*args, "--type", "flat", *NO_WORKERS]) == 0
    return csv_path, index


def _query(capsys, index: Path, image: Path, *args: str) -> list[dict]:
    capsys.readouterr()
    command = ["index", "query", "--index", str(index), "--image", str(image), "--json", "-k", "28", *NO_WORKERS]
    assert main([*command, *args]) == 0
    (answer,) = json.loads(capsys.readouterr().out)
    return answer["results"]


def test_where_keeps_only_passing_items_in_score_order(indexed, capsys, tmp_path) -> None:
    csv_path, index = indexed
    image = csv_path.parent / "images" / "train_0_0.png"
    everything = _query(capsys, index, image)
    passing = _query(capsys, index, image, "--where", "split = 'test' and label in ('class101', '100')")
    expected = [r["id"] for r in everything if r["split"] == "test" and r["label"] in ("class101", "100")]
    assert [r["id"] for r in passing] == expected and len(expected) == 8
    assert [r["rank"] for r in passing] == list(range(1, 9))

    where_file = tmp_path / "where.json"
    where_file.write_text(json.dumps({"split": "test", "label": {"in": ["class101", "100"]}}))
    assert _query(capsys, index, image, "--where", str(where_file)) == passing


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("colour = 'red'", "error: filter column 'colour' is not in the metadata; columns: id, path, label, split"),
        ("split = test", "error: bad filter expression at character 9: expected a value"),
        ("missing.json", "error: cannot read filter file missing.json"),
    ],
)
def test_a_bad_where_is_one_line_before_embedding(where, message, indexed, capsys, monkeypatch) -> None:
    csv_path, index = indexed
    monkeypatch.setattr(
        "retrieval.export.index_encoder.encoder_for_index", lambda *args, **kwargs: pytest.fail("embedded")
    )
    image = csv_path.parent / "images" / "train_0_0.png"
    assert main(["index", "query", "--index", str(index), "--image", str(image), "--where", where]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def _write_priced_csv(csv_path: Path) -> Path:
    """The dataset's images with integer labels, a float price (some empty), digit SKUs and a count."""
    lines = csv_path.read_text().splitlines()[1:]
    rows = ["path,label,split,price,sku,count"]
    for i, line in enumerate(lines):
        path, _, split = line.split(",")
        price = "" if i % 7 == 3 else f"{(i * 17) % 90 + 0.5}"
        rows.append(f"{path},{i % 7},{split},{price},{1000 + i},{i}")
    priced = csv_path.with_name("priced.csv")
    priced.write_text("\n".join(rows) + "\n")
    return priced


@pytest.fixture(scope="module")
def priced(indexed, tiny_checkpoint) -> tuple[Path, Path]:
    """(csv, index dir) of the same images with numeric metadata, `sku` declared str."""
    csv_path = _write_priced_csv(indexed[0])
    index = csv_path.parent.parent / "priced_index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(index)]
    assert main([*args, "--type", "flat", "--column-types", "sku=str", *NO_WORKERS]) == 0
    return csv_path, index


@pytest.mark.slow
def test_csv_metadata_is_typed_and_the_readme_filter_works(priced, capsys) -> None:
    import pyarrow as pa

    from retrieval.index import SearchIndex

    csv_path, index = priced
    schema = SearchIndex.load(index).metadata_schema
    types = {name: schema.field(name).type for name in ("label", "price", "sku", "count", "split")}
    assert types == {
        "label": pa.int64(),
        "price": pa.float64(),
        "sku": pa.string(),
        "count": pa.int64(),
        "split": pa.string(),
    }
    image = csv_path.parent / "images" / "train_0_0.png"
    everything = _query(capsys, index, image)
    assert sum(r["price"] is None for r in everything) == 4  # empty cells are null, not ""
    passing = _query(capsys, index, image, "--where", "label in (3, 5) and price < 50")
    expected = [r["id"] for r in everything if r["label"] in (3, 5) and r["price"] is not None and r["price"] < 50]
    assert [r["id"] for r in passing] == expected and expected
    assert [r["sku"] for r in _query(capsys, index, image, "--where", "sku = '1003'")] == ["1003"]
    assert len(_query(capsys, index, image, "--where", "price is null or not count < 27")) == 5


def test_faiss_and_the_qdrant_backend_answer_the_readme_filter_with_the_same_ids(priced, capsys, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from retrieval.serve import create_app

    csv_path, index = priced
    image = csv_path.parent / "images" / "test_100_1.png"
    where = "label in (3, 5) and price < 50"
    faiss_ids = [r["id"] for r in _query(capsys, index, image, "--where", where)]
    uri = f"qdrant+local://{tmp_path / 'qdrant'}?collection=priced"
    assert main(["index", "export", "--index", str(index), "--to", uri]) == 0
    app = create_app(None, backend=uri, device="cpu")
    with TestClient(app) as client:
        upload = {"image": ("q.png", image.read_bytes(), "image/png")}
        for filter_field in (where, json.dumps({"label": {"in": [3, 5]}, "price": {"lt": 50}})):
            answer = client.post("/search", files=upload, data={"k": "28", "filter": filter_field})
            assert answer.status_code == 200, answer.text
            assert [r["id"] for r in answer.json()["results"]] == faiss_ids
        for id_filter, expected in (("id < 3", [0, 1, 2]), ("id in (4, 2)", [2, 4]), ('{"id": 3}', [3])):
            answer = client.post("/search", files=upload, data={"k": "28", "filter": id_filter})
            assert sorted(r["id"] for r in answer.json()["results"]) == expected, answer.text
        assert client.get("/info").json()["columns"][:3] == [
            {"name": "id", "type": "int"},
            {"name": "path", "type": "str"},
            {"name": "label", "type": "int"},
        ]


@pytest.mark.parametrize(
    ("column_types", "message"),
    [
        ("colour=str", "error: --column-types names 'colour', not a column of"),
        ("price=int", "error: column 'price' of "),
        ("price=decimal", "error: --column-types entry 'price=decimal' must be NAME=TYPE"),
        ("path=int", "error: --column-types: 'path' holds file paths and is always str"),
    ],
)
def test_a_bad_column_type_declaration_is_one_line(priced, tiny_checkpoint, tmp_path, capsys, column_types, message):
    csv_path, _ = priced
    out = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(out)]
    assert main([*args, "--column-types", column_types, *NO_WORKERS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_a_where_with_an_integer_past_int64_is_one_line(priced, capsys) -> None:
    csv_path, index = priced
    image = csv_path.parent / "images" / "train_0_0.png"
    assert main(["index", "query", "--index", str(index), "--image", str(image), "--where", "id = " + "9" * 30]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "an integer within the 64-bit range" in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("price", "why"),
    [
        ("nan", "not a decimal number"),  # `index build` keeps such a cell as text; `add` stored NaN
        ("1e309", "not finite"),  # stored inf, then every search returning it was a 500
        ("9007199254740993", "float64 would store 9007199254740992.0"),  # beside 0.5: stored ...992.0
    ],
)
def test_add_refuses_a_cell_the_index_float_column_cannot_hold(priced, tmp_path, capsys, price, why) -> None:
    import shutil

    from retrieval.index import SearchIndex

    csv_path, original = priced
    index = tmp_path / "index"
    shutil.copytree(original, index)
    first = csv_path.read_text().splitlines()[1].split(",")[0]
    added = csv_path.with_name(f"add_{tmp_path.name}.csv")
    added.write_text(f"path,label,split,price\n{first},1,test,{price}\n{first},2,test,0.5\n")
    capsys.readouterr()
    assert main(["index", "add", "--index", str(index), "--csv", str(added), *NO_WORKERS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'price' goes into the index's float column" in err[0] and why in err[0], err
    assert "build the index again with --column-types price=str" in err[0]
    assert SearchIndex.load(index).ntotal == SearchIndex.load(original).ntotal
