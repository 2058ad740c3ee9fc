"""`ExportManifest`: the typed fields of an export directory's `manifest.json`, checked when it is read.

The manifest is what serving trusts about the model: its sha256 table, the checkpoint it came from,
its embedding size and the stored match threshold. A hand edit that breaks a field (a string where
the dimension belongs, a threshold without a score) is refused naming the field, rather than failing
later inside onnxruntime or a search. Keys this version does not name are kept. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue

from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError
from retrieval.index.manifest import Sha256
from retrieval.validation import Record, ValidationError, at_least, user_error

__all__ = ["EXPORT_FORMAT", "ExportManifest", "Parity", "Quantization", "TensorSpec"]

EXPORT_FORMAT = 1  # version of the export directory layout and manifest
_KEPT = ConfigDict(extra="allow", strict=True, populate_by_name=True)  # JSON types exactly; later keys kept


class TensorSpec(Record):
    """The model's input or output: its name in the ONNX graph and its shape (`batch` for the batch axis)."""

    model_config = _KEPT

    name: str
    shape: list[str | int]
    l2_normalized: bool | None = None  # the output's rows are unit vectors


class Parity(Record):
    """How far onnxruntime's path is from PyTorch's on the same images: largest absolute differences."""

    model_config = _KEPT

    embedding_max_abs_diff: float
    preprocess_max_abs_diff: float
    images: int
    batch_sizes: list[int] | None = None
    inputs: str | None = None  # what the images were


class Quantization(Record):
    """An int8 model's record: how it was calibrated, both models' metrics on a split, and the drop (float - int8)."""

    model_config = _KEPT

    method: str
    format: str
    weights: str | None = None
    activations: str | None = None
    calibration_images: int
    calibration_split: str
    tolerance: float
    split: str
    float_metrics: dict[str, float] = Field(validation_alias="float", serialization_alias="float")
    int8: dict[str, float]
    drop: dict[str, float]
    embedding_cosine: dict[str, float]  # min and mean over the split's images
    nearest_neighbor_agreement: float


class ExportManifest(Record):
    """What `retrieval export` records about the model it wrote (`manifest.json`); JSON types, read strictly."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)

    format: int
    kind: Literal["onnx"]  # the only model file this version runs
    created: str  # ISO 8601
    source_checkpoint: str
    source_checkpoint_sha256: Sha256
    backbone: str
    embedding_dim: Annotated[int, at_least(1)]
    flip_average: bool
    # The checkpoint's `ModelConfig` as JSON: that record's own, validated by `retrieval.config` where it is used.
    model_settings: dict[str, JsonValue] = Field(validation_alias="model_config", serialization_alias="model_config")
    opset: int
    input: TensorSpec
    output: TensorSpec
    parity: Parity  # of the float model against PyTorch
    match_threshold: MatchThreshold | None  # `evaluate --save-threshold`'s, carried to indexes built from it
    versions: dict[str, str]
    files: dict[str, Sha256]  # sha256 of model.onnx and preprocess.json
    quantization: Quantization | None = None  # an int8 model's calibration and quality drop

    @classmethod
    def read(cls, manifest: Any, path: Path) -> ExportManifest:
        """The typed manifest read from `path`; its format is checked first, so an older layout says so.

        Raises:
            UserError: the format is not the one this version reads, or a field is missing or has the
                wrong type, naming it.
        """
        found = manifest.get("format") if isinstance(manifest, Mapping) else None
        if found != EXPORT_FORMAT:
            raise UserError(
                f"{path} has format {found!r}, this version reads {EXPORT_FORMAT}; "
                "export the model again with this version of retrieval"
            )
        try:
            return cls.model_validate(dict(manifest))
        except ValidationError as exc:
            raise user_error(cls, exc, str(path), "the manifest is damaged: export the model again") from None

    def record(self) -> dict[str, JsonValue]:
        """JSON-ready, with the manifest's own keys."""
        return self.model_dump(by_alias=True, exclude_unset=True)
