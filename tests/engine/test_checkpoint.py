"""Checkpoints are atomic, carry a manifest, and loading says what is wrong with a bad file."""

import pytest
import torch

from retrieval.engine.checkpoint import CHECKPOINT_VERSION, evaluation_payload, load_checkpoint, save_checkpoint
from retrieval.errors import UserError

MODEL_CONFIG = {"backbone": "resnet10t", "embedding_dim": 8}


def _payload():
    return {"model": {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(3)}, "epoch": 4}


def test_round_trip_with_manifest_and_no_temporary_left(tmp_path):
    path = tmp_path / "ckpt" / "best.pt"
    save_checkpoint(path, _payload(), MODEL_CONFIG)
    loaded = load_checkpoint(path)
    assert loaded["epoch"] == 4 and torch.equal(loaded["model"]["w"], _payload()["model"]["w"])
    manifest = loaded["manifest"]
    assert manifest["version"] == CHECKPOINT_VERSION and manifest["embedding_dim"] == 8
    assert manifest["model_config"] == MODEL_CONFIG and len(manifest["checksum"]) == 64
    assert [p.name for p in path.parent.iterdir()] == ["best.pt"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, _payload(), MODEL_CONFIG)

    def broken_save(obj, f):
        open(f, "wb").write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {**_payload(), "epoch": 5}, MODEL_CONFIG)
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_tampered_weights_fail_the_checksum(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, _payload(), MODEL_CONFIG)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["model"]["w"][0, 0] = 42.0
    torch.save(checkpoint, path)
    with pytest.raises(UserError, match="corrupt: model weights do not match"):
        load_checkpoint(path)


def test_newer_version_and_foreign_files_are_explained(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, _payload(), MODEL_CONFIG)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["manifest"]["version"] = CHECKPOINT_VERSION + 1
    torch.save(checkpoint, path)
    with pytest.raises(UserError, match="newer than this toolkit reads"):
        load_checkpoint(path)
    torch.save({"state_dict": {}}, path)
    with pytest.raises(UserError, match="not a retrieval checkpoint"):
        load_checkpoint(path)
    path.write_bytes(b"garbage")
    with pytest.raises(UserError, match="cannot read checkpoint"):
        load_checkpoint(path)
    with pytest.raises(UserError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_the_evaluation_payload_leaves_out_the_optimizer_but_keeps_the_proxies(tmp_path):
    # The proxies are the classifier of `evaluate --classification/--calibrate`; the optimizer only resumes.
    payload = {**_payload(), "optimizer": {"state": {}}, "loss": {"proxies": torch.ones(2, 2)}, "config": {}}
    path = tmp_path / "best.pt"
    save_checkpoint(path, evaluation_payload(payload), MODEL_CONFIG)
    loaded = load_checkpoint(path)
    assert sorted(loaded) == ["config", "epoch", "loss", "manifest", "model"]
    assert torch.equal(loaded["loss"]["proxies"], torch.ones(2, 2))
