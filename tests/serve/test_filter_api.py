"""`/search` with a `filter`: JSON object or where-expression, for vectors, ids and uploads; bad filters are 400s."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from retrieval.index import SearchIndex


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def splits(gallery) -> np.ndarray:
    rows = SearchIndex.load(gallery.index_dir).metadata_for(gallery.ids)
    return np.array([row["split"] for row in rows])


def exact_among(gallery, passing: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = gallery.embeddings[passing] @ query
    return gallery.ids[passing][np.argsort(-scores, kind="stable")[:k]].tolist()


@pytest.mark.parametrize("where", [{"split": "test"}, {"split": {"in": ["test"]}}, "split = 'test'"])
def test_a_vector_search_returns_the_exact_top_k_among_passing_items(where, client, gallery, splits) -> None:
    query = gallery.embeddings[0]  # a train image: its unfiltered neighbours are mostly train images
    answer = client.post("/search", json={"vector": query.tolist(), "k": 5, "filter": where})
    assert answer.status_code == 200, answer.text
    assert [r["id"] for r in answer.json()["results"]] == exact_among(gallery, splits == "test", query, 5)
    assert {r["metadata"]["split"] for r in answer.json()["results"]} == {"test"}


def test_fewer_passing_items_than_k_return_what_passes(client, gallery) -> None:
    label = SearchIndex.load(gallery.index_dir).metadata_for(gallery.ids[:1])[0]["label"]
    answer = client.post("/search", json={"id": int(gallery.ids[1]), "k": 20, "filter": {"label": label}}).json()
    same = [r["id"] for r in answer["results"]]
    assert len(same) == 3 and int(gallery.ids[1]) not in same  # 4 images a class, the query itself left out


@pytest.mark.parametrize("where", ['{"split": "train"}', "split = 'train'"])
def test_an_upload_takes_the_filter_as_a_form_field(where, client, gallery, splits) -> None:
    test_image = int(np.flatnonzero(splits == "test")[0])
    data = gallery.paths[test_image].read_bytes()
    answer = client.post("/search", files={"image": ("q.png", data, "image/png")}, data={"k": "4", "filter": where})
    assert answer.status_code == 200, answer.text
    expected = exact_among(gallery, splits == "train", gallery.embeddings[test_image], 4)
    assert [r["id"] for r in answer.json()["results"]] == expected


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"colour": "red"}, "filter column 'colour' is not in the metadata; columns: id, path, label, split"),
        ("split = 'a' xor split = 'b'", "bad filter expression at character 13: expected 'and', 'or' or the end"),
        ("id = 99999999999999999999999999", "an integer within the 64-bit range, found 26 digits"),
        ({"id": 2**70}, "1180591620717411303424 is outside the 64-bit integer range"),
        ({"id": {"in": [1, 10**400]}}, "an integer of 401 digits is outside the 64-bit integer range"),
        (" and ".join(["split = 'test'"] * 4000), "filter is 75,995 characters, over the limit of 65,536 (64 KiB)"),
        ({"split": {"like": "t%"}}, "unknown operator 'like'"),
        ({"split": 3}, "the column holds strings, the filter compares it with a number (3)"),
        ([1, 2], "filter must be a JSON object or a where-expression string, got [1, 2]"),
        ({"split": "\ud800"}, "filter on 'split': a string value holds '\\ud800', a lone surrogate"),
        ({"\ud800": 1}, "a filter column name holds '\\ud800', a lone surrogate"),
        ("split = 'te\ud800'", "a lone surrogate, not a character; send valid Unicode"),
        ("label = ٣", "bad filter expression at character 9: unexpected '٣'"),
    ],
)
def test_a_bad_filter_is_a_400_with_one_line(where, message, client, gallery) -> None:
    body = json.dumps({"vector": gallery.embeddings[0].tolist(), "filter": where})  # ASCII: "\ud800" escaped
    answer = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    assert "\n" not in answer.json()["error"]


def test_the_page_has_a_filter_box_that_its_searches_send(client) -> None:
    assert '<input id="filter" type="text"' in client.get("/").text
    assert 'form.append("filter"' in client.get("/static/app.js").text


def test_info_lists_the_columns_and_types_the_page_builds_its_filter_placeholder_from(client) -> None:
    columns = client.get("/info").json()["columns"]
    assert columns == [
        {"name": "id", "type": "int"},
        {"name": "path", "type": "str"},
        {"name": "label", "type": "str"},  # class101, 100, ...: not every label is an integer
        {"name": "split", "type": "str"},
    ]
    script = client.get("/static/app.js").text
    assert "describeColumns(manifest.columns" in script and "item.metadata" in script
    assert "label in ('3', '5')" not in client.get("/").text  # the digits demo's columns are not every index's


def test_or_not_and_null_tests_pass_the_right_items(client, gallery, splits) -> None:
    query = gallery.embeddings[0]
    where = "not split = 'train' and (split = 'test' or path is null) and split is not null"
    answer = client.post("/search", json={"vector": query.tolist(), "k": 5, "filter": where})
    assert answer.status_code == 200, answer.text
    assert [r["id"] for r in answer.json()["results"]] == exact_among(gallery, splits == "test", query, 5)


@pytest.mark.parametrize("where", ["id = 99999999999999999999999999", '{"id": 1180591620717411303424}'])
def test_an_upload_with_an_integer_past_int64_is_a_400(where, client, gallery) -> None:
    data = gallery.paths[0].read_bytes()
    answer = client.post("/search", files={"image": ("q.png", data, "image/png")}, data={"filter": where})
    assert answer.status_code == 400 and "64-bit" in answer.json()["error"], answer.text


def test_a_bad_json_filter_field_of_an_upload_is_a_400(client, gallery) -> None:
    data = gallery.paths[0].read_bytes()
    answer = client.post("/search", files={"image": ("q.png", data, "image/png")}, data={"filter": "{split:"})
    assert answer.status_code == 400 and answer.json()["error"].startswith("filter is not valid JSON")
    assert json.loads(client.get("/healthz").text)["status"] == "ok"


def test_a_filter_is_parsed_off_the_event_loop(client, base_url, gallery, monkeypatch) -> None:
    """While one request's filter is being parsed, the server answers others (a parse never holds the loop).

    The parse holds until /healthz has answered: no clock, so a loaded machine cannot fail it. A parse on the
    event loop would hold /healthz for its whole 30 s, and finish before it."""
    import threading

    import retrieval.serve.app as app_module

    parsing, answered, parsed = threading.Event(), threading.Event(), threading.Event()

    def slow_parse(value: object) -> None:
        parsing.set()
        answered.wait(30)
        parsed.set()

    monkeypatch.setattr(app_module, "parse_filter_field", slow_parse)
    body = {"vector": gallery.embeddings[0].tolist(), "k": 3, "filter": "split = 'test'"}
    with httpx.Client(base_url=base_url, timeout=60) as other:
        searching = threading.Thread(target=lambda: other.post("/search", json=body))
        searching.start()
        assert parsing.wait(30)
        assert client.get("/healthz", timeout=60).status_code == 200
        during = not parsed.is_set()
        answered.set()
        searching.join()
    assert during and parsed.is_set()
