"""tools/dev_benchmark.py and tools/plain_pml_script.py: parsing, CSV stripping, and one tiny real run."""

from __future__ import annotations

import argparse
import ast
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from retrieval.core.rerank import parse_rerank
from tests.tools.tool_modules import TOOLS, load_tool

bench = load_tool("dev_benchmark")


def test_parse_metrics_takes_the_final_lines() -> None:
    output = "epoch 1 Recall@1: 0.1000\nRecall@1: 0.1234\nRecall@2: 0.5\nMAP@R: 0.0567\n"
    assert bench.parse_metrics(output) == {"recall@1": 0.1234, "map@r": 0.0567}
    assert bench.parse_metrics("error: data.path not found\n") == {}
    labelled = "Recall@1: 0.9000  (selected on test)\nMAP@R: 0.8000  (selected on test)\n"
    assert bench.parse_metrics(labelled) == {"recall@1": 0.9, "map@r": 0.8, "label": "selected on test"}


def test_parse_variant_reads_name_loss_and_overrides() -> None:
    assert bench.parse_variant("avg=proxy_nca:model.pooling=avg,train.weight_decay=0") == (
        "avg",
        "proxy_nca",
        ["model.pooling=avg", "train.weight_decay=0"],
    )
    assert bench.parse_variant("base=anchor:") == ("base", "anchor", [])
    with pytest.raises(SystemExit, match="NAME=LOSS:KEY=VALUE"):
        bench.parse_variant("avg=model.pooling=avg")


def test_rows_share_the_budget_and_seed_their_commands(tmp_path: Path) -> None:
    args = argparse.Namespace(
        csv=tmp_path / "d.csv", config=tmp_path / "c.yaml", backbone="resnet10t", image_size=48, batch_size=16,
        epochs=3, lr=2e-3, threads=1, workers=0, toolkit_set=["model.in_chans=1"],
        peer=["circle"], toolkit=["anchor"], variant=["wd0=proxy_nca:train.weight_decay=0"], rerank=[],
    )  # fmt: skip
    peer, anchor, variant = bench.build_rows(args)
    assert [row.name for row in (peer, anchor, variant)] == ["peer-circle", "toolkit-anchor", "wd0"]
    peer_command = peer.seeded(2, tmp_path / "p")
    for flag in ("--loss=circle", "--epochs=3", "--image-size=48", "--batch-size=16", "--lr=0.002", "--seed=2"):
        assert flag in peer_command
    assert f"--embeddings-out={tmp_path / 'p'}" in peer_command
    command = variant.seeded(1, tmp_path / "v")
    sets = [command[i + 1] for i, item in enumerate(command) if item == "--set"]
    for value in ("train.epochs=3", "train.eval_every=3", "data.image_size=48", "model.in_chans=1", "train.seed=1"):
        assert value in sets
    assert sets.index("loss.name=proxy_nca") < sets.index("train.weight_decay=0")  # the variant's keys last
    assert command[-2:] == ["--output-dir", str(tmp_path / "v" / "run")]


def test_runs_start_in_the_callers_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path in a --variant (model.weights=pre/backbone.safetensors) is read where it was typed."""
    monkeypatch.chdir(tmp_path)
    writes_here = "import pathlib, sys; pathlib.Path('ran_here').touch(); sys.exit(3)"
    row = bench.Row("probe", "probe", [sys.executable, "-c", writes_here], peer=True)
    args = argparse.Namespace(out=tmp_path / "out", force=False, threads=1, csv=tmp_path / "d.csv")
    result = bench.run_seed(row, 0, args)
    assert result["exit_code"] == 3
    assert (tmp_path / "ran_here").is_file()


def test_a_saved_run_is_reused_only_while_the_files_it_names_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited config under the same command is run again, not paired as if it were the current one."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("augment: {preset: artwork}\n")
    counts = "import sys; open('runs.txt', 'a').write('x'); sys.exit(3)"
    row = bench.Row("probe", "probe", [sys.executable, "-c", counts, "--set", f"config={config}"], peer=True)
    args = argparse.Namespace(out=tmp_path / "out", force=False, threads=1, csv=tmp_path / "d.csv")
    bench.run_seed(row, 0, args)
    bench.run_seed(row, 0, args)
    assert (tmp_path / "runs.txt").read_text() == "x"  # the same command and config: reused
    config.write_text("augment: {preset: glyph}\n")
    result = bench.run_seed(row, 0, args)
    assert (tmp_path / "runs.txt").read_text() == "xx"
    assert result["files"] == {str(config): bench.file_sha256(config)}


def test_a_run_killed_by_a_signal_is_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted run (SIGTERM, Ctrl-C) is not a result: the next call runs it, where an exit code stays."""
    counts = "import os, signal; open('runs.txt', 'a').write('x'); os.kill(os.getpid(), signal.SIGTERM)"
    row = bench.Row("probe", "probe", [sys.executable, "-c", counts], peer=True)
    args = argparse.Namespace(out=tmp_path / "out", force=False, threads=1, csv=tmp_path / "d.csv")
    monkeypatch.chdir(tmp_path)
    assert bench.run_seed(row, 0, args)["exit_code"] == -signal.SIGTERM
    bench.run_seed(row, 0, args)
    assert (tmp_path / "runs.txt").read_text() == "xx"


def _tiny_csv(tmp_path: Path) -> Path:
    rows = ["path,label,split,is_query,is_gallery"]
    rows += [f"images/t{i}.png,{label},test,{int(i < 3)},{int(i >= 3)}" for i, label in enumerate("abcabc")]
    rows += [f"images/v{i}.png,{label},val,1,1" for i, label in enumerate("xxyy")]
    rows += ["images/r0.png,a,train,0,0", "images/r1.png,b,train,0,0"]
    (tmp_path / "images").mkdir()
    for row in rows[1:]:
        Image.new("L", (8, 8)).save(tmp_path / row.split(",")[0])
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "d.csv"


def test_scores_match_a_brute_force_nearest_neighbour(tmp_path: Path) -> None:
    csv_path = _tiny_csv(tmp_path)
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(6, 4)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    values = bench.score_embeddings(csv_path, "test", embeddings)
    labels = np.array(list("abcabc"))
    expected = [labels[3 + np.argmax(embeddings[3:] @ embeddings[q])] == labels[q] for q in range(3)]
    assert values.values["recall@1"].tolist() == [float(hit) for hit in expected]
    with pytest.raises(SystemExit, match="5 embeddings for the 6 test rows"):
        bench.score_embeddings(csv_path, "test", embeddings[:5])


def test_parse_rerank_row_names_a_known_method() -> None:
    assert bench.parse_rerank_row("pa_dba=toolkit-proxy_anchor:dba") == ("pa_dba", "toolkit-proxy_anchor", "dba")
    for bad in ("x=toolkit-anchor", "x=toolkit-anchor:dbx", "=a:qe"):
        with pytest.raises(SystemExit, match="is not NAME=ROW:METHOD"):
            bench.parse_rerank_row(bad)


def test_rerank_row_chooses_on_validation_and_scores_test_with_the_choice(tmp_path: Path) -> None:
    csv_path = _tiny_csv(tmp_path)
    args = argparse.Namespace(
        csv=csv_path, out=tmp_path / "out", config=tmp_path / "c.yaml", backbone="resnet10t", image_size=8,
        batch_size=4, epochs=1, lr=1e-3, threads=1, workers=0, toolkit_set=[], peer=["proxy_anchor"], toolkit=[],
        variant=[], rerank=["qe_row=peer-proxy_anchor:qe"], force=False,
    )  # fmt: skip
    peer, rerank = bench.build_rows(args)
    assert rerank.rerank == ("peer-proxy_anchor", "qe")
    missing = bench.run_seed(rerank, 0, args)
    assert missing["error"] == "no finished run of peer-proxy_anchor at seed 0"
    source = args.out / "runs" / "peer-proxy_anchor-s0"
    source.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for split, count in (("val", 4), ("test", 6)):
        embeddings = rng.normal(size=(count, 4)).astype(np.float32)
        np.save(source / f"{split}.npy", embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True))
    (source / "peer.json").write_text("{}")
    (source / "result.json").write_text(json.dumps({"row": "peer-proxy_anchor"}))
    result = bench.run_seed(rerank, 0, args)
    assert result["rerank"]["chosen_on"] == "validation" and result["rerank"]["spec"].startswith("qe:")
    rows = bench._read_splits(csv_path)["test"]
    expected = bench.per_query_scores(
        np.load(source / "test.npy"), rows.labels, bench.KS, rows.query_mask, rows.gallery_mask,
        rerank=parse_rerank(result["rerank"]["spec"]),
    )  # fmt: skip
    saved = bench.load_query_values(args.out / "runs" / "qe_row-s0" / "per_query_test.npz")
    assert saved.values["recall@1"].tolist() == bench.QueryValues.from_scores(expected).values["recall@1"].tolist()
    assert result["test/recall@1"] == pytest.approx(float(saved.values["recall@1"].mean()))


def test_average_values_means_each_query_over_runs(tmp_path: Path) -> None:
    one = bench.QueryValues(np.arange(3), np.array([0, 0, 1]), {"recall@1": np.array([1.0, 0, 1]), "map@r": np.ones(3)})
    two = bench.QueryValues(
        np.arange(3), np.array([0, 0, 1]), {"recall@1": np.array([0.0, 0, 1]), "map@r": np.zeros(3)}
    )
    for name, values in (("one", one), ("two", two)):
        bench.save_query_values(tmp_path / f"{name}.npz", values)
    mean = bench.average_values([tmp_path / "one.npz", tmp_path / "two.npz"])
    assert mean.values["recall@1"].tolist() == [0.5, 0.0, 1.0] and mean.values["map@r"].tolist() == [0.5] * 3


def test_peer_script_is_self_contained() -> None:
    tree = ast.parse((TOOLS / "plain_pml_script.py").read_text())
    modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in modules if m.split(".")[0] == "retrieval"]


PEER_LOSSES = ["proxy_nca", "proxy_anchor", "triplet", "soft_triple", "multi_similarity", "supcon", "contrastive"]
# Runs tools/plain_pml_script.py once per (stdout file, arguments) pair of the JSON in argv[2], each as
# `python tools/plain_pml_script.py ARGS` would run it: as __main__, with its own sys.argv and its folder first on
# sys.path. One fresh interpreter for all the losses pays torch, timm and PML's imports once instead of per loss.
PEER_DRIVER = """
import contextlib, json, os, runpy, sys, traceback
script, runs = sys.argv[1], json.loads(sys.argv[2])
sys.path[0] = os.path.dirname(script)
for out, argv in runs:
    sys.argv = [script, *argv]
    with open(out, "w") as handle, contextlib.redirect_stdout(handle):
        try:
            runpy.run_path(script, run_name="__main__")
        except BaseException:
            traceback.print_exc(file=handle)
            continue
    open(out + ".ok", "w").close()
"""


@pytest.fixture(scope="module")
def peer_runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Per loss of PEER_LOSSES: the folder of its tiny plain_pml_script.py run on one glyph dataset, and its stdout."""
    glyphs = load_tool("make_glyph_dataset")
    fonts = glyphs.find_fonts()
    if len({f.family for f in fonts}) < 4:
        pytest.skip("the fonts-* Debian packages are not installed")
    root = tmp_path_factory.mktemp("peer")
    glyphs.make_dataset(root, train_classes=3, val_classes=1, test_classes=3, train_per_class=4, fonts=fonts)
    runs = []
    for loss in PEER_LOSSES:
        (root / loss).mkdir()
        argv = [f"--csv={root / 'dataset.csv'}", "--backbone=resnet10t", "--batch-size=4", "--epochs=1"]
        argv += ["--workers=0", "--threads=1", f"--loss={loss}", f"--json={root / loss / 'm.json'}"]
        runs.append((str(root / loss / "stdout.txt"), [*argv, f"--embeddings-out={root / loss / 'e'}"]))
    command = [sys.executable, "-c", PEER_DRIVER, str(TOOLS / "plain_pml_script.py"), json.dumps(runs)]
    subprocess.run(command, check=True)
    return {loss: (root / loss, (root / loss / "stdout.txt").read_text()) for loss in PEER_LOSSES}


@pytest.mark.slow
@pytest.mark.parametrize("loss", PEER_LOSSES)
def test_peer_script_trains_and_prints_metrics(peer_runs, loss: str) -> None:
    folder, output = peer_runs[loss]
    assert (folder / "stdout.txt.ok").is_file(), output  # the run finished without an exception
    metrics = bench.parse_metrics(output)
    assert set(metrics) == {"recall@1", "map@r"} and all(0 <= v <= 1 for v in metrics.values())
    saved = json.loads((folder / "m.json").read_text())
    assert round(saved["recall@1"], 4) == metrics["recall@1"] and saved["loss"] == loss
    # The toolkit's scoring of the saved embeddings agrees with PML's AccuracyCalculator.
    values = bench.score_embeddings(folder.parent / "dataset.csv", "test", np.load(folder / "e" / "test.npy"))
    assert values.values["recall@1"].mean() == pytest.approx(saved["recall@1"], abs=1e-6)
    assert values.values["map@r"].mean() == pytest.approx(saved["map@r"], abs=1e-5)
