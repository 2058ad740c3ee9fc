"""Config loading: every shipped config builds, typos and wrong types fail with the valid keys."""

import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from retrieval.choices import losses as loss_choices
from retrieval.choices.augment_presets import PRESETS, PresetName
from retrieval.config import (
    BAD_IMAGE_POLICIES,
    DEMO_CONFIG,
    SCHEDULES,
    AugmentConfig,
    Config,
    DataConfig,
    ModelConfig,
    check_config,
    config_from_dict,
    config_to_dict,
    load_config,
    save_config,
)
from retrieval.data import image_loader
from retrieval.errors import UserError
from retrieval.losses import LOSSES, build_loss
from retrieval.models.pooling import POOLINGS

CONFIGS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs").glob("*.yaml"))


def test_the_demo_is_the_default():
    assert load_config(None) == load_config(DEMO_CONFIG)
    assert load_config(None).data.name == "digits"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds_its_loss(path):
    config = load_config(path, ["data.path=unused.csv"])
    loss = build_loss(config.loss.name, config.loss.params, num_classes=5, embedding_dim=config.model.embedding_dim)
    assert isinstance(loss, LOSSES[config.loss.name])


def test_the_shipped_configs_cite_only_pages_the_repository_holds():
    root = CONFIGS[0].parents[1]
    for path in [*CONFIGS, DEMO_CONFIG]:
        for page in re.findall(r"[\w./-]+\.md\b", path.read_text()):
            assert (root / page).is_file() or (root / "docs" / page).is_file(), f"{path.name} cites {page}"


@pytest.mark.parametrize(
    "path", [path for path in [DEMO_CONFIG, *CONFIGS] if "steps per epoch" in path.read_text()], ids=lambda p: p.name
)
def test_a_digits_config_says_how_many_steps_an_epoch_takes(path):
    """719 of the 898 training digits train when 20% of each digit is held out; the last partial batch is dropped."""
    said = re.search(r"# (\d+) steps per epoch", path.read_text())
    data = load_config(path).data
    assert (data.name, data.val_fraction, data.sampler) == ("digits", 0.2, "auto")
    assert int(said[1]) == 719 // data.batch_size


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_registered_loss_is_configured_by_its_name_alone(name):
    """A registered loss needs no config file of its own: `--set loss.name=NAME` takes its constructor's defaults."""
    config = load_config(None, [f"loss.name={name}"])
    loss = build_loss(config.loss.name, config.loss.params, num_classes=5, embedding_dim=config.model.embedding_dim)
    assert isinstance(loss, LOSSES[name])


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
        (
            {"loss": {"name": "proxynca"}},
            "unknown loss.name 'proxynca'; valid names: anchor, arcface, asymmetric_proxy, circle, contrastive, "
            "cosface",
        ),
        (
            {"loss": {"name": "anchor", "scale": 3}},
            "unknown config key loss.scale for loss 'anchor'; "
            "valid parameters: beta, class_weights, detach_scale, difficulty, gamma, gate, gate_warmup_epochs, "
            "margin, tau",
        ),
        ({"loss": {"name": "anchor", "gamma": "big"}}, "loss.gamma must be float"),
    ],
)
def test_bad_configs_fail_with_the_valid_options(raw, message):
    with pytest.raises(UserError, match=message):
        config_from_dict(raw)


def test_check_config_refuses_a_loss_name_no_loss_can_have_in_load_config_s_words():
    """`loss.name=anchr` waited for PyTorch (issue 48). A capitalised name may be a pytorch-metric-learning
    class given bare: that is checked, with torch, when the loss section is built."""
    with pytest.raises(UserError) as early:
        check_config(None, ["loss.name=anchr"])
    with pytest.raises(UserError) as built:
        load_config(None, ["loss.name=anchr"])
    assert str(early.value) == str(built.value) and "unknown loss.name 'anchr'; valid names: anchor," in str(
        built.value
    )
    check_config(None, ["loss.name=MultiSimilarityLoss"])
    check_config(None, ["loss.name=Anchr"])
    with pytest.raises(UserError, match="unknown loss.name 'Anchr'; valid names: anchor,"):
        load_config(None, ["loss.name=Anchr"])
    assert LOSSES is loss_choices.LOSSES  # the config checks names against the registry that builds them


@pytest.mark.parametrize("override", ["train.lr", "lr=3", "train.=3"])
def test_malformed_override_says_the_expected_form(override):
    with pytest.raises(UserError, match="--set expects section.key=value"):
        load_config(None, [override])


def test_resolved_config_round_trips_with_every_default_filled(tmp_path):
    config = config_from_dict({"loss": {"name": "proxy_nca"}, "data": {"name": "digits"}})
    save_config(config, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["loss"] == {
        "name": "proxy_nca",
        "class_weights": "none",
        "beta": 0.999,
        "scale": 16.0,
        "gate": None,
        "tau": 1.0,
        "gate_warmup_epochs": 5,
    }
    assert saved["train"]["proxy_lr_mult"] == 100.0
    assert config_from_dict(saved) == config
    assert config_to_dict(config) == saved


def test_missing_or_invalid_yaml_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9" * 5000, r"--set train.epochs: cannot read the value \(exceeds the limit \(4300 digits\)"),
        ("[" * 2000, "--set train.epochs: lists or mappings nested too deeply to parse"),
    ],
    ids=["5000 digits", "2000 brackets"],
)
def test_a_value_python_or_the_parser_cannot_hold_is_one_line(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        load_config(None, [f"train.epochs={text}"])
    (tmp_path / "deep.yaml").write_text(f"train:\n  epochs: {text}\n")
    with pytest.raises(UserError, match=f"config file {tmp_path / 'deep.yaml'}: "):
        load_config(tmp_path / "deep.yaml")


def test_changing_the_loss_name_starts_from_the_new_loss_defaults(tmp_path):
    circle = {"memory_size": 0, "m": 0.25}
    assert load_config(None, ["loss.name=circle"]).loss.params == {**circle, "gamma": 256.0}
    assert load_config(None, ["loss.gamma=80", "loss.name=circle"]).loss.params == {**circle, "gamma": 80.0}
    proxy_nca = Path(__file__).resolve().parent.parent / "configs" / "csv_proxy_nca.yaml"
    assert load_config(proxy_nca, ["loss.name=anchor"]).loss.params == {
        "class_weights": "none",
        "beta": 0.999,
        "gamma": 16.0,
        "detach_scale": True,
        "difficulty": "norm",
        "margin": 0.35,
        "gate": None,
        "tau": 1.0,
        "gate_warmup_epochs": 5,
    }
    assert load_config(None, ["loss.name=anchor", "loss.gamma=8"]).loss.params["gamma"] == 8.0  # same name: kept


def test_augment_preset_auto_follows_the_dataset():
    assert config_from_dict({"data": {"name": "csv"}}).augment.preset == "light"
    assert config_from_dict({"data": {"name": "digits"}}).augment.preset == "light"
    assert config_from_dict({"data": {"name": "cub200", "root": "CUB_200_2011"}}).augment.preset == "natural"
    assert (
        config_from_dict(
            {"data": {"name": "cub200", "root": "CUB_200_2011"}, "augment": {"preset": "auto"}}
        ).augment.preset
        == "natural"
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_resolves_every_knob(preset):
    augment = config_from_dict({"augment": {"preset": preset}}).augment
    for key, value in PRESETS[preset].items():
        assert getattr(augment, key) == value, key
    for key, field in AugmentConfig.model_fields.items():
        if key != "preset" and key not in PRESETS[preset]:
            assert getattr(augment, key) == field.default, key  # a knob the preset leaves out: its neutral default


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_preset_lists_only_the_knobs_it_sets_away_from_their_defaults(preset):
    """The knobs and their neutral defaults live on `AugmentConfig`; a preset is its differences from them."""
    for key, value in PRESETS[preset].items():
        assert key in AugmentConfig.model_fields and key != "preset", key
        assert value != AugmentConfig.model_fields[key].default, key


def test_augment_knobs_override_the_preset_from_the_file_and_the_command_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"augment": {"preset": "glyph", "crop_scale": [0.5, 1.0], "fill": "black"}}))
    augment = load_config(path, ["augment.hflip=0.25", "augment.affine_scale=0.8,1.2"]).augment
    assert augment.crop_scale == (0.5, 1.0) and augment.fill == "black"  # from the file
    assert augment.hflip == 0.25 and augment.affine_scale == (0.8, 1.2)  # from --set
    assert augment.eval_mode == config_from_dict({"augment": {"preset": "glyph"}}).augment.eval_mode  # the preset
    assert load_config(path, ["augment.crop_scale=null"]).augment.crop_scale is None
    assert load_config(path, ["augment.crop_scale=[0.2, 0.9]"]).augment.crop_scale == (0.2, 0.9)


def test_a_preset_set_on_the_command_line_replaces_the_files_knobs(tmp_path):
    """A saved run config holds every knob; --set augment.preset must still switch to that preset."""
    path = tmp_path / "config.yaml"
    save_config(config_from_dict({"augment": {"preset": "natural"}}), path)
    augment = load_config(path, ["augment.preset=glyph", "augment.fill=black"]).augment
    assert augment.crop_scale is None and augment.hflip == 0.0 and augment.fill == "black"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.pooling=nope", "model.pooling must be one of avg, max, token, avgmax, gem, got 'nope'"),
        ("train.eval_every=0", "train.eval_every must be an integer >= 1, got 0"),
        ("data.batch_size=0", "data.batch_size must be an integer >= 2, got 0"),
        ("data.num_workers=-1", "data.num_workers must be an integer >= 0, got -1"),
        ("train.lr=0", "train.lr must be a number > 0"),
        ("train.lr=nan", "train.lr must be a number > 0"),
        ("train.select_on=recall@2", "train.select_on must be recall@1 or map@r"),
        ("data.val_fraction=1.5", "data.val_fraction must be a fraction in [0, 1)"),
        ("data.val_classes=2.5", "data.val_classes must be 0, a fraction < 1 or a count"),
        ("train.threads=0", "train.threads must be null or an integer >= 1"),
        ("model.output_stride=4", "model.output_stride must be null, 8, 16 or 32, got 4"),
    ],
)
def test_values_out_of_range_name_the_key_and_the_range(override, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_config(None, [override])


def test_both_validation_holdouts_at_once_are_refused():
    with pytest.raises(UserError, match="data.val_classes and data.val_fraction are both set"):
        load_config(None, ["data.val_classes=2", "data.val_fraction=0.1"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "augment.preset=glyf",
            "unknown augment.preset 'glyf'; valid presets: auto, natural, glyph, artwork, document, sketch",
        ),
        ("augment.crop_scale=0.5", r"augment.crop_scale must be a pair of numbers \(e.g. 0.5,1.0\) or null"),
        ("augment.crop_scale=a,b", "augment.crop_scale must be a pair of numbers"),
        ("augment.crop_scale=1.0,0.5", "augment.crop_scale must be null or two area fractions 0 < low <= high <= 1"),
        ("augment.crop_scale=0,1", "augment.crop_scale must be null or two area fractions"),
        ("augment.affine_scale=1.2,0.8", "augment.affine_scale must be two zoom factors 0 < low <= high"),
        ("augment.hflip=1.5", r"augment.hflip must be a probability in \[0, 1\], got 1.5"),
        ("augment.random_erasing=-0.1", r"augment.random_erasing must be a probability in \[0, 1\]"),
        ("augment.hue_jitter=0.6", r"augment.hue_jitter must be a hue shift in \[0, 0.5\], got 0.6"),
        ("augment.grayscale=2", r"augment.grayscale must be a probability in \[0, 1\]"),
        ("augment.blur=-1", r"augment.blur must be a probability in \[0, 1\]"),
        ("augment.eval_mode=crop", "augment.eval_mode must be one of center_crop, resize, pad_square, got 'crop'"),
        ("augment.fill=grey", "augment.fill must be one of auto, white, black, mean, got 'grey'"),
        ("augment.crop_pct=0", r"augment.crop_pct must be a fraction in \(0, 1\]"),
        ("augment.auto_augment=nonsense", "augment.auto_augment 'nonsense' is not a timm policy"),
        ("augment.flip=0.5", "unknown config key augment.flip; valid keys in augment: preset, crop_scale, "),
    ],
)
def test_bad_augment_values_are_one_line_user_errors(override, message):
    with pytest.raises(UserError, match=message) as caught:
        load_config(None, [override])
    assert "\n" not in str(caught.value)


def test_resolved_augment_round_trips_through_yaml(tmp_path):
    config = config_from_dict({"augment": {"preset": "document", "crop_scale": [0.5, 1.0], "auto_augment": "rand-m5"}})
    save_config(config, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["augment"]["crop_scale"] == [0.5, 1.0] and saved["augment"]["preset"] == "document"
    assert set(saved["augment"]) == set(AugmentConfig.model_fields)
    assert config_from_dict(saved) == config


def test_set_null_switches_off_an_optional_value_the_file_set(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {"data": {"name": "digits", "val_fraction": 0.2}, "train": {"grad_clip": 1.0}, "model": {"weights": "w.pt"}}
        )
    )
    assert load_config(path).data.val_fraction == 0.2
    config = load_config(path, ["data.val_fraction=null", "train.grad_clip=~", "model.weights=null"])
    assert config.data.val_fraction is None and config.train.grad_clip is None and config.model.weights is None


def test_set_values_are_read_as_yaml_and_typed_by_the_field():
    config = load_config(
        None,
        [
            "augment.affine_scale=[0.8, 1.2]",
            "augment.crop_ratio=0.5,2.0",
            "train.lr=1.5e-3",
            "model.output_stride=16",
            "data.path=123",
            "train.freeze_bn=1",
            "loss.gate=null",
        ],
    )
    assert config.augment.affine_scale == (0.8, 1.2) and config.augment.crop_ratio == (0.5, 2.0)
    assert config.train.lr == pytest.approx(1.5e-3) and isinstance(config.train.lr, float)
    assert config.model.output_stride == 16 and config.data.path == "123" and config.train.freeze_bn is True
    assert config.loss.params["gate"] is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.backbone=null",
            "model.backbone must be str, got 'null'; fix it in the config or with --set model.backbone",
        ),
        ("train.epochs=null", "train.epochs must be int, got 'null'"),
        ("train.epochs=[1, 2]", "train.epochs must be int, got '[1, 2]'"),
        ("augment.hflip=[0.5]", "augment.hflip must be float, got '[0.5]'"),
        ("train.amp=null", "train.amp must be one of none, bf16, fp16, auto, got None"),
        ("train.schedule=linear", "train.schedule must be one of cosine, step, constant, got 'linear'"),
        ("train.select_on=[map@r]", "train.select_on must be recall@1 or map@r, got '[map@r]'"),
        ("model.output_stride=abc", "model.output_stride must be null, 8, 16 or 32, got 'abc'"),
        ("train.plots=maybe", "train.plots must be bool, got 'maybe'"),
        ("reranker.pairs_from=nope", "reranker.pairs_from must be one of train, validation, got 'nope'"),
        ("reranker.require_clear_gain=2", "reranker.require_clear_gain must be bool, got '2'"),
        ("reranker.base=qe", "reranker.base must be null, dba or dba:k=K,alpha=A, got 'qe'; fix it"),
        (
            "reranker.base=dba:k=0",
            "reranker.base must be null, dba or dba:k=K,alpha=A, got 'dba:k=0' (re-ranking dba: k must be a whole "
            "number >= 1, got 0); fix it",
        ),
        (
            "reranker.base=dba:k=2,beta=1",
            "reranker.base must be null, dba or dba:k=K,alpha=A, got 'dba:k=2,beta=1' (re-ranking dba: unknown "
            "parameter 'beta=1'; its parameters are k, alpha)",
        ),
    ],
)
def test_a_bad_set_value_is_one_line_naming_what_the_key_accepts(override, message):
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_config(None, [override])
    assert "\n" not in str(caught.value)


def test_sections_built_in_python_check_their_fields():
    with pytest.raises(UserError, match=re.escape("data.batch_size must be an integer >= 2, got 1; fix it")):
        DataConfig(batch_size=1)
    with pytest.raises(UserError, match=re.escape("model.pooling must be one of avg, max, token, avgmax, gem")):
        ModelConfig(pooling="mean")
    assert Config().augment.preset == "light"  # data.name csv's preset


def test_choice_lists_match_the_modules_that_implement_them():
    assert typing.get_args(typing.get_type_hints(ModelConfig)["pooling"]) == POOLINGS
    assert tuple(PRESETS) == typing.get_args(PresetName)
    assert BAD_IMAGE_POLICIES == ("fail", "skip") and SCHEDULES == ("cosine", "step", "constant")
    assert BAD_IMAGE_POLICIES == image_loader.BAD_IMAGE_POLICIES


@pytest.mark.slow
def test_importing_the_config_imports_neither_torch_nor_timm():
    code = "import sys, retrieval.config; print(sorted({'torch', 'timm', 'retrieval.data'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.epoch=3", "unknown config key train.epoch; valid keys in train: epochs, lr, "),
        ("augment.hlfip=0.5", "unknown config key augment.hlfip; valid keys in augment: preset, "),
        ("loss.gama=8", "unknown config key loss.gama for loss 'anchor'; valid parameters: beta, "),
    ],
)
def test_an_unknown_key_names_the_nearest_valid_one(override, message):
    key = override.partition("=")[0]
    nearest = {"train.epoch": "train.epochs", "augment.hlfip": "augment.hflip", "loss.gama": "loss.gamma"}[key]
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_config(None, [override])
    assert str(caught.value).endswith(f"; did you mean {nearest}?") and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.epochs=true", "train.epochs must be int, got 'true'"),
        ("train.epochs=2.0", "train.epochs must be int, got '2.0'"),
        ("train.lr=yes", "train.lr must be float, got 'yes'"),
        ("loss.gamma=false", "loss.gamma must be float, got 'false'"),
    ],
)
def test_a_bool_or_a_fraction_is_never_read_as_a_number(override, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_config(None, [override])


def test_set_values_are_parsed_first_and_the_whole_config_is_checked_once(tmp_path):
    """`--set` values join the file's before anything is checked: the rules across keys see both."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"data": {"name": "digits", "val_classes": 2}}))
    with pytest.raises(UserError, match="data.val_classes and data.val_fraction are both set"):
        load_config(path, ["data.val_fraction=0.1"])
    assert load_config(path, ["data.val_fraction=0.1", "data.val_classes=0"]).data.val_fraction == 0.1
