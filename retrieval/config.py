"""Run configuration: pydantic models loaded from YAML (safe_load), with `--set a.b=value` overrides.

Each field carries its default, a comment and what it accepts: a `Literal[...]` type lists its
choices, an `accepts(...)` rule in its `Annotated[...]` type holds its range. A section checks its
fields when it is built, from a file, the command line or Python; the few rules that tie two fields
together live in `_check_across_fields`. Unknown keys, wrong types and values out of range are
one-line `UserError`s that say what is accepted (`retrieval.validation.user_error` words them): a
typo is never silently dropped, and an unknown key names its nearest valid key.

Defaults follow the published recipe for the standard benchmarks (docs/benchmarks.md): a pretrained
ResNet-50, 224 px, AdamW at 1e-4 with 100x on proxies, batch 128, 60 epochs. The digits demo
(`retrieval/resources/digits_demo.yaml`) overrides what a from-scratch CPU run needs.
"""

from __future__ import annotations

import importlib.resources
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
)

from retrieval.choices.augment_presets import AUTO_PRESET, PRESETS, EvalMode, Fill, PresetName
from retrieval.choices.datasets import dataset_spec
from retrieval.choices.losses import check_loss_name
from retrieval.choices.pretrain_methods import PRETRAIN_METHODS
from retrieval.choices.trackers import TRACKERS
from retrieval.core.rerank import stored_augmentation
from retrieval.errors import UserError
from retrieval.runtime.files import write_text
from retrieval.validation import (
    Record,
    Worded,
    accepts,
    at_least,
    choices,
    registered,
    split_text,
    unknown_key,
    user_error,
)

__all__ = [
    "AUDIT_CHECKS",
    "BAD_IMAGE_POLICIES",
    "DEMO_CONFIG",
    "SCHEDULES",
    "AuditConfig",
    "AugmentConfig",
    "Config",
    "ConfigDocument",
    "DataConfig",
    "LossConfig",
    "ModelConfig",
    "PretrainConfig",
    "RerankerConfig",
    "TrainConfig",
    "check_config",
    "config_from_dict",
    "config_to_dict",
    "config_with_overrides",
    "load_audit_config",
    "load_config",
    "resolve_augment",
    "save_config",
]

# `retrieval train` without --config: the embedded digits demo, shipped as package data.
DEMO_CONFIG = Path(str(importlib.resources.files("retrieval.resources") / "digits_demo.yaml"))

_FIX = "fix it in the config or with --set {key}=..."  # how every bad value is fixed

# A config as YAML holds it, sections of keys to values, before it is checked: what a file, a checkpoint's
# `config` or `config_to_dict` give and `config_from_dict` checks into a `Config`. Untyped on purpose: its
# values are whatever the user wrote until the sections' models have read them.
ConfigDocument = dict[str, Any]


def _ordered(upper: float = math.inf) -> Callable[[Any], bool]:
    """A test for a pair `(low, high)` with 0 < low <= high <= upper."""
    return lambda pair: 0.0 < pair[0] <= pair[1] <= upper


def _is_count_or_fraction(value: float | None) -> bool:
    return value is None or value == 0 or 0 < value < 1 or (value >= 1 and float(value).is_integer())


_POSITIVE = accepts(lambda value: math.isfinite(value) and value > 0, "a number > 0")
_NON_NEGATIVE = accepts(lambda value: value >= 0, "a number >= 0")
_PROBABILITY = accepts(lambda value: 0.0 <= value <= 1.0, "a probability in [0, 1]")
_PAIR = BeforeValidator(split_text)


def _stored_augmentation(value: str | None) -> str | None:
    """`reranker.base`: null or a dba spec, read as `index build --rerank` reads it (no FAISS is loaded)."""
    try:
        stored_augmentation(value)
    except UserError as error:  # a dba spec's own fault is worth saying (`dba:k=0`); another method's is not
        why = f" ({error})" if value and value.partition(":")[0].strip() == "dba" else ""
        raise UserError(f"reranker.base must be null, dba or dba:k=K,alpha=A, got {value!r}{why}") from None
    return value


_COSINE = accepts(lambda value: value is None or -1.0 <= value <= 1.0, "a cosine in [-1, 1]")

# The checks of `retrieval audit`, each one section of its report (retrieval.audit.tables.SECTIONS)
AUDIT_CHECKS = ("exact_duplicates", "near_duplicates", "leaks", "label_issues", "outliers", "confused_classes")


class _Section(Record):
    """Base of the config sections: building one checks each field's type, choices and range rule.

    Numbers also come as strings (`--set data.path=123` is the text "123"). The validators are built
    when a config is first built, not at import, which stays cheap for the commands that import this.
    """

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, defer_build=True)
    section: ClassVar[str]  # the YAML section name, the KEY prefix in error messages

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _section_error(type(self), exc, {}) from exc  # `build` rewords it with the `--set` texts

    @classmethod
    def build(cls, values: Any, texts: Mapping[str, str]) -> Any:
        """The section from its YAML mapping; `texts` are the `--set` values as typed, for error messages."""
        if not isinstance(values, dict):
            raise UserError(f"config section {cls.section!r} must be a mapping of keys to values")
        unknown = [key for key in values if not isinstance(key, str)]
        if unknown:
            raise unknown_key(cls.section, str(unknown[0]), list(cls.model_fields), noun="config key")
        try:
            return cls(**values)
        except UserError as exc:
            if isinstance(exc.__cause__, ValidationError) and texts:
                raise _section_error(cls, exc.__cause__, texts) from None
            raise


class ModelConfig(_Section):
    section: ClassVar[str] = "model"

    backbone: str = "resnet50"  # a timm model name, or a registered backbone (retrieval.models.backbones)
    # size of the L2-normalized embedding; null: the backbone's pooled features, no head (a baseline without training)
    embedding_dim: Annotated[
        int | None, accepts(lambda value: value is None or value >= 1, "null or an integer >= 1")
    ] = 128
    # timm's avg | max | token (class token); ours for CNNs: avgmax (avg + max) | gem (retrieval.models.pooling)
    pooling: Literal["avg", "max", "token", "avgmax", "gem"] = "avgmax"
    pretrained: bool = True  # timm's ImageNet weights (needs network or timm's cache)
    weights: str | None = None  # local .safetensors/.pth backbone state dict, for offline use; every tensor must fit
    weights_partial: bool = False  # load the tensors of model.weights that fit, the rest as initialized (one line)
    in_chans: Annotated[int, at_least(1, "1 = grayscale, 3 = RGB")] = 3  # input channels
    # timm's dilated CNNs: 8 | 16 dilate the last stages (bigger maps, small images); null: as is
    output_stride: Annotated[Literal[8, 16, 32] | None, Worded("null, 8, 16 or 32")] = None
    flip_average: bool = False  # eval: unit mean of the embeddings of an image and its mirror (symmetric objects)


class DataConfig(_Section):
    section: ClassVar[str] = "data"

    name: str = "csv"  # a dataset of the registry, retrieval/choices/datasets.py (e.g. csv, folder, digits, cub200)
    path: str | None = None  # CSV file (data.name: csv): path,label,split[,is_query,is_gallery]
    root: str | None = None  # dataset folder (folder and the official layouts: retrieval/data/official.py)
    image_size: Annotated[int, at_least(8, "pixels")] = 224  # training crop / evaluation crop
    # images per optimizer step over all processes (random sampler; the PK sampler: p x k)
    batch_size: Annotated[int, at_least(2)] = 128
    eval_batch_size: Annotated[int, at_least(1)] = 256  # images per step when embedding the test set
    # auto (pk for pair losses, else random) | random | balanced (classes equally likely) | pk
    sampler: Literal["auto", "random", "balanced", "pk"] = "auto"
    p: Annotated[int, at_least(2, "classes per PK batch")] = 32  # PK: classes per step over all processes
    k: Annotated[int, at_least(2, "images per class in a PK batch")] = 4  # PK sampler: images per class
    num_workers: Annotated[int, at_least(0)] = 4  # DataLoader worker processes (0: the main process)
    # zero-shot validation: hold out whole training classes (a fraction < 1, or a count; 0 or null: none)
    val_classes: Annotated[float | None, accepts(_is_count_or_fraction, "0, a fraction < 1 or a count")] = 0.0
    # closed-set validation: hold out this fraction of every training class's images (0 or null: none)
    val_fraction: Annotated[
        float | None, accepts(lambda value: value is None or 0.0 <= value < 1.0, "a fraction in [0, 1)")
    ] = 0.0
    # fail (stop, naming the file) | skip (leave it out, log, count): retrieval.data.image_loader.BAD_IMAGE_POLICIES
    on_bad_image: Literal["fail", "skip"] = "fail"
    # CSV of image paths to leave out of every split (an audit report's label_issues.csv; retrieval.data.exclusion)
    exclude: str | None = None
    # Keep DataLoader workers between epochs and evaluations (num_workers > 0): saves their start-up, but workers
    # keep their random state across epochs, so a resumed run's augmentations differ from an uninterrupted one's.
    persistent_workers: bool = False
    pin_memory: bool = True  # page-locked batches for faster copies to the GPU, training and evaluation (GPU only)


class AugmentConfig(_Section):
    """Training augmentation and evaluation resizing, built by `retrieval.data.transforms` (timm + torchvision).

    `preset` sets every knob at once (the table in `retrieval/choices/augment_presets.py`); a knob given in
    the config file or with `--set augment.KEY=VALUE` overrides the preset's value. A knob left out
    comes from the preset; `null` is a value (no random crop, no auto-augment). `--set
    augment.preset=NAME` starts from that preset: only the augment keys also given with --set apply.
    The saved config holds every resolved value. Build one with `resolve_augment`. Each knob's default
    here changes nothing (no crop, flip, affine or noise; the whole image at eval): a preset lists only
    the knobs it sets otherwise.
    """

    section: ClassVar[str] = "augment"

    # natural | glyph | artwork | document | sketch | light (auto: the dataset's, retrieval.choices.datasets)
    preset: PresetName
    # RandomResizedCrop area range; null: no crop, train on the eval geometry
    crop_scale: Annotated[
        tuple[float, float] | None,
        _PAIR,
        accepts(
            lambda pair: pair is None or _ordered(upper=1.0)(pair),
            "null or two area fractions 0 < low <= high <= 1, e.g. 0.08,1.0",
        ),
    ] = None
    # RandomResizedCrop aspect-ratio range (used only with crop_scale; ImageNet's 3/4 to 4/3)
    crop_ratio: Annotated[tuple[float, float], _PAIR, accepts(_ordered(), "two aspect ratios 0 < low <= high")] = (
        3 / 4,
        4 / 3,
    )
    hflip: Annotated[float, _PROBABILITY] = 0.0  # probability of a horizontal flip
    # random rotation in [-degrees, degrees] (0: none)
    affine_degrees: Annotated[float, accepts(lambda value: 0.0 <= value <= 180.0, "degrees in [0, 180]")] = 0.0
    # random shift up to this fraction of the width and height (0: none)
    affine_translate: Annotated[float, accepts(lambda value: 0.0 <= value <= 1.0, "a fraction in [0, 1]")] = 0.0
    # random zoom range (1,1: none)
    affine_scale: Annotated[tuple[float, float], _PAIR, accepts(_ordered(), "two zoom factors 0 < low <= high")] = (
        1.0,
        1.0,
    )
    # random horizontal shear in [-degrees, degrees], e.g. italic vs upright (0: none)
    affine_shear: Annotated[float, accepts(lambda value: 0.0 <= value < 90.0, "degrees in [0, 90)")] = 0.0
    # brightness/contrast/saturation jitter strength (0: none; timm skips it with auto_augment)
    color_jitter: Annotated[float, accepts(lambda value: value >= 0.0, "a strength >= 0")] = 0.0
    # timm policy, e.g. rand-m9-mstd0.5 (RandAugment) or original; null: none (timm parses it: _check_auto_augment)
    auto_augment: str | None = None
    # hue shift strength added to color_jitter, in [0, 0.5] (0: none; applied only with color_jitter)
    hue_jitter: Annotated[float, accepts(lambda value: 0.0 <= value <= 0.5, "a hue shift in [0, 0.5]")] = 0.0
    grayscale: Annotated[float, _PROBABILITY] = 0.0  # probability of turning the image gray (RGB models)
    blur: Annotated[float, _PROBABILITY] = 0.0  # probability of a Gaussian blur (sigma 0.1-2 px)
    random_erasing: Annotated[float, _PROBABILITY] = 0.0  # probability of erasing a rectangle after normalization
    # center_crop (resize to size/crop_pct, crop) | resize (whole image) | pad_square (letterbox)
    eval_mode: EvalMode = "resize"
    # center_crop: the crop's share of the resized image's side
    crop_pct: Annotated[float, accepts(lambda value: 0.0 < value <= 1.0, "a fraction in (0, 1]")] = 1.0
    # auto (each image's border colour) | white | black | mean: affine borders and letterbox padding
    fill: Fill = "auto"

    @field_validator("auto_augment")
    @classmethod
    def _timm_parses(cls, policy: str | None) -> str | None:
        if policy is not None:
            _check_auto_augment(policy)
        return policy


class LossConfig(_Section):
    section: ClassVar[str] = "loss"

    # a loss of the registry, retrieval/choices/losses.py (LOSSES), e.g. anchor, proxy_nca; or any
    # pytorch-metric-learning loss as pml.<ClassName> (its arguments in loss.kwargs, a PML miner in loss.miner)
    name: str = "anchor"
    params: dict[str, Any] = Field(default_factory=dict)  # the loss constructor's own arguments


class TrainConfig(_Section):
    section: ClassVar[str] = "train"

    epochs: Annotated[int, at_least(1)] = 60  # full passes over the training set
    lr: Annotated[float, _POSITIVE] = 1e-4  # AdamW learning rate of the backbone and head
    proxy_lr_mult: Annotated[float, _POSITIVE] = 100.0  # proxies learn this much faster (Proxy-Anchor)
    weight_decay: Annotated[float, _NON_NEGATIVE] = 1e-4  # AdamW weight decay (never on proxies)
    warmup_epochs: Annotated[float, _NON_NEGATIVE] = 1.0  # linear lr warm-up, then the schedule's decay
    schedule: Literal["cosine", "step", "constant"] = (
        "cosine"  # cosine (to zero at the last step) | step (x step_gamma, step_epochs) | constant (after warm-up)
    )
    step_epochs: Annotated[int, at_least(1)] = 20  # step schedule: epochs between two decays
    # step schedule: factor of each decay
    step_gamma: Annotated[float, accepts(lambda value: 0 < value <= 1, "a factor in (0, 1]")] = 0.1
    # clip the global gradient norm to this (null or 0: off)
    grad_clip: Annotated[float | None, accepts(lambda value: value is None or value >= 0, "null, 0 (off) or > 0")] = (
        None
    )
    compile: bool = False  # torch.compile the training step (pays off on GPU for long runs; off: eager)
    freeze_backbone_epochs: Annotated[int, at_least(0)] = 1  # train only head and proxies first
    freeze_bn: bool = True  # keep BatchNorm statistics frozen (pretrained backbones, small batches)
    seed: Annotated[int, at_least(0)] = 0  # seeds Python, NumPy, torch and the data order
    # none | bf16 | fp16 (float16 with loss scaling, GPUs without bf16) | auto (bf16 on GPU, none on CPU)
    amp: Literal["none", "bf16", "fp16", "auto"] = "auto"
    channels_last: bool = True  # NHWC memory format on GPU (ignored on CPU)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_every: Annotated[int, at_least(1)] = 1  # validate every N epochs (and always after the last)
    # the validation metric that picks checkpoints/best.pt
    select_on: Annotated[Literal["recall@1", "map@r"], Worded("recall@1 or map@r")] = "recall@1"
    select_on_test: bool = False  # no validation split: pick best.pt on the TEST set (optimistic; labelled so)
    log_test: bool = False  # also evaluate the test set every epoch (logged, never used for selection)
    # draw plots/*.png (curves.png at most once a minute while training, every plot at the end); false for runs
    # nobody looks at one by one (a sweep's cells, tests): `python tools/plot_run.py RUN` draws them later
    plots: bool = True
    # CPU threads for torch (null: torch's default); results depend on it
    threads: Annotated[int | None, accepts(lambda value: value is None or value >= 1, "null or an integer >= 1")] = None
    deterministic: bool = False  # torch's deterministic algorithms (slower; bit-exact reruns on one machine)
    # micro-batches per optimizer step (and per lr-schedule and EMA step): data.batch_size x N images a step
    accumulate_steps: Annotated[int, at_least(1, "micro-batches per optimizer step")] = 1
    # decay of an exponential moving average of the weights (timm's ModelEmaV3), selected against the raw weights
    ema: Annotated[
        float | None, accepts(lambda value: value is None or 0.0 < value < 1.0, "null (off) or in (0, 1)")
    ] = None
    # experiment trackers every metrics.jsonl record is mirrored to (pip install 'retrieval[trackers]')
    loggers: Annotated[
        list[str],
        _PAIR,
        registered(TRACKERS, many=True),
    ] = Field(default_factory=list)


class PretrainConfig(_Section):
    """`retrieval pretrain`: self-supervised pretraining of the backbone on unlabeled images (`retrieval.pretrain`).

    The backbone, its input channels and image size come from `model` and `data`, so the config a
    later `retrieval train` runs (with `--set model.weights=RUN/backbone.safetensors`) pretrains the
    backbone it will load; device, autocast, threads and seed come from `train`. The two views of an
    image are the `augment` section's pipeline with the crop and photometric knobs below in place of its own.
    """

    section: ClassVar[str] = "pretrain"

    # a method of the registry retrieval/choices/pretrain_methods.py: simclr (NT-Xent, PML's NTXentLoss; won
    # validation over simsiam: docs/benchmarks.md) | simsiam (stop-gradient), or one registered (docs/extending.md)
    method: Annotated[str, registered(PRETRAIN_METHODS)] = "simclr"
    epochs: Annotated[int, at_least(1)] = 100  # passes over the unlabeled images
    # images per optimizer step over all processes, each seen in two views (SimCLR's negatives: 2 x batch - 2)
    batch_size: Annotated[int, at_least(4)] = 256
    lr: Annotated[float, _POSITIVE] = 1e-3  # AdamW learning rate, cosine decay to 0 after the warm-up
    weight_decay: Annotated[float, _NON_NEGATIVE] = 1e-6  # AdamW weight decay (none on norms and biases)
    warmup_epochs: Annotated[float, _NON_NEGATIVE] = 1.0  # linear lr warm-up
    temperature: Annotated[float, _POSITIVE] = 0.2  # simclr: NT-Xent temperature
    hidden_dim: Annotated[int, at_least(1)] = 512  # width of the projection head's hidden layer
    projection_dim: Annotated[int, at_least(1)] = 128  # output of the projection head (discarded after pretraining)
    # the views' RandomResizedCrop area range: SimCLR's strong crops (the augment section's crop is replaced)
    crop_scale: Annotated[
        tuple[float, float], _PAIR, accepts(_ordered(upper=1.0), "two area fractions 0 < low <= high <= 1")
    ] = (0.2, 1.0)
    color_jitter: Annotated[float, accepts(lambda value: value >= 0.0, "a strength >= 0")] = 0.4  # views' jitter
    hue_jitter: Annotated[float, accepts(lambda value: 0.0 <= value <= 0.5, "a hue shift in [0, 0.5]")] = 0.1
    grayscale: Annotated[float, _PROBABILITY] = 0.2  # probability of a gray view (RGB models)
    blur: Annotated[float, _PROBABILITY] = 0.2  # probability of a Gaussian blur of a view
    # probability of redrawing a view in one random ink on plain paper before the rest of its pipeline
    # (artwork in several styles: a colour drawing and a monochrome rendering of it become positives)
    one_ink: Annotated[float, _PROBABILITY] = 0.0


def _weights_with_zero(values: tuple[float, ...]) -> bool:
    return 0.0 in values and all(0.0 <= value <= 1.0 for value in values)


class RerankerConfig(_Section):
    """`retrieval reranker`: a learned pairwise re-ranker of a checkpoint's results (`retrieval.reranker`).

    Each mined image (of half the validation classes, by default) pairs with its `mine_depth` nearest matches
    and `mine_depth` nearest non-matches; the depth N and the weight w of the blend, over dba's results by
    default, are chosen on validation
    (`retrieval.core.learned_rerank`). Device, autocast, loading and seed come from `train` and `data`.
    """

    section: ClassVar[str] = "reranker"

    # trained: the backbone fine-tunes with the head, on augmented images (each pair: two images through it);
    # frozen: only the projection and the head train, on the backbone's features of each image computed once
    backbone: Literal["trained", "frozen"] = "trained"
    # validation: pairs mined on a random half of the validation classes (unseen by the embedder), the blend
    # chosen on the other half; train: pairs mined on the training split (which the embedder fits: easy pairs),
    # the blend chosen on validation. Validation won on the glyphs (docs/reranker.md)
    pairs_from: Literal["train", "validation"] = "validation"
    mine_depth: Annotated[int, at_least(1)] = 5  # each training image's nearest matches, and as many non-matches
    # the depths N tried on validation (results re-scored per query)
    depths: Annotated[tuple[int, ...], accepts(lambda v: len(v) > 0 and min(v) >= 1, "whole numbers >= 1")] = (
        5,
        10,
        20,
        50,
    )
    # the weights w of the pair model tried on validation; 0 (the embedding alone) is always among them
    weights: Annotated[tuple[float, ...], accepts(_weights_with_zero, "weights in [0, 1], 0 among them")] = (
        0.0,
        0.25,
        0.5,
        0.75,
        1.0,
    )
    # apply the best blend only where its validation MAP@R gain's paired class-bootstrap 95% interval is above 0
    require_clear_gain: bool = True
    # the re-ranking the blend re-scores: null, the embedding's own search; dba, its database-side augmentation
    # (k and alpha chosen on the blend's validation split) or dba:k=K,alpha=A (given). An index the re-ranker
    # serves must be built with the same (`index build --rerank`): its results are the ones the blend was chosen on
    base: Annotated[str | None, AfterValidator(_stored_augmentation)] = "dba"
    epochs: Annotated[int, at_least(1)] = 3  # passes over the mined pairs (few from validation: 3 measured)
    batch_size: Annotated[int, at_least(1)] = 64  # pairs per optimizer step
    lr: Annotated[float, _POSITIVE] = 1e-4  # AdamW learning rate (backbone and head), cosine decay after a warm-up
    weight_decay: Annotated[float, _NON_NEGATIVE] = 1e-4  # AdamW weight decay
    width: Annotated[int, at_least(1)] = 256  # P: the descriptor's width
    grid: Annotated[int, at_least(1)] = 2  # cells a side of the descriptor's layout of the feature map


class AuditConfig(_Section):
    """`retrieval audit`: which checks run, and their settings (`retrieval.audit`, docs/audit.md).

    Read by `retrieval audit` only, from `--config` and `--set audit.KEY=VALUE`; its flags `-k`,
    `--threshold`, `--leak-ratio`, `--show` and `--no-hash` are shorthands that set these same keys.
    """

    section: ClassVar[str] = "audit"

    # the report sections to make; leaving out exact_duplicates skips reading every file, leaks the copy check
    checks: Annotated[
        list[str],
        _PAIR,
        accepts(
            lambda names: bool(names) and all(name in AUDIT_CHECKS for name in names),
            f"a non-empty list of {', '.join(AUDIT_CHECKS)}",
        ),
    ] = Field(default_factory=lambda: list(AUDIT_CHECKS))
    k: Annotated[int, at_least(1)] = 10  # neighbours per image in the kNN graph (cleanlab's scores read them)
    # the near-duplicate cosine; null: chosen on the catalogue's different-label pairs (retrieval.audit.threshold)
    threshold: Annotated[float | None, _COSINE] = None
    # ... at this share of the catalogue's different-label pairs scoring at or above it
    threshold_fmr: Annotated[float, accepts(lambda value: 0.0 < value < 1.0, "a false match rate in (0, 1)")] = 1e-4
    # ... and at least this cosine (on category data the different-label pairs would allow whole classes)
    threshold_floor: Annotated[float, _COSINE] = 0.95
    # a cross-split pair is a copy when its distance is at most this times the next image's (retrieval.audit.leaks)
    leak_ratio: Annotated[float, accepts(lambda value: 0.0 <= value < 1.0, "a distance ratio in [0, 1)")] = 0.5
    show: Annotated[int, at_least(1)] = 50  # findings per section of the report page (the CSVs hold all)


class Config(BaseModel):
    """The whole run configuration: one model per YAML section."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    augment: AugmentConfig = Field(default_factory=lambda: resolve_augment({}, _default(DataConfig, "name")))
    loss: LossConfig = Field(default_factory=LossConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)


_SECTIONS: dict[str, type[_Section]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "augment": AugmentConfig,
    "loss": LossConfig,
    "train": TrainConfig,
    "pretrain": PretrainConfig,
    "reranker": RerankerConfig,
    "audit": AuditConfig,
}


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read a YAML config (the digits demo when `path` is None) and apply `a.b=value` overrides."""
    return config_with_overrides(_read_yaml(Path(path) if path is not None else DEMO_CONFIG), overrides)


def load_audit_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> AuditConfig:
    """The `audit` section of a YAML config (defaults without one) with `audit.KEY=value` overrides; no PyTorch.

    The file's other sections are left unread (a run's config may be given as it is).

    Raises:
        UserError: an unknown section or audit key, a bad value, or a `--set` of another section.
    """
    raw, texts = _overridden(_read_yaml(Path(path)) if path is not None else {}, overrides)
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise UserError(f"unknown config section(s) {sorted(unknown)}; valid sections: {', '.join(_SECTIONS)}")
    other = next((key for key in texts if not key.startswith("audit.")), None)
    if other is not None:
        raise UserError(f"--set {other}: retrieval audit reads only the audit section; use --set audit.KEY=VALUE")
    return AuditConfig.build(raw.get("audit") or {}, texts)


def check_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> DataConfig:
    """Check what of `load_config(path, overrides)` needs no PyTorch, so that a typo fails in an instant.

    That is the file (found, YAML, a mapping of known sections), the form of every `--set`, every field of
    sections model, data, train, pretrain, reranker and audit, `data.name` included (against the torch-free
    `retrieval.choices.datasets`), and a `loss.name` that no loss can have (`retrieval.choices.losses`).
    What `load_config` checks beyond it needs PyTorch: the loss's parameters (the loss classes'
    constructors, `retrieval.losses.registry`, are their one source) and a pytorch-metric-learning
    class name, the augment section (timm parses an auto-augment policy) and the rules across fields.
    The `--set` values are checked on the file given or the demo; each field's check reads only its
    own value, so they hold for any base (a checkpoint's saved config included).

    Returns:
        The data section, for a command to check the dataset's files before PyTorch loads too.

    Raises:
        UserError: the first mistake found, worded as `load_config` words it.
    """
    raw, texts = _overridden(_read_yaml(Path(path) if path is not None else DEMO_CONFIG), overrides)
    sections = _build_plain_sections(raw, texts)
    _loss_name(raw.get("loss") or {})
    return sections.data


def config_with_overrides(raw: ConfigDocument, overrides: Sequence[str]) -> Config:
    """Set each `section.key=value` in nested dicts `raw` (in place), then build and check the whole config.

    A value is read as YAML (`null`, `[0.2, 0.9]`, `8`) and typed by the field it sets, so any value
    of a file can be replaced or switched off. Overriding `loss.name` with another loss starts from
    that loss's defaults, and `augment.preset` from that preset's knobs: what the file gave the old
    loss or preset is dropped, and only the keys of that section given on the command line apply.
    """
    return _build_config(*_overridden(raw, overrides))


def _overridden(raw: ConfigDocument, overrides: Sequence[str]) -> tuple[ConfigDocument, dict[str, str]]:
    """`raw` with the overrides set in it (in place), and the `--set` texts by `section.key`, for messages."""
    parsed = [_parse_override(override) for override in overrides]
    new_loss = next((value for section, key, value, _ in reversed(parsed) if (section, key) == ("loss", "name")), None)
    old_loss = raw["loss"].get("name", _default(LossConfig, "name")) if isinstance(raw.get("loss"), dict) else None
    if new_loss is not None and new_loss != old_loss:
        raw["loss"] = {}
    if any((section, key) == ("augment", "preset") for section, key, _, _ in parsed):
        raw["augment"] = {}
    for section, key, value, _ in parsed:
        if not isinstance(raw.get(section), dict):
            raw[section] = {}
        raw[section][key] = value
    return raw, {f"{section}.{key}": text for section, key, _, text in parsed}


def config_from_dict(raw: ConfigDocument) -> Config:
    """Build a `Config` from nested dicts, checking every key, type and range."""
    return _build_config(raw, {})


def config_to_dict(config: Config) -> ConfigDocument:
    """The config as plain nested dicts, loss parameters flattened into the loss section."""
    out = config.model_dump()
    loss = out.pop("loss")
    out["loss"] = {"name": loss["name"], **loss["params"]}
    for section in (
        "augment",
        "pretrain",
        "reranker",
    ):  # pairs (crop_scale, ...) as YAML lists, as a config file gives them
        out[section] = {key: list(value) if isinstance(value, tuple) else value for key, value in out[section].items()}
    return {key: out[key] for key in _SECTIONS}


def save_config(config: Config, path: Path) -> None:
    """Write the resolved config as YAML (every default filled in)."""
    write_text(path, yaml.safe_dump(config_to_dict(config), sort_keys=False))


def resolve_augment(values: dict[str, Any], data_name: str, texts: Mapping[str, str] | None = None) -> AugmentConfig:
    """The augment section `values` resolved against its preset.

    `preset: auto` (or no preset) picks the preset that dataset `data_name` names in the registry
    (`natural` for the photo benchmarks, `light` for the rest). Every knob not in `values` takes the
    preset's value. `texts` are the `--set` values as typed, for error messages.

    Raises:
        UserError: unknown preset, key or dataset, a value of the wrong type or out of its range.
    """
    if not isinstance(values, dict):
        raise UserError("config section 'augment' must be a mapping of keys to values (e.g. preset: glyph)")
    requested = str(values.get("preset", AUTO_PRESET))
    preset = dataset_spec(data_name).augment_preset if requested == AUTO_PRESET else requested
    if preset not in PRESETS:
        raise UserError(f"unknown augment.preset {requested!r}; valid presets: {AUTO_PRESET}, {', '.join(PRESETS)}")
    knobs = {key: value for key, value in values.items() if key != "preset"}
    return AugmentConfig.build({**PRESETS[preset], **knobs, "preset": preset}, texts or {})


def _build_config(raw: ConfigDocument, texts: Mapping[str, str]) -> Config:
    """The config of nested dicts `raw`; `texts` maps `section.key` to the `--set` text it came from."""
    model, data, train, pretrain, reranker, audit = _build_plain_sections(raw, texts)
    augment = resolve_augment(raw.get("augment") or {}, data.name, texts)
    loss = _build_loss_section(raw.get("loss") or {}, texts)
    config = Config(
        model=model,
        data=data,
        augment=augment,
        loss=loss,
        train=train,
        pretrain=pretrain,
        reranker=reranker,
        audit=audit,
    )
    _check_across_fields(config)
    return config


class _PlainSections(NamedTuple):
    """The sections whose checks need no registry (nor PyTorch)."""

    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    pretrain: PretrainConfig
    reranker: RerankerConfig
    audit: AuditConfig


def _build_plain_sections(raw: ConfigDocument, texts: Mapping[str, str]) -> _PlainSections:
    """The sections whose checks need no registry (nor PyTorch), after refusing an unknown section."""
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise UserError(f"unknown config section(s) {sorted(unknown)}; valid sections: {', '.join(_SECTIONS)}")
    model = ModelConfig.build(raw.get("model") or {}, texts)
    data = DataConfig.build(raw.get("data") or {}, texts)
    dataset_spec(data.name)  # an unknown name fails here, without the dataset readers
    return _PlainSections(
        model,
        data,
        TrainConfig.build(raw.get("train") or {}, texts),
        PretrainConfig.build(raw.get("pretrain") or {}, texts),
        RerankerConfig.build(raw.get("reranker") or {}, texts),
        AuditConfig.build(raw.get("audit") or {}, texts),
    )


def _default(section: type[_Section], name: str) -> Any:
    """The default value of field `name` of `section`."""
    return section.model_fields[name].default


def _check_across_fields(config: Config) -> None:
    """The rules that tie fields together; each field's own choices and range are checked on the field."""
    data = config.data
    if dataset_spec(data.name).reads_root and not data.root:
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


def _read_yaml(path: Path) -> ConfigDocument:
    if not path.is_file():
        raise UserError(f"config file not found: {path}; pass an existing YAML file with --config")
    try:
        raw = _safe_load(path.read_text(), f"config file {path}")
    except yaml.YAMLError as exc:
        raise UserError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"config file {path} must hold a mapping of sections ({', '.join(_SECTIONS)})")
    return raw


def _parse_override(override: str) -> tuple[str, str, Any, str]:
    """`data.batch_size=64` -> ("data", "batch_size", 64, "64"): the value as YAML reads it, and its text.

    Text YAML cannot parse stays text; the field it sets types it (`3e-4`, which YAML 1.1 leaves a
    string, becomes a float).
    """
    key, sep, text = override.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not name:
        raise UserError(f"--set expects section.key=value (e.g. train.lr=3e-4), got {override!r}")
    text = text.strip()
    try:
        value = _safe_load(text, f"--set {key.strip()}")
    except yaml.YAMLError:
        value = text
    return section, name, value, text


def _safe_load(text: str, what: str) -> Any:
    """`yaml.safe_load(text)`, with the two inputs it fails on outside `YAMLError` as one-line `UserError`s.

    Python refuses integers of more than 4,300 digits and YAML's impossible dates (a `ValueError`), and the
    YAML parser recurses once per level of nesting (a `RecursionError` for some thousand `[`).

    Raises:
        yaml.YAMLError: `text` is not YAML.
        UserError: a value Python cannot hold, or nesting too deep to parse.
    """
    try:
        return yaml.safe_load(text)
    except ValueError as exc:
        reason = str(exc).split(":")[0].lower()
        raise UserError(f"{what}: cannot read the value ({reason}); shorten the number, or quote text") from exc
    except RecursionError:
        raise UserError(f"{what}: lists or mappings nested too deeply to parse; write the value flat") from None


def _build_loss_section(values: Any, texts: Mapping[str, str]) -> LossConfig:
    """The loss section: `name` plus the loss's parameters, or for `pml.<ClassName>` a `kwargs` mapping and a `miner`.

    Each parameter is typed by its default's type. `--set loss.kwargs.KEY=VALUE` sets one entry of the
    `kwargs` mapping (so `sweep --grid` can vary it).
    """
    from retrieval.losses.registry import (  # imports torch; only needed here
        canonical_loss_name,
        check_loss_parameters,
        loss_parameters,
    )

    name = canonical_loss_name(_loss_name(values))
    defaults = loss_parameters(name)  # raises for an unknown name, listing the valid ones
    entries = {key: value for key, value in values.items() if key.startswith("kwargs.") and "kwargs" in defaults}
    given = {key: value for key, value in values.items() if key != "name" and key not in entries}
    for key in given:
        if key not in defaults:
            raise unknown_key(
                "loss", str(key), sorted(defaults), f"for loss {name!r}", "valid parameters", noun="config key"
            )
    fields: dict[str, Any] = {key: (Any if value is None else type(value), value) for key, value in defaults.items()}
    parameters = create_model("LossParameters", __base__=_LossParameters, **fields)
    params = parameters.build(given, texts).model_dump()
    if entries:
        kwargs = params["kwargs"] if isinstance(params["kwargs"], dict) else {}
        params["kwargs"] = {**kwargs, **{key.removeprefix("kwargs."): value for key, value in entries.items()}}
    return LossConfig(name=name, params=check_loss_parameters(name, params))


def _loss_name(values: Any) -> str:
    """The `loss.name` of loss section `values`, refused at once when no loss can have it (torch-free).

    Raises:
        UserError: the section is not a mapping, or the name is neither registered nor can be PML's.
    """
    if not isinstance(values, dict):
        raise UserError("config section 'loss' must be a mapping: name plus the loss's own parameters")
    name = str(values.get("name", _default(LossConfig, "name")))
    check_loss_name(name)
    return name


class _LossParameters(_Section):
    """Base of the model of one loss's parameters, made from its constructor's defaults.

    A number must be finite: a NaN margin or scale would train on NaN, or on nothing, without a word.
    """

    model_config = ConfigDict(**_Section.model_config, allow_inf_nan=False)
    section: ClassVar[str] = "loss"


def _section_error(section: type[_Section], exc: ValidationError, texts: Mapping[str, str]) -> UserError:
    """A section's validation error as one line naming the key (`retrieval.validation.user_error`)."""
    return user_error(section, exc, section.section, _FIX, texts, noun="config key")


def _field_choices(section: type[_Section], name: str) -> tuple[str, ...]:
    """The choices of `Literal` field `name`, for the modules that check against them."""
    return choices(section.model_fields[name].annotation)


BAD_IMAGE_POLICIES: tuple[str, ...] = _field_choices(DataConfig, "on_bad_image")  # as retrieval.data.image_loader's
SCHEDULES: tuple[str, ...] = _field_choices(TrainConfig, "schedule")  # retrieval.train.schedule
