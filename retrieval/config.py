"""Run configuration: dataclasses loaded from YAML (safe_load), with `--set a.b=value` overrides.

Defaults follow the published recipe for the standard benchmarks (design.md): a pretrained
ResNet-50, 224 px, AdamW at 1e-4 with 100x on proxies, batch 128, 60 epochs. The digits demo
(`configs/digits_demo.yaml`) overrides what a from-scratch CPU run needs. Unknown keys and wrong
types are errors that list the valid keys: a typo is never silently dropped.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from retrieval.augment_presets import AUTO_PRESET, EVAL_MODES, FILLS, PRESETS, preset_for_dataset
from retrieval.errors import UserError
from retrieval.losses.registry import loss_parameters
from retrieval.models.pooling import POOLINGS

__all__ = [
    "BAD_IMAGE_POLICIES",
    "DEMO_CONFIG",
    "ROOT_DATASETS",
    "SCHEDULES",
    "SELECTION_METRICS",
    "AugmentConfig",
    "Config",
    "DataConfig",
    "LossConfig",
    "ModelConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "resolve_augment",
    "save_config",
]

# `retrieval train` without --config: the embedded digits demo, shipped as package data.
DEMO_CONFIG = Path(str(importlib.resources.files("retrieval.resources") / "digits_demo.yaml"))


@dataclass
class ModelConfig:
    backbone: str = "resnet50"  # any timm model name
    embedding_dim: int = 128  # size of the L2-normalized embedding
    pooling: str = "avgmax"  # timm's avg | max | token (class token); ours for CNNs: avgmax (avg + max) | gem
    pretrained: bool = True  # timm's ImageNet weights (needs network or timm's cache)
    weights: str | None = None  # local .safetensors/.pth backbone state dict, for offline use
    in_chans: int = 3  # input channels
    output_stride: int | None = None  # timm's: 8 | 16 dilate the last stages (bigger maps, small images); null: as is
    flip_average: bool = False  # eval: unit mean of the embeddings of an image and its mirror (symmetric objects)


@dataclass
class DataConfig:
    name: str = "csv"  # digits | csv | folder | cub200 | cars196 | sop | inshop
    path: str | None = None  # CSV file (data.name: csv): path,label,split[,is_query,is_gallery]
    root: str | None = None  # dataset folder (folder and the official layouts: retrieval/data/official.py)
    image_size: int = 224  # training crop / evaluation crop in pixels
    batch_size: int = 128  # images per optimizer step over all processes (random sampler; the PK sampler: p x k)
    eval_batch_size: int = 256  # images per step when embedding the test set
    sampler: str = "auto"  # auto (pk for pair losses, else random) | random | balanced (classes equally likely) | pk
    p: int = 32  # PK sampler: classes per optimizer step over all processes
    k: int = 4  # PK sampler: images per class
    num_workers: int = 4  # DataLoader worker processes (0 = load in the main process)
    val_classes: float = 0.0  # zero-shot validation: hold out whole training classes (a fraction < 1, or a count)
    val_fraction: float = 0.0  # closed-set validation: hold out this fraction of every training class's images
    on_bad_image: str = "fail"  # fail (stop, naming the file) | skip (leave it out, log it, count per epoch)
    # Keep DataLoader workers between epochs and evaluations (num_workers > 0): saves their start-up, but workers
    # keep their random state across epochs, so a resumed run's augmentations differ from an uninterrupted one's.
    persistent_workers: bool = False
    pin_memory: bool = True  # page-locked batches for faster copies to the GPU, training and evaluation (GPU only)


@dataclass
class AugmentConfig:
    """Training augmentation and evaluation resizing, built by `retrieval.data.transforms` (timm + torchvision).

    `preset` sets every knob at once (the table in `retrieval/augment_presets.py`); a knob given in
    the config file or with `--set augment.KEY=VALUE` overrides the preset's value. A knob left out
    comes from the preset; `null` is a value (no random crop, no auto-augment). `--set
    augment.preset=NAME` starts from that preset: only the augment keys also given with --set apply.
    The saved config holds every resolved value. Build one with `resolve_augment`.
    """

    preset: str  # natural | glyph | document | sketch | light (auto: natural for photo benchmarks, else light)
    crop_scale: tuple[float, float] | None  # RandomResizedCrop area range; null: no crop, train on the eval geometry
    crop_ratio: tuple[float, float]  # RandomResizedCrop aspect-ratio range (used only with crop_scale)
    hflip: float  # probability of a horizontal flip
    affine_degrees: float  # random rotation in [-degrees, degrees] (0: none)
    affine_translate: float  # random shift up to this fraction of the width and height (0: none)
    affine_scale: tuple[float, float]  # random zoom range (1,1: none)
    affine_shear: float  # random horizontal shear in [-degrees, degrees], e.g. italic vs upright (0: none)
    color_jitter: float  # brightness/contrast/saturation jitter strength (0: none; timm skips it with auto_augment)
    auto_augment: str | None  # timm policy, e.g. rand-m9-mstd0.5 (RandAugment) or original; null: none
    random_erasing: float  # probability of erasing a random rectangle after normalization (timm)
    eval_mode: str  # center_crop (resize to size/crop_pct, crop) | resize (whole image) | pad_square (letterbox)
    crop_pct: float  # center_crop: the crop's share of the resized image's side
    fill: str  # white | black | mean: background of affine borders and letterbox padding


@dataclass
class LossConfig:
    name: str = "anchor"  # proxy_nca | anchor | circle | triplet
    params: dict[str, Any] = field(default_factory=dict)  # the loss constructor's own arguments


@dataclass
class TrainConfig:
    epochs: int = 60  # full passes over the training set
    lr: float = 1e-4  # AdamW learning rate of the backbone and head
    proxy_lr_mult: float = 100.0  # proxies learn this much faster (Proxy-Anchor recipe)
    weight_decay: float = 1e-4  # AdamW weight decay (never applied to proxies)
    warmup_epochs: float = 1.0  # linear lr warm-up, then the schedule's decay
    schedule: str = "cosine"  # cosine (to zero at the last step) | step (x step_gamma every step_epochs epochs)
    step_epochs: int = 20  # step schedule: epochs between two decays
    step_gamma: float = 0.1  # step schedule: factor of each decay
    grad_clip: float | None = None  # clip the global gradient norm to this (None or 0: off)
    compile: bool = False  # torch.compile the training step (pays off on GPU for long runs; off: eager)
    freeze_backbone_epochs: int = 1  # train only head and proxies first (pretrained backbones)
    freeze_bn: bool = True  # keep BatchNorm statistics frozen (pretrained backbones, small batches)
    seed: int = 0  # seeds Python, NumPy, torch and the data order
    amp: str = "auto"  # none | bf16 | auto (bf16 on GPU, none on CPU)
    channels_last: bool = True  # NHWC memory format on GPU (ignored on CPU)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_every: int = 1  # validate every N epochs (and always after the last)
    select_on: str = "recall@1"  # recall@1 | map@r: the validation metric that picks checkpoints/best.pt
    select_on_test: bool = False  # no validation split: pick best.pt on the TEST set (optimistic; labelled so)
    log_test: bool = False  # also evaluate the test set every epoch (logged, never used for selection)
    threads: int | None = None  # CPU threads for torch (None: torch's default); results depend on it
    deterministic: bool = False  # torch's deterministic algorithms (slower; bit-exact reruns on one machine)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=lambda: resolve_augment({}, DataConfig.name))
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


_SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "augment": AugmentConfig,
    "loss": LossConfig,
    "train": TrainConfig,
}


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML config (the digits demo when `path` is None) and apply `a.b=value` overrides."""
    raw = _read_yaml(Path(path) if path is not None else DEMO_CONFIG)
    return config_from_dict(apply_overrides(raw, overrides))


def apply_overrides(raw: dict[str, Any], overrides: typing.Sequence[str]) -> dict[str, Any]:
    """Set each `section.key=value` in nested dicts `raw` (in place, returned); values are typed later.

    Overriding `loss.name` with another loss starts from that loss's defaults: the parameters the
    file gave the old loss are dropped, and only `loss.*` keys given on the command line apply.
    """
    parsed = [_parse_override(override) for override in overrides]
    new_loss = next((value for section, key, value in reversed(parsed) if (section, key) == ("loss", "name")), None)
    old_loss = (raw.get("loss") or {}).get("name", LossConfig.name) if isinstance(raw.get("loss"), dict) else None
    if new_loss is not None and new_loss != old_loss:
        raw["loss"] = {}
    for section, key, value in parsed:
        raw.setdefault(section, {})[key] = value
    return raw


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Build a `Config` from nested dicts, checking every key and type."""
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise UserError(f"unknown config section(s) {sorted(unknown)}; valid sections: {', '.join(_SECTIONS)}")
    model = _build_section("model", raw.get("model") or {})
    data = _build_section("data", raw.get("data") or {})
    augment = resolve_augment(raw.get("augment") or {}, data.name)
    train = _build_section("train", raw.get("train") or {})
    loss = _build_loss_section(raw.get("loss") or {})
    config = Config(model=model, data=data, augment=augment, loss=loss, train=train)
    _check_ranges(config)
    return config


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as plain nested dicts, loss parameters flattened into the loss section."""
    out = dataclasses.asdict(config)
    loss = out.pop("loss")
    out["loss"] = {"name": loss["name"], **loss["params"]}
    out["augment"] = {key: list(value) if isinstance(value, tuple) else value for key, value in out["augment"].items()}
    return {key: out[key] for key in _SECTIONS}


def save_config(config: Config, path: Path) -> None:
    """Write the resolved config as YAML (every default filled in)."""
    path.write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))


def _check_ranges(config: Config) -> None:
    """Reject values of the right type but outside their range, naming the key and what it accepts."""
    model, data, train = config.model, config.data, config.train
    rules: list[tuple[str, Any, bool, str]] = [
        ("model.embedding_dim", model.embedding_dim, model.embedding_dim >= 1, "an integer >= 1"),
        ("model.pooling", model.pooling, model.pooling in POOLINGS, f"one of {', '.join(POOLINGS)}"),
        ("model.in_chans", model.in_chans, model.in_chans >= 1, "an integer >= 1 (1 = grayscale, 3 = RGB)"),
        ("model.output_stride", model.output_stride, model.output_stride in _OUTPUT_STRIDES, "null, 8, 16 or 32"),
        ("data.image_size", data.image_size, data.image_size >= 8, "an integer >= 8 (pixels)"),
        ("data.batch_size", data.batch_size, data.batch_size >= 2, "an integer >= 2"),
        ("data.eval_batch_size", data.eval_batch_size, data.eval_batch_size >= 1, "an integer >= 1"),
        ("data.sampler", data.sampler, data.sampler in _SAMPLERS, f"one of {', '.join(_SAMPLERS)}"),
        ("data.p", data.p, data.p >= 2, "an integer >= 2 (classes per PK batch)"),
        ("data.k", data.k, data.k >= 2, "an integer >= 2 (images per class in a PK batch)"),
        ("data.num_workers", data.num_workers, data.num_workers >= 0, "an integer >= 0"),
        ("data.val_classes", data.val_classes, _is_count_or_fraction(data.val_classes), "0, a fraction < 1 or a count"),
        ("data.val_fraction", data.val_fraction, 0.0 <= data.val_fraction < 1.0, "a fraction in [0, 1)"),
        (
            "data.on_bad_image",
            data.on_bad_image,
            data.on_bad_image in BAD_IMAGE_POLICIES,
            " or ".join(BAD_IMAGE_POLICIES),
        ),
        ("train.epochs", train.epochs, train.epochs >= 1, "an integer >= 1"),
        ("train.lr", train.lr, math.isfinite(train.lr) and train.lr > 0, "a number > 0"),
        ("train.proxy_lr_mult", train.proxy_lr_mult, train.proxy_lr_mult > 0, "a number > 0"),
        ("train.weight_decay", train.weight_decay, train.weight_decay >= 0, "a number >= 0"),
        ("train.warmup_epochs", train.warmup_epochs, train.warmup_epochs >= 0, "a number >= 0"),
        ("train.schedule", train.schedule, train.schedule in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
        ("train.step_epochs", train.step_epochs, train.step_epochs >= 1, "an integer >= 1"),
        ("train.step_gamma", train.step_gamma, 0 < train.step_gamma <= 1, "a factor in (0, 1]"),
        ("train.grad_clip", train.grad_clip, train.grad_clip is None or train.grad_clip >= 0, "null, 0 (off) or > 0"),
        ("train.freeze_backbone_epochs", train.freeze_backbone_epochs, train.freeze_backbone_epochs >= 0, ">= 0"),
        ("train.seed", train.seed, train.seed >= 0, "an integer >= 0"),
        ("train.amp", train.amp, train.amp in _AMP, f"one of {', '.join(_AMP)}"),
        ("train.eval_every", train.eval_every, train.eval_every >= 1, "an integer >= 1"),
        ("train.select_on", train.select_on, train.select_on in SELECTION_METRICS, " or ".join(SELECTION_METRICS)),
        ("train.threads", train.threads, train.threads is None or train.threads >= 1, "null or an integer >= 1"),
    ]
    for key, value, ok, expected in rules:
        if not ok:
            raise UserError(f"{key} must be {expected}, got {value!r}; fix it in the config or with --set {key}=...")
    if data.name in ROOT_DATASETS and not data.root:
        raise UserError(
            f"data.name {data.name} reads a dataset folder but data.root is not set; "
            "use --set data.root=/path/to/the/extracted/dataset"
        )
    if data.val_classes and data.val_fraction:
        raise UserError(
            "data.val_classes and data.val_fraction are both set; hold out whole classes (zero-shot data) "
            "or images of every class (closed-set data), not both"
        )


_SAMPLERS = ("auto", "random", "balanced", "pk")
# What an unreadable image does (retrieval.data.loader).
BAD_IMAGE_POLICIES = ("fail", "skip")
# Datasets read from `data.root` (retrieval.data.folder, retrieval.data.official).
ROOT_DATASETS = ("folder", "cub200", "cars196", "sop", "inshop")
_AMP = ("none", "bf16", "auto")
_OUTPUT_STRIDES = (None, 8, 16, 32)  # what timm's dilated CNNs accept
SCHEDULES = ("cosine", "step")  # retrieval.train.schedule implements them
SELECTION_METRICS = ("recall@1", "map@r")


def _is_count_or_fraction(value: float) -> bool:
    return value == 0 or 0 < value < 1 or (value >= 1 and float(value).is_integer())


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"config file not found: {path}; pass an existing YAML file with --config")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"config file {path} must hold a mapping of sections ({', '.join(_SECTIONS)})")
    return raw


def _parse_override(override: str) -> tuple[str, str, Any]:
    """`data.batch_size=64` -> ("data", "batch_size", "64"); the string is typed later by the field."""
    key, sep, value = override.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not name:
        raise UserError(f"--set expects section.key=value (e.g. train.lr=3e-4), got {override!r}")
    return section, name, _OverrideString(value.strip())


class _OverrideString(str):
    """A command-line value: typed by the field it sets, not by YAML's rules."""


def _build_section(name: str, values: dict[str, Any]) -> Any:
    cls = _SECTIONS[name]
    if not isinstance(values, dict):
        raise UserError(f"config section {name!r} must be a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in hints:
            raise UserError(f"unknown config key {name}.{key}; valid keys in {name}: {', '.join(valid)}")
        kwargs[key] = _coerce(f"{name}.{key}", value, hints[key])
    return cls(**kwargs)


def _build_loss_section(values: dict[str, Any]) -> LossConfig:
    if not isinstance(values, dict):
        raise UserError("config section 'loss' must be a mapping: name plus the loss's own parameters")
    name = str(values.get("name", LossConfig.name))
    defaults = loss_parameters(name)  # raises for an unknown name, listing the valid ones
    params = dict(defaults)
    for key, value in values.items():
        if key == "name":
            continue
        if key not in defaults:
            valid = ", ".join(sorted(defaults)) or "none"
            raise UserError(f"unknown config key loss.{key} for loss {name!r}; valid parameters: {valid}")
        params[key] = _coerce(f"loss.{key}", value, type(defaults[key]) if defaults[key] is not None else Any)
    return LossConfig(name=name, params=params)


def resolve_augment(values: dict[str, Any], data_name: str) -> AugmentConfig:
    """The augment section `values` (file keys and `--set` strings) resolved against its preset.

    `preset: auto` (or no preset) picks `natural` for the natural-photo benchmarks and `light` for
    every other `data_name`. Every knob not in `values` takes the preset's value.

    Raises:
        UserError: unknown preset or key, a value of the wrong type or out of its range.
    """
    if not isinstance(values, dict):
        raise UserError("config section 'augment' must be a mapping of keys to values (e.g. preset: glyph)")
    requested = str(values.get("preset", AUTO_PRESET))
    preset = preset_for_dataset(data_name) if requested == AUTO_PRESET else requested
    if preset not in PRESETS:
        raise UserError(f"unknown augment.preset {requested!r}; valid presets: {AUTO_PRESET}, {', '.join(PRESETS)}")
    knobs = {key: value for key, value in values.items() if key != "preset"}
    if isinstance(values.get("preset"), _OverrideString):
        # A preset chosen on the command line replaces the file's augment section, knobs included.
        knobs = {key: value for key, value in knobs.items() if isinstance(value, _OverrideString)}
    hints = typing.get_type_hints(AugmentConfig)
    for key in knobs:
        if key not in hints:
            valid = ", ".join(f.name for f in dataclasses.fields(AugmentConfig))
            raise UserError(f"unknown config key augment.{key}; valid keys in augment: {valid}")
    merged = {**PRESETS[preset], **knobs}
    augment = AugmentConfig(
        preset=preset, **{key: _coerce(f"augment.{key}", value, hints[key]) for key, value in merged.items()}
    )
    _check_augment(augment)
    return augment


def _check_augment(augment: AugmentConfig) -> None:
    """Reject knob values of the right type but outside their range, naming the key and what it accepts."""
    rules: list[tuple[str, Any, bool, str]] = [
        (
            "crop_scale",
            augment.crop_scale,
            augment.crop_scale is None or _ordered(augment.crop_scale, upper=1.0),
            "null or two area fractions 0 < low <= high <= 1, e.g. 0.08,1.0",
        ),
        ("crop_ratio", augment.crop_ratio, _ordered(augment.crop_ratio), "two aspect ratios 0 < low <= high"),
        ("hflip", augment.hflip, 0.0 <= augment.hflip <= 1.0, "a probability in [0, 1]"),
        ("affine_degrees", augment.affine_degrees, 0.0 <= augment.affine_degrees <= 180.0, "degrees in [0, 180]"),
        ("affine_translate", augment.affine_translate, 0.0 <= augment.affine_translate <= 1.0, "a fraction in [0, 1]"),
        ("affine_scale", augment.affine_scale, _ordered(augment.affine_scale), "two zoom factors 0 < low <= high"),
        ("affine_shear", augment.affine_shear, 0.0 <= augment.affine_shear < 90.0, "degrees in [0, 90)"),
        ("color_jitter", augment.color_jitter, augment.color_jitter >= 0.0, "a strength >= 0"),
        ("random_erasing", augment.random_erasing, 0.0 <= augment.random_erasing <= 1.0, "a probability in [0, 1]"),
        ("eval_mode", augment.eval_mode, augment.eval_mode in EVAL_MODES, f"one of {', '.join(EVAL_MODES)}"),
        ("crop_pct", augment.crop_pct, 0.0 < augment.crop_pct <= 1.0, "a fraction in (0, 1]"),
        ("fill", augment.fill, augment.fill in FILLS, f"one of {', '.join(FILLS)}"),
    ]
    for key, value, ok, expected in rules:
        if not ok:
            raise UserError(f"augment.{key} must be {expected}, got {value!r}; fix it in the config or with --set")
    if augment.auto_augment is not None:
        _check_auto_augment(augment.auto_augment)


def _ordered(pair: tuple[float, float], upper: float = math.inf) -> bool:
    return 0.0 < pair[0] <= pair[1] <= upper


def _check_auto_augment(policy: str) -> None:
    """Let timm parse the policy string now, so a typo fails before any data is read."""
    from timm.data import create_transform  # slow to import; only needed here

    try:
        create_transform(32, is_training=True, auto_augment=policy)
    except (AssertionError, KeyError, ValueError, IndexError) as exc:
        raise UserError(
            f"augment.auto_augment {policy!r} is not a timm policy ({exc.__class__.__name__}: {exc}); "
            "use e.g. rand-m9-mstd0.5 (RandAugment), augmix-m5-w3, original, or null"
        ) from exc


def _coerce(where: str, value: Any, annotation: Any) -> Any:
    """Return `value` as type `annotation` (int, float, bool, str, or `X | None`), else raise UserError."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    if isinstance(value, _OverrideString) and value.lower() in ("null", "none", "~") and type(None) in options:
        return None
    if value is None and type(None) in options:
        return None
    for option in options:
        if option is Any:
            return yaml.safe_load(value) if isinstance(value, _OverrideString) else value
        converted = _convert(value, option)
        if converted is not _FAIL:
            return converted
    names = " or ".join(_type_name(option) for option in options)
    raise UserError(f"{where} must be {names}, got {value!r}")


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is tuple:
        return "a pair of numbers (e.g. 0.5,1.0)"
    return getattr(annotation, "__name__", str(annotation))


_FAIL = object()
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _convert(value: Any, target: Any) -> Any:
    if typing.get_origin(target) is tuple:
        return _convert_pair(value, typing.get_args(target))
    if target is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
        return _FAIL
    if target in (int, float):
        if isinstance(value, bool):
            return _FAIL
        if isinstance(value, int) or (target is float and isinstance(value, float)):
            return target(value)
        if isinstance(value, str):
            try:
                return target(value)
            except ValueError:
                return _FAIL
        return _FAIL
    if target is str:
        return str(value) if isinstance(value, str) else _FAIL
    return value if isinstance(value, target) else _FAIL


def _convert_pair(value: Any, targets: tuple[Any, ...]) -> Any:
    """A YAML list `[0.5, 1.0]` or a --set string `0.5,1.0` (brackets optional) as a tuple of `targets`."""
    if isinstance(value, str):
        value = [part.strip() for part in value.strip().strip("[]()").split(",")]
    if not isinstance(value, (list, tuple)) or len(value) != len(targets):
        return _FAIL
    items = tuple(_convert(item, target) for item, target in zip(value, targets, strict=True))
    return _FAIL if any(item is _FAIL for item in items) else items
