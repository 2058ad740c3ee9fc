"""Config loading: every shipped config builds, typos and wrong types fail with the valid keys."""

from pathlib import Path

import pytest
import yaml

from retrieval.config import DEMO_CONFIG, config_from_dict, config_to_dict, load_config, save_config
from retrieval.errors import UserError
from retrieval.losses import LOSSES, build_loss

CONFIGS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs").glob("*.yaml"))


def test_the_demo_is_the_default():
    assert load_config(None) == load_config(DEMO_CONFIG)
    assert load_config(None).data.name == "digits"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds_its_loss(path):
    config = load_config(path, ["data.path=unused.csv"])
    loss = build_loss(config.loss.name, config.loss.params, num_classes=5, embedding_dim=config.model.embedding_dim)
    assert isinstance(loss, LOSSES[config.loss.name])


def test_every_registered_loss_has_a_shipped_config():
    names = {yaml.safe_load(path.read_text())["loss"]["name"] for path in CONFIGS}
    assert set(LOSSES) <= names


def test_overrides_are_typed_by_the_field_they_set():
    config = load_config(
        None,
        [
            "train.lr=3e-4",
            "train.epochs=2",
            "train.freeze_bn=true",
            "model.weights=null",
            "loss.gamma=32",
            "data.path=x.csv",
        ],
    )
    assert config.train.lr == pytest.approx(3e-4) and isinstance(config.train.lr, float)
    assert config.train.epochs == 2 and config.train.freeze_bn is True
    assert config.model.weights is None and config.data.path == "x.csv"
    assert config.loss.params["gamma"] == 32.0 and isinstance(config.loss.params["gamma"], float)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"model": {"backbon": "resnet18"}}, "unknown config key model.backbon; valid keys in model: backbone, "),
        ({"trian": {}}, r"unknown config section\(s\) \['trian'\]; valid sections: model, data, augment, loss, train"),
        ({"train": {"epochs": "ten"}}, "train.epochs must be int, got 'ten'"),
        ({"train": {"epochs": 2.5}}, "train.epochs must be int, got 2.5"),
        ({"model": {"pretrained": "maybe"}}, "model.pretrained must be bool"),
        ({"loss": {"name": "proxynca"}}, "unknown loss.name 'proxynca'; valid names: anchor, circle, proxy_nca"),
        (
            {"loss": {"name": "anchor", "scale": 3}},
            "unknown config key loss.scale for loss 'anchor'; valid parameters: detach_scale, gamma",
        ),
        ({"loss": {"name": "anchor", "gamma": "big"}}, "loss.gamma must be float"),
    ],
)
def test_bad_configs_fail_with_the_valid_options(raw, message):
    with pytest.raises(UserError, match=message):
        config_from_dict(raw)


@pytest.mark.parametrize("override", ["train.lr", "lr=3", "train.=3"])
def test_malformed_override_says_the_expected_form(override):
    with pytest.raises(UserError, match="--set expects section.key=value"):
        load_config(None, [override])


def test_resolved_config_round_trips_with_every_default_filled(tmp_path):
    config = config_from_dict({"loss": {"name": "proxy_nca"}, "data": {"name": "digits"}})
    save_config(config, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["loss"] == {"name": "proxy_nca", "scale": 16.0}
    assert saved["train"]["proxy_lr_mult"] == 100.0
    assert config_from_dict(saved) == config
    assert config_to_dict(config) == saved


def test_missing_or_invalid_yaml_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
