"""Checkpoints are atomic, carry a manifest, and loading says what is wrong with a bad file."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from retrieval.checkpoint import CHECKPOINT_VERSION, PAYLOAD_CHECKSUM, Checkpoint, payload_checksum
from retrieval.config import ModelConfig
from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError

MODEL_CONFIG = ModelConfig(backbone="resnet10t", embedding_dim=8)
FIXTURES = Path(__file__).with_name("fixtures")


def _checkpoint(**changes) -> Checkpoint:
    weights = {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(3)}
    return dataclasses.replace(
        Checkpoint(model=weights, model_config=MODEL_CONFIG, run_config={}, num_classes=2, epoch=4), **changes
    )


def _edit_file(path: Path, edit) -> None:
    """Change a saved checkpoint's raw contents in place, as a hand edit or a damaged disk would."""
    raw = torch.load(path, weights_only=True)
    edit(raw)
    torch.save(raw, path)


def test_round_trip_with_manifest_and_no_temporary_left(tmp_path):
    path = tmp_path / "ckpt" / "best.pt"
    _checkpoint().save(path)
    loaded = Checkpoint.read(path)
    assert loaded.epoch == 4 and torch.equal(loaded.model["w"], _checkpoint().model["w"])
    manifest = torch.load(path, weights_only=True)["manifest"]
    assert manifest["version"] == CHECKPOINT_VERSION and manifest["embedding_dim"] == 8
    assert manifest["model_config"] == MODEL_CONFIG.model_dump() and len(manifest["checksum"]) == 64
    assert loaded.model_config == MODEL_CONFIG and loaded.embedding_dim == 8
    assert [p.name for p in path.parent.iterdir()] == ["best.pt"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    _checkpoint().save(path)

    def broken_save(obj, f):
        open(f, "wb").write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        _checkpoint(epoch=5).save(path)
    monkeypatch.undo()
    assert Checkpoint.read(path).epoch == 4
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_tampered_weights_fail_the_checksum(tmp_path):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)
    _edit_file(path, lambda raw: raw["model"]["w"].__setitem__((0, 0), 42.0))
    with pytest.raises(UserError, match="corrupt: model weights do not match"):
        Checkpoint.read(path)


def test_newer_version_and_foreign_files_are_explained(tmp_path):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)
    _edit_file(path, lambda raw: raw["manifest"].__setitem__("version", CHECKPOINT_VERSION + 1))
    with pytest.raises(UserError, match="newer than this toolkit reads"):
        Checkpoint.read(path)
    torch.save({"state_dict": {}}, path)
    with pytest.raises(UserError, match="not a retrieval checkpoint"):
        Checkpoint.read(path)
    path.write_bytes(b"garbage")
    with pytest.raises(UserError, match="cannot read checkpoint"):
        Checkpoint.read(path)
    with pytest.raises(UserError, match="checkpoint not found"):
        Checkpoint.read(tmp_path / "missing.pt")


def test_a_hand_edited_manifest_is_one_line_not_a_key_error(tmp_path):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)
    _edit_file(path, lambda raw: raw["manifest"].__delitem__("checksum"))
    with pytest.raises(UserError, match="damaged retrieval checkpoint"):
        Checkpoint.read(path)


def test_the_slim_checkpoint_leaves_out_the_optimizer_but_keeps_the_proxies(tmp_path):
    # The proxies are the classifier of `evaluate --classification/--calibrate`; the optimizer only resumes.
    full = _checkpoint(optimizer={"state": {}}, loss={"proxies": torch.ones(2, 2)}, selected_weights="ema")
    full.ema, full.grad_scaler = {"model.w": torch.zeros(1)}, {"scale": 1024.0}  # what only a resume needs
    path = tmp_path / "best.pt"
    full.slim().save(path)
    assert sorted(torch.load(path, weights_only=True)) == [
        "best_epoch",
        "best_score",
        "config",
        "epoch",
        "loss",
        "manifest",
        "model",
        "num_classes",
        "selected_weights",
    ]
    loaded = Checkpoint.read(path)
    assert not loaded.resumable and full.resumable and loaded.selected_weights == "ema"
    full.save(tmp_path / "last.pt")
    resumable = Checkpoint.read(tmp_path / "last.pt")
    assert resumable.grad_scaler == {"scale": 1024.0} and torch.equal(resumable.ema["model.w"], torch.zeros(1))
    assert loaded.proxies is not None and torch.equal(loaded.proxies, torch.ones(2, 2))


def test_a_checkpoint_written_by_version_2_still_loads_and_embeds_the_same():
    # tests/fixtures/checkpoint_v2.pt and its embeddings were written by the code of the release that
    # introduced checkpoint version 2 (test_resnet, 8-d, a demo config); reading it must not change.
    checkpoint = Checkpoint.read(FIXTURES / "checkpoint_v2.pt")
    assert checkpoint.resumable and checkpoint.epoch == 2 and checkpoint.best_epoch == 2
    assert checkpoint.num_classes == 10 and checkpoint.model_config.backbone == "test_resnet"
    assert checkpoint.proxies is not None and tuple(checkpoint.proxies.shape) == (10, 8)
    config = checkpoint.config(overrides=["train.epochs=3"])
    assert config.model == checkpoint.model_config and config.train.epochs == 3
    images = torch.linspace(-1, 1, 2 * 3 * 32 * 32).reshape(2, 3, 32, 32)
    with torch.no_grad():
        embeddings = checkpoint.embedder()(images).numpy()
    # Same weights (the manifest checksum held); the forward pass may reorder float32 sums with the thread count.
    np.testing.assert_allclose(embeddings, np.load(FIXTURES / "checkpoint_v2_embeddings.npy"), rtol=0, atol=1e-6)


def test_overrides_edit_a_copy_of_the_checkpoints_config():
    checkpoint = Checkpoint.read(FIXTURES / "checkpoint_v2.pt")
    before = checkpoint.run_config["train"]["epochs"]
    checkpoint.config(overrides=[f"train.epochs={before + 7}"])
    assert checkpoint.run_config["train"]["epochs"] == before


@pytest.mark.parametrize(
    "edit",
    [
        lambda raw: raw["optimizer"]["state"][0]["exp_avg"].add_(1e-3),
        lambda raw: raw["optimizer"]["param_groups"][0].update(lr=0.5),
        lambda raw: raw["loss"]["proxies"].mul_(-1),
        lambda raw: raw.update(epoch=7),
        lambda raw: raw.update(best_score=0.99),
        lambda raw: raw["config"]["train"].update(epochs=99),
        lambda raw: raw["manifest"]["model_config"].update(pooling="avg"),
    ],
    ids=["optimizer-state", "optimizer-lr", "proxies", "epoch", "best-score", "config", "model-config"],
)
def test_a_change_to_any_part_but_the_weights_fails_the_payload_checksum(tmp_path, edit):
    path = tmp_path / "last.pt"
    optimizer = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 3)}}, "param_groups": [{"lr": 0.1}]}
    full = _checkpoint(optimizer=optimizer, loss={"proxies": torch.ones(2, 2)}, run_config={"train": {"epochs": 5}})
    full.save(path)
    assert Checkpoint.read(path).optimizer is not None
    _edit_file(path, edit)
    with pytest.raises(UserError, match="is corrupt: its optimizer state, proxies, counters or config do not match"):
        Checkpoint.read(path)


def test_the_payload_checksum_is_recorded_and_older_version_2_files_without_it_load(tmp_path):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)
    raw = torch.load(path, weights_only=True)
    assert raw["manifest"][PAYLOAD_CHECKSUM] == payload_checksum(raw) and len(raw["manifest"][PAYLOAD_CHECKSUM]) == 64
    assert "payload_checksum" not in torch.load(FIXTURES / "checkpoint_v2.pt", weights_only=True)["manifest"]
    del raw["manifest"][PAYLOAD_CHECKSUM]
    raw["epoch"] = 6  # unverifiable without the field: only the weights are checked, as before it existed
    torch.save(raw, path)
    assert Checkpoint.read(path).epoch == 6


def test_the_match_threshold_is_one_typed_record_through_save_and_load(tmp_path):
    """Written as the JSON object `evaluate --save-threshold` made, read back as `MatchThreshold`."""
    path = tmp_path / "c.pt"
    stored = MatchThreshold(score=0.5, target_fmr=1e-3, chosen_on="val", later_field="kept")
    _checkpoint(match_threshold=stored).save(path)
    assert torch.load(path, weights_only=True)["match_threshold"] == {
        "score": 0.5,
        "target_fmr": 1e-3,
        "chosen_on": "val",
        "later_field": "kept",
    }
    assert Checkpoint.read(path).match_threshold == stored


@pytest.mark.parametrize(("record", "field"), [({"score": "0.5"}, "score"), ({"chosen_on": "val"}, "score")])
def test_a_damaged_match_threshold_is_one_line_naming_its_field(tmp_path, record, field):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)

    def damage(raw):
        raw["match_threshold"] = record
        raw["manifest"][PAYLOAD_CHECKSUM] = payload_checksum(raw)  # a record written wrong, not a flipped byte

    _edit_file(path, damage)
    with pytest.raises(UserError, match=rf"c.pt: match_threshold.{field} (must be|is missing).*--save-threshold"):
        Checkpoint.read(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: raw.__setitem__("epoch", "four"), r"c\.pt\.epoch must be int, got 'four'"),
        (lambda raw: raw.__setitem__("selected_weights", "best"), r"c\.pt\.selected_weights must be one of raw, ema"),
        (lambda raw: raw["manifest"].__setitem__("checksum", 7), r"c\.pt: manifest\.checksum must be str, got 7"),
        (
            lambda raw: raw["manifest"]["model_config"].__setitem__("embedding_dim", 0),
            r"c\.pt: manifest\.model_config\.embedding_dim must be null or an integer >= 1, got 0",
        ),
        (
            lambda raw: raw["manifest"]["model_config"].__setitem__("new_knob", 1),
            r"unknown key \S*c\.pt: manifest\.model_config\.new_knob; valid keys",
        ),
    ],
    ids=["epoch", "selected-weights", "checksum", "model-config-value", "model-config-key"],
)
def test_a_hand_edited_field_is_one_line_naming_the_file_and_the_field(tmp_path, edit, message):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)

    def damage(raw):
        edit(raw)
        raw["manifest"][PAYLOAD_CHECKSUM] = payload_checksum(raw)  # edited on purpose, not a flipped byte

    _edit_file(path, damage)
    with pytest.raises(UserError, match=message) as error:
        Checkpoint.read(path)
    assert "\n" not in str(error.value)


def test_keys_a_later_toolkit_adds_are_ignored(tmp_path):
    path = tmp_path / "c.pt"
    _checkpoint().save(path)

    def add(raw):
        raw["later_part"] = {"x": 1}
        raw["manifest"]["later_field"] = "kept"
        raw["manifest"][PAYLOAD_CHECKSUM] = payload_checksum(raw)

    _edit_file(path, add)
    assert Checkpoint.read(path).epoch == 4


def test_the_saved_layout_is_the_version_2_layout(tmp_path):
    # The file a release wrote and the one written here hold the same keys, so each toolkit reads the other's.
    path = tmp_path / "c.pt"
    _checkpoint(optimizer={"state": {}, "param_groups": []}).save(path)
    written, fixture = torch.load(path, weights_only=True), torch.load(FIXTURES / "checkpoint_v2.pt", weights_only=True)
    assert set(fixture) <= set(written) and set(written) - set(fixture) <= {"selected_weights"}  # added in v2
    assert set(written["manifest"]) - {PAYLOAD_CHECKSUM} == set(fixture["manifest"])
