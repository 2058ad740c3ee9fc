"""`retrieval evaluate` on the command line: it prints the text of the report `run_evaluation` makes, writes its
record as `--json`, and refuses what cannot apply in one line (exit code 2).

The evaluation itself is tested as a library call (`tests/evaluate/test_run.py`, `tests/evaluate/test_analysis.py`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.core.learned_rerank import MANIFEST_FILE
from retrieval.evaluate.leak_check import HASH_CACHE_ENV
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from tests.conftest import add_train_copy_as_test
from tests.evaluate.checkpoints import write_digits_checkpoint

_DATA = ("data.val_fraction=0", "data.num_workers=0", "train.threads=1")
DIGITS = ["--set", "data.name=digits", "--set", "data.image_size=16", "--set", "data.num_workers=0"]
DIGITS += ["--set", "train.device=cpu"]


def _overrides(csv_dataset: Path) -> tuple[str, ...]:
    return (f"data.path={csv_dataset}", *_DATA)


def test_the_report_is_what_the_command_prints_and_writes(tiny_checkpoint, csv_dataset, tmp_path, capsys):
    report = run_evaluation(EvaluationRequest(checkpoint=tiny_checkpoint, overrides=_overrides(csv_dataset)))
    assert 0 <= report.metrics["recall@1"] <= 1 and report.record().uncertainty == report.uncertainty
    assert report.text().splitlines()[-1].startswith("MAP@R: ") and report.leak_warning is None
    settings = [argument for setting in _overrides(csv_dataset) for argument in ("--set", setting)]
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *settings]) == 0
    assert capsys.readouterr().out.strip() == report.text()


@pytest.fixture(scope="module")
def proxy_checkpoint(tmp_path_factory):
    return write_digits_checkpoint(tmp_path_factory.mktemp("checkpoint") / "best.pt", "anchor")


def test_calibrate_without_a_validation_split_says_how_to_add_one(proxy_checkpoint, capsys):
    args = ["evaluate", "--checkpoint", str(proxy_checkpoint), "--calibrate", "--set", "data.val_fraction=0"]
    assert main(args) == 2
    assert "set data.val_fraction" in capsys.readouterr().err


def test_classification_needs_proxies(tmp_path, capsys):
    checkpoint = write_digits_checkpoint(tmp_path / "triplet.pt", "triplet")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--classification", str(tmp_path / "out")]) == 2
    assert "needs a checkpoint trained with a proxy loss" in capsys.readouterr().err


def test_rerank_parameters_are_chosen_on_validation_and_recorded(proxy_checkpoint, tmp_path, capsys):
    checkpoint = proxy_checkpoint
    result = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "qe", "--json", str(result)]) == 0
    out = capsys.readouterr().out
    chosen = json.loads(result.read_text())["rerank"]
    assert chosen["chosen_on"] == "validation" and chosen["spec"].startswith("qe:k=")
    assert f"re-ranking: {chosen['spec']} (chosen on validation: MAP@R {chosen['validation']['map@r']:.4f}" in out
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "mqe"]) == 2
    assert "unknown re-ranking method 'mqe'" in capsys.readouterr().err


def test_evaluate_prints_the_embedding_alone_and_the_reranked_rows(
    tiny_reranker, tiny_reranker_over_dba, tmp_path, capsys
):
    checkpoint, dataset, directory, _ = tiny_reranker
    base = ["evaluate", "--checkpoint", str(checkpoint), "--set", f"data.path={dataset}"]
    base += ["--set", "data.val_fraction=0.34", "--set", "data.num_workers=0", "--json", str(tmp_path / "m.json")]
    forced = tmp_path / "applied"
    shutil.copytree(directory, forced)
    manifest = json.loads((forced / MANIFEST_FILE).read_text())
    manifest.update(depth=4, weight=0.5, base=None)  # applied whatever validation chose: the pair model's path runs
    (forced / MANIFEST_FILE).write_text(json.dumps(manifest))
    over_dba = tiny_reranker_over_dba[1]  # the forced one, chosen over dba:k=2,alpha=0
    for chosen, applied in ((directory, None), (forced, True), (over_dba, True)):
        assert main([*base, "--reranker", str(chosen)]) == 0
        out = capsys.readouterr().out
        record = json.loads((tmp_path / "m.json").read_text())["reranker"]
        assert "embedding alone" in out and "re-ranked" in out
        if applied is None:
            applied = record["applied"]
        assert record["applied"] == applied
        if not applied:
            assert "it will not be applied" in out and record["reranked"] == record["embedding_alone"]
        else:
            over = "" if chosen != over_dba else " over dba:k=2,alpha=0"
            assert f"re-ranked (N=4, w=0.5{over})" in out and record["base"] == (over.strip()[5:] or None)
            assert json.loads((tmp_path / "m.json").read_text())["recall@1"] == record["reranked"]["recall@1"]


def test_a_reranker_of_another_checkpoint_or_image_size_is_refused(tiny_reranker, other_checkpoint, capsys):
    checkpoint, dataset, directory, _ = tiny_reranker
    sets = ["--set", f"data.path={dataset}", "--set", "data.num_workers=0"]
    assert main(["evaluate", "--checkpoint", str(other_checkpoint), *sets, "--reranker", str(directory)]) == 2
    assert "this re-ranker belongs to checkpoint" in capsys.readouterr().err
    sized = ["--set", "data.image_size=48", "--reranker", str(directory)]
    assert main(["evaluate", "--checkpoint", str(checkpoint), *sets, *sized]) == 2
    assert "trained at data.image_size=32" in capsys.readouterr().err
    both = ["--rerank", "qe", "--reranker", str(directory)]
    assert main(["evaluate", "--checkpoint", str(checkpoint), *sets, *both]) == 2
    assert "evaluate one at a time" in capsys.readouterr().err


def test_without_a_validation_split_thresholds_need_the_labelled_opt_in(checkpoint_factory, tmp_path, capsys):
    checkpoint = checkpoint_factory(tmp_path / "best.pt")
    args = ["evaluate", "--checkpoint", str(checkpoint), *DIGITS, "--set", "data.val_fraction=0"]
    assert main([*args, "--save-threshold", "1e-3"]) == 2
    assert "--save-threshold chooses the threshold on a validation split" in capsys.readouterr().err

    assert main([*args, "--verification", "--set", "train.select_on_test=true"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("thresholds chosen on the TEST pairs themselves (train.select_on_test; optimistic)" in x for x in lines)
    chosen = [line for line in lines if line.startswith("verification at FMR")]
    assert len(chosen) == 3 and all(line.endswith("(chosen on test)") for line in chosen)


@pytest.mark.parametrize("value", ["0", "1", "often"])
def test_a_false_match_rate_outside_0_1_is_refused(value, tiny_checkpoint, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--save-threshold", value])
    assert exit_info.value.code == 2


@pytest.fixture
def leak_hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leak check's file hash cache under this test's folder, never the user's (as in test_leak_check.py)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(HASH_CACHE_ENV, raising=False)


@pytest.mark.slow
@pytest.mark.usefixtures("leak_hash_cache")
def test_evaluate_warns_about_a_copied_file_and_scores_without_it_when_asked(
    csv_dataset, tiny_checkpoint, tmp_path, capsys
):
    dataset = add_train_copy_as_test(csv_dataset, "leaked.png", 101)  # a train image, as a test image of another class
    base = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--set", f"data.path={dataset}"]
    base += ["--set", "data.num_workers=0", "--set", "data.val_fraction=0"]
    assert main([*base, "--json", str(tmp_path / "all.json")]) == 0
    warned = capsys.readouterr()
    assert warned.err.count("warning: 1 of 13 test images (7.69%) are identical files to train/val images") == 1
    assert main([*base, "--exclude-leaks", "--json", str(tmp_path / "clean.json")]) == 0
    excluded = capsys.readouterr()
    assert (
        "warning: 1 of 13 test images (7.69%) are copies (the audit's copy check, ratio <= 0.5) of train/val images; "
        "the metrics below leave them out" in excluded.err
    )
    assert json.loads((tmp_path / "clean.json").read_text())["leaks"]["excluded"] is True
    assert main([*base, "--leak-ratio", "0.4"]) == 2
    assert "add --exclude-leaks" in capsys.readouterr().err
    for bad in ("1.5", "-0.1", "nan", "half"):
        with pytest.raises(SystemExit) as exited:
            main([*base, "--exclude-leaks", "--leak-ratio", bad])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "takes a distance ratio in [0, 1)" in err and "Traceback" not in err
