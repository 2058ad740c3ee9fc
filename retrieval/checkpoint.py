"""Checkpoints: one `Checkpoint` type, written atomically with a manifest, loaded as data and checked.

On disk a checkpoint is a `torch.save` dict (loaded with `weights_only=True`: data, never code):

    model        the embedder's state dict
    loss         the loss's state dict (the proxies of proxy losses; empty for pair losses)
    optimizer    the optimizer's state dict (`last.pt` only: what a resume needs)
    epoch        the last trained epoch (0-based)
    best_score   the selection metric's best value so far, and `best_epoch` (1-based) where it was reached
    selected_weights  which weights the selection holds: `raw` (trained) or `ema` (averaged, `train.ema`);
                 in `best.pt`, `model` and `loss` are those weights
    ema          the EMA of the model and loss (`last.pt` of a run with `train.ema`)
    grad_scaler  fp16's loss-scaler state (`last.pt` of a run with `train.amp: fp16`)
    config       the run's resolved config as plain dicts (`config_to_dict`)
    num_classes  training classes (one proxy each)
    match_threshold  optional: the score threshold of "is there a match at all" and how it was chosen
                 (`retrieval evaluate --verification --save-threshold FMR`; the fields of
                 `retrieval.core.match_threshold.MatchThreshold`); older toolkits ignore it
    manifest     format, version, toolkit version, embedding_dim, model_config, checksum of the weights,
                 and `payload_checksum`: sha256 over every other part of the file (`payload_checksum()`);
                 for a registered backbone (`retrieval.models.backbones`) also `backbone_builder`, the
                 `module:qualname` of the code that builds it, which a process without it names

That dict is the record `CheckpointFile` (its manifest `CheckpointManifest`), written and read back
through it: a field missing or of the wrong type is one line naming the file and the field, keys a later
toolkit adds are ignored. `best.pt` is the same without `optimizer`, `ema` and `grad_scaler`
(`Checkpoint.slim`). Version 2 files (this layout) are what every release so far has written;
`tests/fixtures/checkpoint_v2.pt` keeps one.

Loading checks the weights against `checksum` and, when the manifest has one, everything else
(proxies, optimizer state, counters, config, manifest) against `payload_checksum`, so a byte flipped
anywhere in a `last.pt` stops a resume instead of silently changing it. The field is an addition
within version 2, not a version bump: files written before it keep loading (only their weights are
checked), and older toolkits still read the files written now (they ignore the field).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

import torch
from pydantic import ConfigDict, Field, ValidationInfo, field_validator
from torch import Tensor

from retrieval import __version__
from retrieval.config import (
    Config,
    ConfigDocument,
    ModelConfig,
    config_from_dict,
    config_with_overrides,
    load_config,
)
from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError
from retrieval.models import Embedder
from retrieval.models.backbones import backbone_builder, builder_path
from retrieval.runtime.checkpoint_files import missing_checkpoint
from retrieval.runtime.files import atomic_write
from retrieval.validation import Record, ValidationError, accepts, at_least, user_error

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "PAYLOAD_CHECKSUM",
    "TRAINED_KEYS",
    "Checkpoint",
    "CheckpointFile",
    "CheckpointManifest",
    "StateDict",
    "load_torch_file",
    "payload_checksum",
    "state_checksum",
]

CHECKPOINT_FORMAT: Final = "retrieval-checkpoint"
CHECKPOINT_VERSION = 2  # 2: best_score/best_epoch of the selection split
PAYLOAD_CHECKSUM = "payload_checksum"  # the manifest field over the whole file; absent in older version 2 files

# A torch `state_dict()` (of a module, an optimizer, a loss scaler), kept as torch makes and loads it:
# its layout is torch's and the loaded part's, which `load_state_dict` checks, not a record of ours.
StateDict = dict[str, Any]
# Sections a trained checkpoint fixes, with the keys of each that still apply to it: the weights were
# trained with this architecture and loss, so `--set` may change only evaluation-time options.
TRAINED_KEYS: dict[str, tuple[str, ...]] = {"model": ("model.flip_average",), "loss": ()}


_R = TypeVar("_R", bound=Record)
_DAMAGED = "the file is a damaged retrieval checkpoint: restore an intact copy or train the run again"


def _where(info: ValidationInfo) -> str:
    """The file being read, as `CheckpointFile.read` passes it in the validation context."""
    return str((info.context or {}).get("where", "checkpoint"))


def _validated(model: type[_R], values: Any, where: str, context: dict[str, str] | None) -> _R:
    """`values` as a `model` read from `where`; a part that words its own error (a nested record) keeps its words.

    Raises:
        UserError: the first field missing or of the wrong type, naming `where` and the field.
    """
    try:
        return model.model_validate(values, context=context)
    except ValidationError as exc:
        nested = (exc.errors()[0].get("ctx") or {}).get("error")
        if isinstance(nested, UserError):
            raise nested from None
        raise user_error(model, exc, where, _DAMAGED) from None


class CheckpointManifest(Record):
    """A checkpoint's `manifest`: what wrote the file, the model it holds, and the checksums that guard it.

    Keys a later toolkit adds within the same version are ignored (as `payload_checksum` was by the
    toolkits before it); the model config's are not: a model this toolkit cannot build is refused by name.
    """

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    format: Literal["retrieval-checkpoint"]
    version: Annotated[int, at_least(1)]  # the file layout (`CHECKPOINT_VERSION`); newer ones are refused
    toolkit_version: str = "unknown"  # the version that wrote it
    embedding_dim: Annotated[int | None, accepts(lambda value: value is None or value >= 1, "an integer >= 1")] = None
    model_settings: ModelConfig = Field(alias="model_config")  # builds the embedder
    checksum: str  # `state_checksum` of the weights
    payload_checksum: str | None = None  # `payload_checksum` of everything else; absent in older version 2 files
    backbone_builder: str | None = None  # `module:qualname` of a registered backbone's builder (None: timm)

    @field_validator("version", mode="before")
    @classmethod
    def _readable(cls, version: Any, info: ValidationInfo) -> Any:
        if isinstance(version, int) and version > CHECKPOINT_VERSION:
            raise UserError(
                f"{_where(info)} has checkpoint version {version}, newer than this toolkit reads "
                f"({CHECKPOINT_VERSION}); upgrade retrieval"
            )
        return version

    @field_validator("model_settings", mode="before")
    @classmethod
    def _buildable(cls, values: Any, info: ValidationInfo) -> ModelConfig:
        where = f"{_where(info)}: manifest.model_config"
        if isinstance(values, ModelConfig):
            return values
        if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
            raise UserError(f"{where} must be a mapping of keys to values; {_DAMAGED}")
        try:
            return ModelConfig(**values)
        except UserError as exc:  # a config section words its errors for a config file: worded for this one
            if not isinstance(exc.__cause__, ValidationError):
                raise
            raise user_error(ModelConfig, exc.__cause__, where, "a newer toolkit wrote it, or " + _DAMAGED) from None

    @classmethod
    def read(cls, values: Any, where: str, context: dict[str, str] | None = None) -> CheckpointManifest:
        """The manifest `values` of the file `where` (`context`: the reading file's, for the nested messages).

        Raises:
            UserError: a newer version, or a field missing or of the wrong type, naming `where` and the field.
        """
        return _validated(cls, values, where, context)

    def as_dict(self) -> dict[str, object]:
        """The manifest as the file holds it: the model config in full, no key for an absent optional field."""
        fields = self.model_dump(by_alias=True, exclude={"model_settings"}, exclude_none=True)
        return {**fields, "model_config": self.model_settings.model_dump()}


class CheckpointFile(Record):
    """The dict a checkpoint file holds (`torch.save`), field by field: the layout the module docstring lists.

    `Checkpoint` is what the toolkit works with; this is what it writes and reads back, checked field by
    field: a hand-edited or damaged file is one line naming the file and the field. Top-level keys a
    later toolkit adds are ignored, as they always were.
    """

    model_config = ConfigDict(extra="ignore", strict=True, arbitrary_types_allowed=True, protected_namespaces=())

    manifest: CheckpointManifest  # first: a newer version is refused before its other fields are read
    model: dict[str, Tensor]
    # The run's config as `config_to_dict` wrote it, kept as plain dicts: building a `Config` needs the
    # registries of the run's dataset and loss, which a process that only embeds with the model may lack;
    # `Checkpoint.config()` builds and checks it when it is asked for.
    config: ConfigDocument
    num_classes: Annotated[int, at_least(0)] = 0
    epoch: Annotated[int, at_least(0)] = 0
    best_score: float = -1.0
    best_epoch: Annotated[int, at_least(0)] = 0
    selected_weights: Literal["raw", "ema"] = "raw"
    loss: StateDict = Field(default_factory=dict)
    optimizer: StateDict | None = None
    ema: StateDict | None = None
    grad_scaler: StateDict | None = None
    match_threshold: MatchThreshold | None = None

    @field_validator("manifest", mode="before")
    @classmethod
    def _manifest(cls, values: Any, info: ValidationInfo) -> CheckpointManifest:
        return CheckpointManifest.read(values, f"{_where(info)}: manifest", {"where": _where(info)})

    @field_validator("match_threshold", mode="before")
    @classmethod
    def _threshold(cls, value: Any, info: ValidationInfo) -> MatchThreshold | None:
        fix = "store it again with `retrieval evaluate --checkpoint CKPT --save-threshold 1e-3`"
        return MatchThreshold.read(value, f"{_where(info)}: match_threshold", fix)

    @classmethod
    def read(cls, raw: Any, path: Path) -> CheckpointFile:
        """The checkpoint dict `raw` that `torch.load` read from `path`, checked field by field.

        Raises:
            UserError: a newer version, or a field missing or of the wrong type, naming `path` and the field.
        """
        return _validated(cls, raw, str(path), {"where": str(path)})

    def payload(self) -> dict[str, Any]:
        """The dict `torch.save` writes: no key for an absent optional part (optimizer, EMA, threshold)."""
        optional = ("optimizer", "ema", "grad_scaler", "match_threshold")
        payload = {name: getattr(self, name) for name in type(self).model_fields if name not in optional}
        payload["manifest"] = self.manifest.as_dict()
        payload |= {name: getattr(self, name) for name in optional[:3] if getattr(self, name) is not None}
        if self.match_threshold is not None:
            payload["match_threshold"] = self.match_threshold.to_dict()
        return payload


@dataclass
class Checkpoint:
    """A trained embedder with what evaluation, indexing and resuming need (see the module docstring)."""

    model: dict[str, Tensor]  # the embedder's state dict
    model_config: ModelConfig  # builds the embedder (pretrained/weights are ignored: the weights are in `model`)
    run_config: ConfigDocument  # the run's resolved config, plain nested dicts (see `CheckpointFile.config`)
    num_classes: int  # training classes
    epoch: int = 0  # last trained epoch, 0-based
    best_score: float = -1.0  # selection metric of the best epoch so far (-1: none yet)
    best_epoch: int = 0  # 1-based epoch of best_score (0: none yet)
    loss: StateDict = field(default_factory=dict)  # the loss's state (proxies)
    optimizer: StateDict | None = None  # None in best.pt: evaluation needs no optimizer state
    toolkit_version: str = __version__  # the version that wrote it
    selected_weights: Literal["raw", "ema"] = "raw"  # which weights of best_epoch were selected (best.pt holds them)
    ema: StateDict | None = None  # last.pt with train.ema: the averaged model and loss (`WeightAverage.averaged`)
    grad_scaler: StateDict | None = None  # last.pt with train.amp fp16: the loss scaler's scale and growth tracker
    match_threshold: MatchThreshold | None = None  # from `evaluate --save-threshold`; `index build` copies it
    # `module:qualname` of a registered backbone's builder (None: a timm backbone); recorded when saved
    backbone_builder: str | None = None

    @property
    def resumable(self) -> bool:
        """Whether `--resume` can continue from it (a `last.pt`, which holds the optimizer state)."""
        return self.optimizer is not None

    @property
    def embedding_dim(self) -> int:
        """Size D of the embeddings the model outputs (the backbone's width when the model has no head)."""
        if self.model_config.embedding_dim is not None:
            return self.model_config.embedding_dim
        config = self.model_config.model_copy(update={"pretrained": False, "weights": None})
        self._check_backbone()
        with torch.device("meta"):  # the architecture alone: no memory, no initialization
            return Embedder(**config.model_dump()).embedding_dim

    @property
    def proxies(self) -> Tensor | None:
        """`(K, D)` class proxies of a proxy loss, or None (pair losses have none)."""
        proxies = self.loss.get("proxies")
        return proxies if isinstance(proxies, Tensor) else None

    def slim(self) -> Checkpoint:
        """The same checkpoint without what only a resume needs (optimizer, EMA, loss scaler): `best.pt`."""
        return dataclasses.replace(self, optimizer=None, ema=None, grad_scaler=None)

    def embedder(self, flip_average: bool | None = None) -> Embedder:
        """The trained `Embedder` (eval mode, CPU); nothing is downloaded or read from `model.weights`.

        `flip_average` replaces the model's test-time flip averaging (`--set model.flip_average`); None keeps it.
        """
        update = {"pretrained": False, "weights": None}
        if flip_average is not None:
            update["flip_average"] = flip_average
        self._check_backbone()
        model = Embedder(**self.model_config.model_copy(update=update).model_dump())
        model.load_state_dict(self.model)
        return model.eval()

    def _check_backbone(self) -> None:
        """Refuse, naming its builder, a registered backbone this process has no builder for.

        Raises:
            UserError: the checkpoint's backbone is neither a timm model nor registered here.
        """
        name = self.model_config.backbone
        if self.backbone_builder is not None and backbone_builder(name) is None:
            raise UserError(
                f"this checkpoint's backbone {name!r} is built by {self.backbone_builder}, which is not registered "
                "here: install the package that declares it in the retrieval.backbones entry-point group, or "
                "import the module that registers it (retrieval.models.backbones) before loading"
            )

    def config(self, config_file: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
        """The config to use this checkpoint with: the run's, or `config_file`'s, with `--set` `overrides`.

        The model and the loss are the checkpoint's whatever `config_file` says: the weights and
        proxies were trained as they are. `overrides` of data, augment and train keys apply; of the
        model, only `model.flip_average` (an evaluation-time option) does.

        Raises:
            UserError: an override of a model or loss key (`TRAINED_KEYS`), naming it and saying what to do.
        """
        for override in overrides:
            _refuse_trained_key(override)
        if config_file is None:
            return config_with_overrides(_plain_copy(self.run_config), overrides)
        chosen, trained = load_config(config_file, overrides), config_from_dict(_plain_copy(self.run_config))
        flip_average = chosen.model.flip_average if _sets(overrides, "model.flip_average") else None
        model = (
            trained.model if flip_average is None else trained.model.model_copy(update={"flip_average": flip_average})
        )
        return chosen.model_copy(update={"model": model, "loss": trained.loss})

    def save(self, path: str | Path) -> None:
        """Write the checkpoint with its manifest to `path` atomically (temporary file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        manifest = CheckpointManifest(
            format=CHECKPOINT_FORMAT,
            version=CHECKPOINT_VERSION,
            toolkit_version=self.toolkit_version,
            embedding_dim=self.embedding_dim,
            model_config=self.model_config,
            checksum=state_checksum(self.model),
            backbone_builder=self.backbone_builder or builder_path(self.model_config.backbone),
        )
        payload = CheckpointFile(
            manifest=manifest,
            model=self.model,
            config=self.run_config,
            num_classes=self.num_classes,
            epoch=self.epoch,
            best_score=self.best_score,
            best_epoch=self.best_epoch,
            selected_weights=self.selected_weights,
            loss=self.loss,
            optimizer=self.optimizer,
            ema=self.ema,
            grad_scaler=self.grad_scaler,
            match_threshold=self.match_threshold,
        ).payload()
        payload["manifest"][PAYLOAD_CHECKSUM] = payload_checksum(payload)
        with atomic_write(path) as temporary:
            torch.save(payload, temporary)

    @classmethod
    def read(cls, path: str | Path) -> Checkpoint:
        """Read a checkpoint on the CPU; check its format, version, fields, weights and whole-file checksum.

        Raises:
            UserError: the file is missing, unreadable, not a retrieval checkpoint, newer than this
                toolkit, has a field missing or of the wrong type (`CheckpointFile`), or its weights or
                any other part do not match the manifest's checksums.
        """
        path = Path(path)
        raw = load_torch_file(
            path,
            missing_checkpoint(path),
            f"checkpoint {path}",
            "is it a retrieval checkpoint?",
        )
        manifest = raw.get("manifest") if isinstance(raw, dict) else None
        if not isinstance(manifest, dict) or manifest.get("format") != CHECKPOINT_FORMAT:
            raise UserError(f"{path} is not a retrieval checkpoint (no manifest); train one with `retrieval train`")
        stored = CheckpointFile.read(raw, path)
        if state_checksum(stored.model) != stored.manifest.checksum:
            raise UserError(f"{path} is corrupt: model weights do not match the manifest checksum")
        if stored.manifest.payload_checksum is not None and payload_checksum(raw) != stored.manifest.payload_checksum:
            raise UserError(
                f"{path} is corrupt: its optimizer state, proxies, counters or config do not match the manifest's "
                f"{PAYLOAD_CHECKSUM}; restore an intact copy of the file or train the run again"
            )
        return cls(
            model=stored.model,
            model_config=stored.manifest.model_settings,
            run_config=stored.config,
            num_classes=stored.num_classes,
            epoch=stored.epoch,
            best_score=stored.best_score,
            best_epoch=stored.best_epoch,
            loss=stored.loss,
            # Resuming needs the selection state too: files older than version 2 lack it.
            optimizer=stored.optimizer if "best_epoch" in stored.model_fields_set else None,
            toolkit_version=stored.manifest.toolkit_version,
            selected_weights=stored.selected_weights,
            ema=stored.ema,
            grad_scaler=stored.grad_scaler,
            match_threshold=stored.match_threshold,
            backbone_builder=stored.manifest.backbone_builder,
        )


def load_torch_file(path: Path, missing: str, what: str, hint: str) -> Any:
    """What `torch.save` wrote to `path`, loaded on the CPU as data only (`weights_only`: never code).

    Raises:
        UserError: `missing` when there is no file; "cannot read WHAT (ERROR TYPE); HINT" when torch cannot read it.
    """
    if not path.is_file():
        raise UserError(missing)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise UserError(f"cannot read {what} ({exc.__class__.__name__}); {hint}") from exc


def state_checksum(state: dict[str, Tensor]) -> str:
    """sha256 over the names and bytes of a state dict's tensors, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(_tensor_bytes(state[name]))
    return digest.hexdigest()


def payload_checksum(payload: dict[str, Any]) -> str:
    """sha256 over every part of a saved checkpoint dict but the manifest's own `payload_checksum` field.

    It hashes the dict as `torch.load` gave it, before `CheckpointFile` reads it: the bytes on disk, not the record.

    The dict as `torch.save` wrote it and `torch.load` returns it: nested dicts (in key order),
    lists and tuples (alike: both are sequences), tensors (dtype, shape and bytes, wherever they
    live) and scalars (type and `repr`, exact for floats). Each value is length-prefixed, so two
    different payloads never feed the hash the same bytes.
    """
    manifest = {key: value for key, value in payload.get("manifest", {}).items() if key != PAYLOAD_CHECKSUM}
    digest = hashlib.sha256()
    _hash_value(digest, {**payload, "manifest": manifest})
    return digest.hexdigest()


def _hash_value(digest: Any, value: Any) -> None:
    """Feed one value of a checkpoint dict, recursively, into `digest` (see `payload_checksum`)."""
    if isinstance(value, Tensor):
        digest.update(f"tensor:{value.dtype}:{tuple(value.shape)}:".encode())
        digest.update(_tensor_bytes(value))
    elif isinstance(value, dict):
        digest.update(f"dict:{len(value)}:".encode())
        for key in sorted(value, key=lambda key: (type(key).__name__, repr(key))):
            _hash_value(digest, key)
            _hash_value(digest, value[key])
    elif isinstance(value, list | tuple):
        digest.update(f"sequence:{len(value)}:".encode())
        for item in value:
            _hash_value(digest, item)
    else:
        text = repr(value)
        digest.update(f"{type(value).__name__}:{len(text)}:{text}".encode())


def _tensor_bytes(tensor: Tensor) -> bytes:
    """The bytes of a tensor's elements in row-major order, from any device."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _refuse_trained_key(override: str) -> None:
    """Refuse an override of what the trained weights fix (see `TRAINED_KEYS`), naming the key."""
    key = override.partition("=")[0].strip()
    section = key.partition(".")[0]
    if section in TRAINED_KEYS and key not in TRAINED_KEYS[section]:
        settable = ", ".join(allowed for keys in TRAINED_KEYS.values() for allowed in keys)
        raise UserError(
            f"--set {key} cannot apply to a trained checkpoint: its model and loss are the ones it was trained "
            f"with (of them, only {settable} can be set); train a run with it instead: retrieval train --set {key}=..."
        )


def _sets(overrides: Sequence[str], key: str) -> bool:
    """Whether one of `overrides` sets `key` (`section.name`)."""
    return any(override.partition("=")[0].strip() == key for override in overrides)


def _plain_copy(value: Any) -> Any:
    """A deep copy of nested dicts and lists (overrides edit the copy, never the checkpoint's own config)."""
    if isinstance(value, dict):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_copy(item) for item in value]
    return value
