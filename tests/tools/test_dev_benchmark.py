"""tools/dev_benchmark.py and tools/plain_pml_script.py: parsing, CSV stripping, and one tiny real run."""

from __future__ import annotations

import ast
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tool_modules import TOOLS, load_tool

bench = load_tool("dev_benchmark")


def test_parse_metrics_takes_the_final_lines() -> None:
    output = "epoch 1 Recall@1: 0.1000\nRecall@1: 0.1234\nRecall@2: 0.5\nMAP@R: 0.0567\n"
    assert bench.parse_metrics(output) == {"recall@1": 0.1234, "map@r": 0.0567}
    assert bench.parse_metrics("error: data.path not found\n") == {}
    labelled = "Recall@1: 0.9000  (selected on test)\nMAP@R: 0.8000  (selected on test)\n"
    assert bench.parse_metrics(labelled) == {"recall@1": 0.9, "map@r": 0.8, "label": "selected on test"}


def test_strip_val_rows_keeps_everything_else(tmp_path: Path) -> None:
    source = tmp_path / "d.csv"
    source.write_text("path,label,split,is_query,is_gallery\na.png,1,train,0,0\nb.png,2,val,1,0\nc.png,3,test,0,1\n")
    stripped = bench.strip_val_rows(source)
    with stripped.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert stripped.parent == tmp_path
    assert [(r["path"], r["split"], r["is_gallery"]) for r in rows] == [("a.png", "train", "0"), ("c.png", "test", "1")]


def test_val_as_test_never_keeps_test_rows(tmp_path: Path) -> None:
    source = tmp_path / "d.csv"
    source.write_text("path,label,split\na.png,1,train\nb.png,2,val\nc.png,3,test\nd.png,2,val\n")
    with bench.val_as_test(source).open(newline="") as handle:
        rows = [(r["path"], r["split"]) for r in csv.DictReader(handle)]
    assert rows == [("a.png", "train"), ("b.png", "test"), ("d.png", "test")]


def test_table_shows_failures() -> None:
    ok = {"pipeline": "peer", "recall@1": 0.5, "map@r": 0.25, "seconds": 12.3}
    failed = {"pipeline": "toolkit", "seconds": 1.0, "error": "error: unknown config key augment.preset"}
    table = bench.write_table([ok, failed], "footer")
    assert "| peer | 0.5000 | 0.2500 | 12 |" in table
    assert "| toolkit | failed: error: unknown config key augment.preset | | 1 |" in table


def test_peer_script_is_self_contained() -> None:
    tree = ast.parse((TOOLS / "plain_pml_script.py").read_text())
    modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in modules if m.split(".")[0] == "retrieval"]


@pytest.mark.parametrize("loss", ["proxy_nca", "proxy_anchor"])
def test_peer_script_trains_and_prints_metrics(tmp_path: Path, loss: str) -> None:
    glyphs = load_tool("make_glyph_dataset")
    fonts = glyphs.find_fonts()
    if len({f.family for f in fonts}) < 4:
        pytest.skip("the fonts-* Debian packages are not installed")
    glyphs.make_dataset(tmp_path, train_classes=3, val_classes=1, test_classes=3, train_per_class=4, fonts=fonts)
    command = [sys.executable, str(TOOLS / "plain_pml_script.py"), f"--csv={tmp_path / 'dataset.csv'}"]
    command += ["--backbone=resnet10t", "--batch-size=4", "--epochs=1", "--workers=0", "--threads=1"]
    command += [f"--loss={loss}", f"--json={tmp_path / 'm.json'}"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    metrics = bench.parse_metrics(output)
    assert set(metrics) == {"recall@1", "map@r"} and all(0 <= v <= 1 for v in metrics.values())
    saved = json.loads((tmp_path / "m.json").read_text())
    assert round(saved["recall@1"], 4) == metrics["recall@1"] and saved["loss"] == loss
