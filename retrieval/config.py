"""Run configuration: dataclasses loaded from YAML (safe_load), with `--set a.b=value` overrides.

Each field carries its default, a comment and what it accepts: a `Literal[...]` type lists its
choices, `field(metadata=...)` holds its range rule. A section checks its fields when it is built,
from a file, the command line or Python; the few rules that tie two fields together live in
`_check_across_fields`. Unknown keys, wrong types and values out of range are one-line errors that
say what is accepted: a typo is never silently dropped.

Defaults follow the published recipe for the standard benchmarks (design.md): a pretrained
ResNet-50, 224 px, AdamW at 1e-4 with 100x on proxies, batch 128, 60 epochs. The digits demo
(`retrieval/resources/digits_demo.yaml`) overrides what a from-scratch CPU run needs.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from retrieval.augment_presets import AUTO_PRESET, PRESETS, EvalMode, Fill, PresetName
from retrieval.errors import UserError
from retrieval.runtime.files import write_text

__all__ = [
    "BAD_IMAGE_POLICIES",
    "DEMO_CONFIG",
    "SCHEDULES",
    "SELECTION_METRICS",
    "TRACKERS",
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

_RULE = "rule"  # the `field(metadata=...)` key of a field's range rule
_WORDING = "wording"  # the `field(metadata=...)` key of how errors word a Literal field's choices


@dataclass(frozen=True)
class _Rule:
    """A range rule: `test(value)` holds for the values a field accepts; `expected` completes "KEY must be ..."."""

    test: Callable[[Any], bool]
    expected: str


def _accepts(test: Callable[[Any], bool], expected: str) -> dict[str, _Rule]:
    """Field metadata: the field accepts the values that pass `test`, which `expected` describes."""
    return {_RULE: _Rule(test, expected)}


def _at_least(low: int, note: str = "") -> dict[str, _Rule]:
    """Field metadata for an integer >= `low`; `note` says what the number means."""
    return _accepts(lambda value: value >= low, f"an integer >= {low}" + (f" ({note})" if note else ""))


def _worded(text: str) -> dict[str, str]:
    """Field metadata for a `Literal` field whose choices read better as `text` than as "one of a, b"."""
    return {_WORDING: text}


def _ordered(upper: float = math.inf) -> Callable[[Any], bool]:
    """A test for a pair `(low, high)` with 0 < low <= high <= upper."""
    return lambda pair: 0.0 < pair[0] <= pair[1] <= upper


def _is_count_or_fraction(value: float | None) -> bool:
    return value is None or value == 0 or 0 < value < 1 or (value >= 1 and float(value).is_integer())


TRACKERS = ("tensorboard", "mlflow")  # the values of train.loggers (retrieval.train.trackers)

_POSITIVE = _accepts(lambda value: math.isfinite(value) and value > 0, "a number > 0")
_NON_NEGATIVE = _accepts(lambda value: value >= 0, "a number >= 0")
_PROBABILITY = _accepts(lambda value: 0.0 <= value <= 1.0, "a probability in [0, 1]")


class _Section:
    """Base of the config sections: building one checks each field against its choices and its range rule."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    section: ClassVar[str]  # the YAML section name, the KEY prefix in error messages

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for item in dataclasses.fields(self):
            _check_field(f"{self.section}.{item.name}", getattr(self, item.name), hints[item.name], item.metadata)


@dataclass
class ModelConfig(_Section):
    section: ClassVar[str] = "model"

    backbone: str = "resnet50"  # any timm model name
    # size of the L2-normalized embedding; null: the backbone's pooled features, no head (a baseline without training)
    embedding_dim: int | None = field(
        default=128, metadata=_accepts(lambda value: value is None or value >= 1, "null or an integer >= 1")
    )
    # timm's avg | max | token (class token); ours for CNNs: avgmax (avg + max) | gem (retrieval.models.pooling)
    pooling: Literal["avg", "max", "token", "avgmax", "gem"] = "avgmax"
    pretrained: bool = True  # timm's ImageNet weights (needs network or timm's cache)
    weights: str | None = None  # local .safetensors/.pth backbone state dict, for offline use; every tensor must fit
    weights_partial: bool = False  # load the tensors of model.weights that fit, the rest as initialized (one line)
    in_chans: int = field(default=3, metadata=_at_least(1, "1 = grayscale, 3 = RGB"))  # input channels
    # timm's dilated CNNs: 8 | 16 dilate the last stages (bigger maps, small images); null: as is
    output_stride: Literal[8, 16, 32] | None = field(default=None, metadata=_worded("null, 8, 16 or 32"))
    flip_average: bool = False  # eval: unit mean of the embeddings of an image and its mirror (symmetric objects)


@dataclass
class DataConfig(_Section):
    section: ClassVar[str] = "data"

    name: str = "csv"  # a dataset of the registry, retrieval/data/registry.py (e.g. csv, folder, digits, cub200)
    path: str | None = None  # CSV file (data.name: csv): path,label,split[,is_query,is_gallery]
    root: str | None = None  # dataset folder (folder and the official layouts: retrieval/data/official.py)
    image_size: int = field(default=224, metadata=_at_least(8, "pixels"))  # training crop / evaluation crop
    # images per optimizer step over all processes (random sampler; the PK sampler: p x k)
    batch_size: int = field(default=128, metadata=_at_least(2))
    eval_batch_size: int = field(default=256, metadata=_at_least(1))  # images per step when embedding the test set
    # auto (pk for pair losses, else random) | random | balanced (classes equally likely) | pk
    sampler: Literal["auto", "random", "balanced", "pk"] = "auto"
    p: int = field(default=32, metadata=_at_least(2, "classes per PK batch"))  # PK: classes per step over all processes
    k: int = field(default=4, metadata=_at_least(2, "images per class in a PK batch"))  # PK sampler: images per class
    num_workers: int = field(default=4, metadata=_at_least(0))  # DataLoader worker processes (0: the main process)
    # zero-shot validation: hold out whole training classes (a fraction < 1, or a count; 0 or null: none)
    val_classes: float | None = field(
        default=0.0, metadata=_accepts(_is_count_or_fraction, "0, a fraction < 1 or a count")
    )
    # closed-set validation: hold out this fraction of every training class's images (0 or null: none)
    val_fraction: float | None = field(
        default=0.0, metadata=_accepts(lambda value: value is None or 0.0 <= value < 1.0, "a fraction in [0, 1)")
    )
    on_bad_image: Literal["fail", "skip"] = "fail"  # fail (stop, naming the file) | skip (leave it out, log, count)
    # Keep DataLoader workers between epochs and evaluations (num_workers > 0): saves their start-up, but workers
    # keep their random state across epochs, so a resumed run's augmentations differ from an uninterrupted one's.
    persistent_workers: bool = False
    pin_memory: bool = True  # page-locked batches for faster copies to the GPU, training and evaluation (GPU only)


@dataclass
class AugmentConfig(_Section):
    """Training augmentation and evaluation resizing, built by `retrieval.data.transforms` (timm + torchvision).

    `preset` sets every knob at once (the table in `retrieval/augment_presets.py`); a knob given in
    the config file or with `--set augment.KEY=VALUE` overrides the preset's value. A knob left out
    comes from the preset; `null` is a value (no random crop, no auto-augment). `--set
    augment.preset=NAME` starts from that preset: only the augment keys also given with --set apply.
    The saved config holds every resolved value. Build one with `resolve_augment`.
    """

    section: ClassVar[str] = "augment"

    # natural | glyph | artwork | document | sketch | light (auto: the dataset's, retrieval.data.registry)
    preset: PresetName
    # RandomResizedCrop area range; null: no crop, train on the eval geometry
    crop_scale: tuple[float, float] | None = field(
        metadata=_accepts(
            lambda pair: pair is None or _ordered(upper=1.0)(pair),
            "null or two area fractions 0 < low <= high <= 1, e.g. 0.08,1.0",
        )
    )
    # RandomResizedCrop aspect-ratio range (used only with crop_scale)
    crop_ratio: tuple[float, float] = field(metadata=_accepts(_ordered(), "two aspect ratios 0 < low <= high"))
    hflip: float = field(metadata=_PROBABILITY)  # probability of a horizontal flip
    # random rotation in [-degrees, degrees] (0: none)
    affine_degrees: float = field(metadata=_accepts(lambda value: 0.0 <= value <= 180.0, "degrees in [0, 180]"))
    # random shift up to this fraction of the width and height (0: none)
    affine_translate: float = field(metadata=_accepts(lambda value: 0.0 <= value <= 1.0, "a fraction in [0, 1]"))
    # random zoom range (1,1: none)
    affine_scale: tuple[float, float] = field(metadata=_accepts(_ordered(), "two zoom factors 0 < low <= high"))
    # random horizontal shear in [-degrees, degrees], e.g. italic vs upright (0: none)
    affine_shear: float = field(metadata=_accepts(lambda value: 0.0 <= value < 90.0, "degrees in [0, 90)"))
    # brightness/contrast/saturation jitter strength (0: none; timm skips it with auto_augment)
    color_jitter: float = field(metadata=_accepts(lambda value: value >= 0.0, "a strength >= 0"))
    # timm policy, e.g. rand-m9-mstd0.5 (RandAugment) or original; null: none (timm parses it: _check_auto_augment)
    auto_augment: str | None
    # hue shift strength added to color_jitter, in [0, 0.5] (0: none; applied only with color_jitter)
    hue_jitter: float = field(metadata=_accepts(lambda value: 0.0 <= value <= 0.5, "a hue shift in [0, 0.5]"))
    grayscale: float = field(metadata=_PROBABILITY)  # probability of turning the image gray (RGB models)
    blur: float = field(metadata=_PROBABILITY)  # probability of a Gaussian blur (sigma 0.1-2 px)
    random_erasing: float = field(metadata=_PROBABILITY)  # probability of erasing a rectangle after normalization
    eval_mode: EvalMode  # center_crop (resize to size/crop_pct, crop) | resize (whole image) | pad_square (letterbox)
    # center_crop: the crop's share of the resized image's side
    crop_pct: float = field(metadata=_accepts(lambda value: 0.0 < value <= 1.0, "a fraction in (0, 1]"))
    fill: Fill  # auto (each image's border colour) | white | black | mean: affine borders and letterbox padding

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.auto_augment is not None:
            _check_auto_augment(self.auto_augment)


@dataclass
class LossConfig(_Section):
    section: ClassVar[str] = "loss"

    # a loss of the registry, retrieval/losses/registry.py (LOSSES), e.g. anchor, proxy_nca; or any
    # pytorch-metric-learning loss as pml.<ClassName> (its arguments in loss.kwargs, a PML miner in loss.miner)
    name: str = "anchor"
    params: dict[str, Any] = field(default_factory=dict)  # the loss constructor's own arguments


@dataclass
class TrainConfig(_Section):
    section: ClassVar[str] = "train"

    epochs: int = field(default=60, metadata=_at_least(1))  # full passes over the training set
    lr: float = field(default=1e-4, metadata=_POSITIVE)  # AdamW learning rate of the backbone and head
    proxy_lr_mult: float = field(default=100.0, metadata=_POSITIVE)  # proxies learn this much faster (Proxy-Anchor)
    weight_decay: float = field(default=1e-4, metadata=_NON_NEGATIVE)  # AdamW weight decay (never on proxies)
    warmup_epochs: float = field(default=1.0, metadata=_NON_NEGATIVE)  # linear lr warm-up, then the schedule's decay
    schedule: Literal["cosine", "step", "constant"] = (
        "cosine"  # cosine (to zero at the last step) | step (x step_gamma, step_epochs) | constant (after warm-up)
    )
    step_epochs: int = field(default=20, metadata=_at_least(1))  # step schedule: epochs between two decays
    # step schedule: factor of each decay
    step_gamma: float = field(default=0.1, metadata=_accepts(lambda value: 0 < value <= 1, "a factor in (0, 1]"))
    # clip the global gradient norm to this (null or 0: off)
    grad_clip: float | None = field(
        default=None, metadata=_accepts(lambda value: value is None or value >= 0, "null, 0 (off) or > 0")
    )
    compile: bool = False  # torch.compile the training step (pays off on GPU for long runs; off: eager)
    freeze_backbone_epochs: int = field(default=1, metadata=_at_least(0))  # train only head and proxies first
    freeze_bn: bool = True  # keep BatchNorm statistics frozen (pretrained backbones, small batches)
    seed: int = field(default=0, metadata=_at_least(0))  # seeds Python, NumPy, torch and the data order
    # none | bf16 | fp16 (float16 with loss scaling, GPUs without bf16) | auto (bf16 on GPU, none on CPU)
    amp: Literal["none", "bf16", "fp16", "auto"] = "auto"
    channels_last: bool = True  # NHWC memory format on GPU (ignored on CPU)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_every: int = field(default=1, metadata=_at_least(1))  # validate every N epochs (and always after the last)
    # the validation metric that picks checkpoints/best.pt
    select_on: Literal["recall@1", "map@r"] = field(default="recall@1", metadata=_worded("recall@1 or map@r"))
    select_on_test: bool = False  # no validation split: pick best.pt on the TEST set (optimistic; labelled so)
    log_test: bool = False  # also evaluate the test set every epoch (logged, never used for selection)
    # CPU threads for torch (null: torch's default); results depend on it
    threads: int | None = field(
        default=None, metadata=_accepts(lambda value: value is None or value >= 1, "null or an integer >= 1")
    )
    deterministic: bool = False  # torch's deterministic algorithms (slower; bit-exact reruns on one machine)
    # micro-batches per optimizer step (and per lr-schedule and EMA step): data.batch_size x N images a step
    accumulate_steps: int = field(default=1, metadata=_at_least(1, "micro-batches per optimizer step"))
    # decay of an exponential moving average of the weights (timm's ModelEmaV3), selected against the raw weights
    ema: float | None = field(
        default=None, metadata=_accepts(lambda value: value is None or 0.0 < value < 1.0, "null (off) or in (0, 1)")
    )
    # experiment trackers every metrics.jsonl record is mirrored to (pip install 'retrieval[trackers]')
    loggers: list[str] = field(
        default_factory=list,
        metadata=_accepts(
            lambda names: all(name in TRACKERS for name in names), f"a list of {' and '.join(TRACKERS)}, or []"
        ),
    )


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=lambda: resolve_augment({}, DataConfig.name))
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


_SECTIONS: dict[str, type[_Section]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "augment": AugmentConfig,
    "loss": LossConfig,
    "train": TrainConfig,
}


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read a YAML config (the digits demo when `path` is None) and apply `a.b=value` overrides."""
    raw = _read_yaml(Path(path) if path is not None else DEMO_CONFIG)
    return config_from_dict(apply_overrides(raw, overrides))


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Set each `section.key=value` in nested dicts `raw` (in place, returned); values are typed later.

    A value is read as YAML (`null`, `[0.2, 0.9]`, `8`) by the field it sets, so any value of a file
    can be replaced or switched off. Overriding `loss.name` with another loss starts from that loss's
    defaults: the parameters the file gave the old loss are dropped, and only `loss.*` keys given on
    the command line apply.
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
    """Build a `Config` from nested dicts, checking every key, type and range."""
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise UserError(f"unknown config section(s) {sorted(unknown)}; valid sections: {', '.join(_SECTIONS)}")
    model = _build_section("model", raw.get("model") or {})
    data = _build_section("data", raw.get("data") or {})
    augment = resolve_augment(raw.get("augment") or {}, data.name)
    train = _build_section("train", raw.get("train") or {})
    loss = _build_loss_section(raw.get("loss") or {})
    config = Config(model=model, data=data, augment=augment, loss=loss, train=train)
    _check_across_fields(config)
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
    write_text(path, yaml.safe_dump(config_to_dict(config), sort_keys=False))


def resolve_augment(values: dict[str, Any], data_name: str) -> AugmentConfig:
    """The augment section `values` (file keys and `--set` strings) resolved against its preset.

    `preset: auto` (or no preset) picks the preset that dataset `data_name` names in the registry
    (`natural` for the photo benchmarks, `light` for the rest). Every knob not in `values` takes the
    preset's value.

    Raises:
        UserError: unknown preset, key or dataset, a value of the wrong type or out of its range.
    """
    if not isinstance(values, dict):
        raise UserError("config section 'augment' must be a mapping of keys to values (e.g. preset: glyph)")
    requested = str(values.get("preset", AUTO_PRESET))
    preset = _dataset_spec(data_name).augment_preset if requested == AUTO_PRESET else requested
    if preset not in PRESETS:
        raise UserError(f"unknown augment.preset {requested!r}; valid presets: {AUTO_PRESET}, {', '.join(PRESETS)}")
    knobs = {key: value for key, value in values.items() if key != "preset"}
    if isinstance(values.get("preset"), _OverrideString):
        # A preset chosen on the command line replaces the file's augment section, knobs included.
        knobs = {key: value for key, value in knobs.items() if isinstance(value, _OverrideString)}
    hints = typing.get_type_hints(AugmentConfig)
    valid = [item.name for item in dataclasses.fields(AugmentConfig)]
    for key in knobs:
        if key not in valid:
            raise UserError(f"unknown config key augment.{key}; valid keys in augment: {', '.join(valid)}")
    merged = {**PRESETS[preset], **knobs}
    resolved = {key: _coerce(f"augment.{key}", value, hints[key]) for key, value in merged.items()}
    return AugmentConfig(**{"preset": preset, **resolved})


def _check_across_fields(config: Config) -> None:
    """The rules that tie fields together; each field's own choices and range are checked on the field."""
    data = config.data
    if _dataset_spec(data.name).reads_root and not data.root:
        raise UserError(
            f"data.name {data.name} reads a dataset folder but data.root is not set; "
            "use --set data.root=/path/to/the/extracted/dataset"
        )
    memory_size = config.loss.params.get("memory_size") or 0
    if 0 < memory_size < data.p * data.k:
        raise UserError(
            f"loss.memory_size={memory_size} is smaller than one batch (data.p x data.k = {data.p * data.k}); "
            "the memory must hold at least the batch: raise loss.memory_size or set it to 0 (no memory)"
        )
    if data.val_classes and data.val_fraction:
        raise UserError(
            "data.val_classes and data.val_fraction are both set; hold out whole classes (zero-shot data) "
            "or images of every class (closed-set data), not both"
        )


def _dataset_spec(name: str) -> Any:
    """The registered dataset `name` (`retrieval.data.registry.DatasetSpec`); an unknown name is a UserError.

    Imported here, not at the top: `retrieval.data` imports this module.
    """
    from retrieval.data.registry import dataset_spec

    return dataset_spec(name)


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


def _parse_override(override: str) -> tuple[str, str, _OverrideString]:
    """`data.batch_size=64` -> ("data", "batch_size", "64"); the text is typed later by the field it sets."""
    key, sep, value = override.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not name:
        raise UserError(f"--set expects section.key=value (e.g. train.lr=3e-4), got {override!r}")
    return section, name, _OverrideString(value.strip())


class _OverrideString(str):
    """A command-line value: read as YAML, then typed by the field it sets (`_coerce`)."""


def _build_section(name: str, values: dict[str, Any]) -> Any:
    cls = _SECTIONS[name]
    if not isinstance(values, dict):
        raise UserError(f"config section {name!r} must be a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    valid = [item.name for item in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in valid:
            raise UserError(f"unknown config key {name}.{key}; valid keys in {name}: {', '.join(valid)}")
        kwargs[key] = _coerce(f"{name}.{key}", value, hints[key])
    return cls(**kwargs)


def _build_loss_section(values: dict[str, Any]) -> LossConfig:
    """The loss section: `name` plus the loss's parameters, or for `pml.<ClassName>` a `kwargs` mapping and a `miner`.

    `--set loss.kwargs.KEY=VALUE` sets one entry of the `kwargs` mapping (so `sweep --grid` can vary it).
    """
    from retrieval.losses.registry import (  # imports torch; only needed here
        canonical_loss_name,
        check_loss_parameters,
        loss_parameters,
    )

    if not isinstance(values, dict):
        raise UserError("config section 'loss' must be a mapping: name plus the loss's own parameters")
    name = canonical_loss_name(str(values.get("name", LossConfig.name)))
    defaults = loss_parameters(name)  # raises for an unknown name, listing the valid ones
    params = dict(defaults)
    entries = {key: value for key, value in values.items() if key.startswith("kwargs.") and "kwargs" in defaults}
    for key, value in values.items():
        if key == "name" or key in entries:
            continue
        if key not in defaults:
            valid = ", ".join(sorted(defaults)) or "none"
            raise UserError(f"unknown config key loss.{key} for loss {name!r}; valid parameters: {valid}")
        params[key] = _coerce(f"loss.{key}", value, type(defaults[key]) if defaults[key] is not None else Any)
    if entries:
        kwargs = params["kwargs"] if isinstance(params["kwargs"], dict) else {}
        typed = {key: _yaml_value(v) if isinstance(v, _OverrideString) else v for key, v in entries.items()}
        params["kwargs"] = {**kwargs, **{key.removeprefix("kwargs."): value for key, value in typed.items()}}
    check_loss_parameters(name, params)
    return LossConfig(name=name, params=params)


def _check_field(key: str, value: Any, annotation: Any, metadata: Mapping[str, Any]) -> None:
    """Raise UserError when `value` is not one of the field's `Literal` choices or fails its range rule."""
    choices = _choices(annotation)
    if choices and not any(value == choice and type(value) is type(choice) for choice in choices):
        raise _bad_value(key, metadata.get(_WORDING) or _choices_text(choices), value)
    rule = metadata.get(_RULE)
    if rule is not None and not _passes(rule, value):
        raise _bad_value(key, rule.expected, value)


def _passes(rule: _Rule, value: Any) -> bool:
    try:
        return bool(rule.test(value))
    except TypeError:  # a value of the wrong type, from Python code that skipped the loader
        return False


def _bad_value(key: str, expected: str, value: Any) -> UserError:
    """The one error for a bad value: what the key accepts, what it got and where to fix it."""
    return UserError(f"{key} must be {expected}, got {value!r}; fix it in the config or with --set {key}=...")


def _choices(annotation: Any) -> tuple[Any, ...]:
    """The values a `Literal[...]` field accepts (None too for `Literal[...] | None`); () for other types."""
    members = _union_members(annotation)
    if not any(typing.get_origin(member) is Literal for member in members):
        return ()
    return tuple(choice for member in members for choice in typing.get_args(member) or (None,))


def _choices_text(choices: tuple[Any, ...]) -> str:
    return "one of " + ", ".join("null" if choice is None else str(choice) for choice in choices)


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """`X | Y` -> (X, Y); any other annotation -> (annotation,)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """`value` as the field type `annotation` (bool, int, float, str, a pair, a Literal's choices, or `X | None`).

    A command-line value is read as YAML first (`null`, `[0.2, 0.9]`, `8`); when YAML's reading does not fit
    the field, its text is tried (`3e-4` as a float, `123` as a string, `1` as a bool).

    Raises:
        UserError: the value fits no member of `annotation`; null where null is not accepted.
    """
    members = _union_members(annotation)
    candidates = [_yaml_value(value), str(value)] if isinstance(value, _OverrideString) else [value]
    if candidates[0] is None:
        if type(None) in members or Any in members or _choices(annotation):
            return None  # a Literal field rejects it when its section is built, in the field's wording
        raise _bad_value(key, _expected(annotation), value)
    for candidate in candidates:
        for member in members:
            converted = _convert(candidate, member)
            if converted is not _FAIL:
                return converted
    raise _bad_value(key, _expected(annotation), value)


def _yaml_value(text: str) -> Any:
    """A command-line value as YAML reads it; text YAML cannot parse stays text."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return str(text)


def _expected(annotation: Any) -> str:
    """What a field of type `annotation` accepts, for an error message."""
    choices = _choices(annotation)
    if choices:
        return _choices_text(choices)
    return " or ".join(_type_name(member) for member in _union_members(annotation))


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is tuple:
        return "a pair of numbers (e.g. 0.5,1.0)"
    if typing.get_origin(annotation) is list:
        return "a list (e.g. [a, b])"
    return getattr(annotation, "__name__", str(annotation))


_FAIL = object()
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _convert(value: Any, target: Any) -> Any:
    """`value` as type `target`, or `_FAIL`; numbers also from their text (`3e-4`), which YAML 1.1 leaves a string."""
    if typing.get_origin(target) is Literal:  # the choice is checked when the section is built
        return value if isinstance(value, (str, int, float)) else _FAIL
    if typing.get_origin(target) is tuple:
        return _convert_pair(value, typing.get_args(target))
    if typing.get_origin(target) is list:
        return _convert_list(value, typing.get_args(target)[0])
    if target is Any:
        return value
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


def _convert_list(value: Any, target: Any) -> Any:
    """A YAML list `[a, b]` or a --set string `a,b` (brackets optional; `[]` is empty) as a list of `target`."""
    if isinstance(value, str):
        value = [part.strip() for part in value.strip().strip("[]").split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        return _FAIL
    items = [_convert(item, target) for item in value]
    return _FAIL if any(item is _FAIL for item in items) else items


# Choice lists that other modules check against, read off the fields that own them.
BAD_IMAGE_POLICIES: tuple[str, ...] = _choices(
    typing.get_type_hints(DataConfig)["on_bad_image"]
)  # retrieval.data.loader
SCHEDULES: tuple[str, ...] = _choices(typing.get_type_hints(TrainConfig)["schedule"])  # retrieval.train.schedule
SELECTION_METRICS: tuple[str, ...] = _choices(typing.get_type_hints(TrainConfig)["select_on"])  # train.settings
