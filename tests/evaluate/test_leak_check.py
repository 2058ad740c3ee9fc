"""The test-split leak check of `retrieval evaluate`: identical files always, near-copies with --exclude-leaks.

The command's warnings, and its refusals of the leak options, are tests/cli/test_evaluate_cli.py's."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval.config import DataConfig
from retrieval.data import EvalSplit
from retrieval.evaluate import leak_check
from retrieval.evaluate.leak_check import HASH_CACHE_ENV, identical_test_rows, warning_line, without_rows
from tests.conftest import add_train_copy_as_test


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file hash cache under this test's folder, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(HASH_CACHE_ENV, raising=False)
    return tmp_path / "cache" / "retrieval" / "file-hashes"


def _settle(place: Path, age_s: float = 3600.0) -> None:
    """Date a file, or every file under a folder, `age_s` seconds back, past the window the cache distrusts."""
    for path in place.rglob("*") if place.is_dir() else [place]:
        os.utime(path, ns=(time.time_ns() - int(age_s * 1e9),) * 2)


def _count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files `identical_test_rows` reads from here on."""
    read: list[Path] = []
    real = leak_check.file_sha256

    def counted(path: Path) -> str:
        read.append(Path(path))
        return real(path)

    monkeypatch.setattr(leak_check, "file_sha256", counted)
    return read


def _leak_one_train_image(csv_dataset: Path) -> Path:
    """A byte copy of a train image listed as a test image of another class (so it cannot help its own queries)."""
    return add_train_copy_as_test(csv_dataset, "leaked.png", 101)


def test_identical_files_are_flagged_on_the_test_rows(csv_dataset):
    flagged = identical_test_rows(DataConfig(name="csv", path=str(_leak_one_train_image(csv_dataset))))
    assert flagged is not None and flagged.tolist() == [False] * 12 + [True]
    assert identical_test_rows(DataConfig(name="digits")) is None


def test_a_second_check_reads_no_file_and_a_changed_file_is_read_again(csv_dataset, cache_home, monkeypatch):
    config = DataConfig(name="csv", path=str(_leak_one_train_image(csv_dataset)))
    _settle(csv_dataset.parent / "images")
    read = _count_hashes(monkeypatch)
    first = identical_test_rows(config)
    assert len(read) == len(set(read)) > 13 and len(list(cache_home.glob("*.json"))) == 1  # every file once
    read.clear()
    assert identical_test_rows(config).tolist() == first.tolist() and read == []
    leaked = csv_dataset.parent / "images" / "leaked.png"
    leaked.write_bytes(leaked.read_bytes()[::-1])  # same size, other bytes: no longer a copy
    _settle(leaked, age_s=60.0)
    assert identical_test_rows(config).tolist() == [False] * 13
    assert read == [leaked.resolve()]


def test_a_file_rewritten_with_the_same_size_gets_its_new_hash(tmp_path):
    path = tmp_path / "image.bin"
    path.write_bytes(b"a" * 100)
    _settle(tmp_path)
    assert leak_check._digests([path]) == [hashlib.sha256(b"a" * 100).hexdigest()]
    path.write_bytes(b"b" * 100)
    _settle(tmp_path, age_s=60.0)
    assert leak_check._digests([path]) == [hashlib.sha256(b"b" * 100).hexdigest()]


def test_recent_files_are_not_cached_and_the_cache_can_be_turned_off(tmp_path, cache_home, monkeypatch):
    recent, settled = tmp_path / "recent.bin", tmp_path / "settled.bin"
    recent.write_bytes(b"r")
    settled.write_bytes(b"s")
    _settle(tmp_path)
    recent.write_bytes(b"R")  # modified just now: a same-size change within its mtime's resolution could follow
    read = _count_hashes(monkeypatch)
    leak_check._digests([recent, settled])
    leak_check._digests([recent, settled])
    assert [path.name for path in read] == ["recent.bin", "settled.bin", "recent.bin"]
    monkeypatch.setenv(HASH_CACHE_ENV, "0")
    leak_check._digests([recent, settled])
    assert [path.name for path in read[3:]] == ["recent.bin", "settled.bin"]


def test_files_reached_through_links_are_keyed_by_their_target(tmp_path, cache_home):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "image.bin"
    target.write_bytes(b"t")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "alias.bin").symlink_to(target)
    _settle(target)
    expected = hashlib.sha256(b"t").hexdigest()
    assert leak_check._digests([tmp_path / "linked" / "image.bin", tmp_path / "alias.bin"]) == [expected] * 2
    (cache_file,) = cache_home.glob("*.json")
    assert list(json.loads(cache_file.read_text())["files"]) == [str(target.resolve())]


def test_a_damaged_cache_is_rebuilt(tmp_path, cache_home):
    path = tmp_path / "image.bin"
    path.write_bytes(b"x")
    _settle(tmp_path)
    leak_check._digests([path])
    (cache_file,) = cache_home.glob("*.json")
    for damage in ("{not json", json.dumps({"format": 1, "files": {str(path.resolve()): [1, 2]}}), "[]"):
        cache_file.write_text(damage)
        assert leak_check._digests([path]) == [hashlib.sha256(b"x").hexdigest()]
        assert json.loads(cache_file.read_text())["files"] == {
            str(path.resolve()): [1, path.stat().st_mtime_ns, hashlib.sha256(b"x").hexdigest()]
        }


def test_excluded_rows_are_neither_queries_nor_gallery():
    split = EvalSplit(dataset=None, labels=np.zeros(4), gallery_mask=np.array([True, True, False, True]))
    scored = without_rows(split, np.array([False, True, False, False]))
    assert scored.query_mask.tolist() == [True, False, True, True]
    assert scored.gallery_mask.tolist() == [True, False, False, True]


def test_the_warning_is_one_line_with_the_count_and_share():
    line = warning_line(np.array([True, False, False, False]), "identical files to", excluded=False)
    assert line.startswith("warning: 1 of 4 test images (25.00%) are identical files to train/val images; ")
    assert "\n" not in line and "--exclude-leaks" in line
