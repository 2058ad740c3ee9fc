"""Arguments that used to end in a traceback, or to lose a finished command's result, end in one line or succeed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main


def _data(csv_dataset: Path) -> list[str]:
    settings = [f"data.path={csv_dataset}", "data.val_fraction=0", "data.num_workers=0", "train.threads=1"]
    return [argument for setting in settings for argument in ("--set", setting)]


@pytest.mark.slow
def test_evaluate_and_compare_write_into_a_folder_that_does_not_exist(tiny_checkpoint, csv_dataset, tmp_path):
    out = tmp_path / "new" / "deeper"
    outputs = ["--json", str(out / "metrics.json"), "--per-query", str(out / "queries.npz")]
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *_data(csv_dataset), *outputs]) == 0
    assert "map@r" in json.loads((out / "metrics.json").read_text())
    queries = str(out / "queries.npz")
    assert main(["compare", queries, queries, "--json", str(tmp_path / "other" / "compare.json")]) == 0
    assert "difference" in json.loads((tmp_path / "other" / "compare.json").read_text())


def test_an_output_file_that_is_a_folder_is_refused_before_any_work(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--json", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"{tmp_path} is a folder; name a file in it" in capsys.readouterr().err


def test_more_shards_than_rows_is_one_line(tmp_path, capsys):
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).random((300, 8), dtype=np.float32))
    inputs = ["--embeddings", str(tmp_path / "rows.npy")]
    assert main(["index", "train", *inputs, "--out", str(tmp_path / "trained"), "--nlist", "4"]) == 0
    capsys.readouterr()
    build = ["index", "build", *inputs, "--trained", str(tmp_path / "trained"), "--out", str(tmp_path / "shard")]
    assert main([*build, "--shard", "0/99999999999999999999"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --shard 0/99999999999999999999: 99999999999999999999 shards of 300 rows; use at most one shard a row"
    ]
    assert not (tmp_path / "shard").exists()


def test_a_change_to_an_index_with_lists_on_disk_names_the_command_that_makes_a_writable_one(tmp_path, capsys):
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).random((300, 8), dtype=np.float32))
    build = ["index", "build", "--embeddings", str(tmp_path / "rows.npy"), "--type", "ivf", "--on-disk"]
    assert main([*build, "--out", str(tmp_path / "index")]) == 0
    capsys.readouterr()
    assert main(["index", "remove", "--index", str(tmp_path / "index"), "--ids", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: cannot remove from a read-only index: its on-disk lists (lists.ivfdata, memory-mapped by --on-disk, "
        "index merge or ivfpq) cannot be changed by FAISS; build the index again with what it should hold: retrieval "
        "index build --embeddings PATH... --out NEW_DIR"
    ]


@pytest.mark.slow
def test_index_export_draws_no_bar_into_a_log(tmp_path, capsys):
    """Standard error is no terminal here, as in a log: the bar's carriage returns stay out of it."""
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).random((300, 8), dtype=np.float32))
    assert main(["index", "build", "--embeddings", str(tmp_path / "rows.npy"), "--out", str(tmp_path / "index")]) == 0
    capsys.readouterr()
    uri = f"qdrant+local://{tmp_path / 'db'}?collection=rows"
    assert main(["index", "export", "--index", str(tmp_path / "index"), "--to", uri]) == 0
    out, err = capsys.readouterr()
    assert "300 vectors (300 written" in out
    assert "\r" not in err and "exporting" not in err


@pytest.mark.slow
def test_embedding_commands_print_progress_lines_where_no_bar_shows(
    tiny_checkpoint, csv_dataset, tmp_path, capsys, monkeypatch
):
    """Standard error is no terminal here, as in a log: a heartbeat line instead of the bar (every batch at 0 s)."""
    monkeypatch.setattr("retrieval.runtime.heartbeat.HEARTBEAT_SECONDS", 0.0)
    settings = ["data.val_fraction=0", "data.num_workers=0", "data.eval_batch_size=8", "train.threads=1"]
    data = [f"--set=data.path={csv_dataset}", *(f"--set={setting}" for setting in settings)]
    commands = {
        "evaluate": ["evaluate", "--checkpoint", str(tiny_checkpoint), *data],
        "embed": ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset), "--out", "e.npy"],
        "index build": ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset)],
    }
    monkeypatch.chdir(tmp_path)
    for name, args in commands.items():
        extra = ["--out", "index"] if name == "index build" else []
        workers = [] if name == "evaluate" else ["--num-workers", "0", "--batch-size", "8"]
        assert main([*args, *extra, *workers]) == 0
        out = capsys.readouterr().out
        assert re.search(rf"^retrieval {name}: embed: batch 1/\d+ \(\d+%\), \d+s so far, about \d+s left$", out, re.M)


def test_index_build_into_a_folder_of_other_files_is_refused_and_an_index_is_rebuilt(tmp_path, capsys):
    """The save replaces its folder as a whole: a run folder named by mistake used to lose every file in it."""
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).random((50, 8), dtype=np.float32))
    build = ["index", "build", "--embeddings", str(tmp_path / "rows.npy"), "--out"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_text("weights")
    assert main([*build, str(run)]) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error == f"error: --out {run} holds other files and no index.faiss; name a new or empty folder, so nothing "
        "there is lost"
    )
    assert [path.name for path in run.iterdir()] == ["best.pt"]
    assert main([*build, str(tmp_path / "index")]) == 0
    assert main([*build, str(tmp_path / "index")]) == 0  # an index is rebuilt in place


def test_export_into_a_folder_of_other_files_is_refused_before_torch_exports(tmp_path, capsys):
    """An export into an index folder used to overwrite its manifest.json, breaking the index."""
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "manifest.json").write_text("{}")
    assert main(["export", "--checkpoint", str(tmp_path / "no.pt"), "--out", str(tmp_path / "index")]) == 2
    assert "holds other files and no model.onnx" in capsys.readouterr().err
    assert (tmp_path / "index" / "manifest.json").read_text() == "{}"
