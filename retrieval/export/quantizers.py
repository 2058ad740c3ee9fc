"""The registry of `export --quantize` methods and what a quantization is asked for, torch-free.

A quantizer is called `quantizer(float_path, out_path, checkpoint, preprocess, request)`: it writes the
quantized ONNX model of the float export `float_path` to `out_path` and returns the manifest's
`retrieval.export.manifest.Quantization` record, or raises `UserError` to refuse the export (nothing is
written then). The built-in `int8` (`retrieval.export.quantize.quantize_int8`) is imported when it runs;
the command line reads the names from here without torch. A new quantizer is one module with
`@QUANTIZERS.register("name")`, or a `retrieval.quantizers` entry point (`docs/extending.md`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from retrieval.errors import UserError
from retrieval.registry import Registry

if TYPE_CHECKING:
    from retrieval.checkpoint import Checkpoint
    from retrieval.core.preprocess import Preprocess
    from retrieval.export.manifest import Quantization

__all__ = ["DEFAULT_CALIBRATION_IMAGES", "DEFAULT_TOLERANCE", "QUANTIZERS", "QuantizeRequest", "Quantizer"]

DEFAULT_CALIBRATION_IMAGES = 256  # enough for stable min/max ranges; calibration time grows linearly with it
# Absolute drop of Recall@1 and of MAP@R allowed: a few standard deviations of Recall@1 between training
# seeds of one recipe (docs/benchmarks.md), so an accepted int8 model differs no more than another seed would.
DEFAULT_TOLERANCE = 0.01


class Quantizer(Protocol):
    """Writes the quantized model of an export's float model and returns its manifest record."""

    def __call__(
        self, float_path: Path, out_path: Path, checkpoint: Checkpoint, preprocess: Preprocess, request: QuantizeRequest
    ) -> Quantization: ...


QUANTIZERS: Registry[Quantizer] = Registry(
    "--quantize",
    "retrieval.quantizers",
    {"int8": "retrieval.export.quantize:quantize_int8"},
    expected="a quantizer (float_path, out_path, checkpoint, preprocess, request) -> Quantization",
)


@dataclass(frozen=True)
class QuantizeRequest:
    """What `export --quantize NAME` asked for."""

    method: str = "int8"  # a name of QUANTIZERS
    calibration_images: int = DEFAULT_CALIBRATION_IMAGES
    tolerance: float = DEFAULT_TOLERANCE  # largest absolute drop of Recall@1 and MAP@R accepted
    overrides: tuple[str, ...] = ()  # data.* keys over the checkpoint's data section (a dataset moved)

    def __post_init__(self) -> None:
        """Refuse what cannot be asked for, before anything is exported (and before torch loads).

        Raises:
            UserError: an unknown method, fewer than one calibration image, a tolerance that is not a
                finite number, or `overrides` of other sections than data.
        """
        QUANTIZERS.check(self.method)
        if self.calibration_images < 1:
            raise UserError(f"--calibration-images must be >= 1, got {self.calibration_images}")
        if not math.isfinite(self.tolerance):
            raise UserError(f"--tolerance must be a number like 0.01 (an absolute drop), got {self.tolerance}")
        other = [item for item in self.overrides if not item.strip().startswith("data.")]
        if other:
            raise UserError(f"export --set takes data.* keys only (the model is the checkpoint's), got {other[0]!r}")
