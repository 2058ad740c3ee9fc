"""The pair model as two ONNX graphs, `describe.onnx` and `head.onnx`, checked against PyTorch.

The describer takes the checkpoint's preprocessed images like an export's `model.onnx` (and is exported the
same way, `retrieval.export.onnx_export.export_onnx`), so `OnnxEncoder` runs it; the head takes
`(M, P)` query and result descriptors and `(M,)` cosines, all with a dynamic first axis. Parity: random
images through the PyTorch describer and head and through onnxruntime; the largest difference of the
probabilities is recorded and one above `PARITY_TOLERANCE` refuses the export.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import cast

import numpy as np
import torch

from retrieval.core.learned_rerank import DESCRIBE_FILE, HEAD_FILE
from retrieval.core.preprocess import Preprocess
from retrieval.errors import UserError
from retrieval.export.onnx_export import DEFAULT_OPSET, export_onnx, untraceable_reason
from retrieval.export.reranker_onnx import OnnxPairScorer
from retrieval.models.pair_model import PairHead, PairModel
from retrieval.runtime.files import atomic_write

__all__ = ["PARITY_TOLERANCE", "export_pair_model"]

PARITY_TOLERANCE = 1e-4  # largest difference of a probability between onnxruntime and PyTorch
_PARITY_IMAGES = 6


def export_pair_model(model: PairModel, directory: Path, preprocess: Preprocess) -> dict[str, float]:
    """Write `describe.onnx` and `head.onnx` of `model` (on the CPU) into `directory`; the parity measured.

    `directory` must already hold `preprocess.json`.

    Raises:
        UserError: the exporter cannot convert the model, or onnxruntime differs from PyTorch by more than
            `PARITY_TOLERANCE`.
    """
    model = model.cpu().eval()
    export_onnx(model.describe, directory / DESCRIBE_FILE, preprocess.in_chans, preprocess.image_size)
    _export_head(model.head, model.width, directory / HEAD_FILE)
    parity = _parity(model, OnnxPairScorer(directory, preprocess, device="cpu"), preprocess)
    if parity["probability_max_abs_diff"] > PARITY_TOLERANCE:
        raise UserError(
            f"onnxruntime's pair probabilities differ from PyTorch's by {parity['probability_max_abs_diff']:.2e} "
            f"(> {PARITY_TOLERANCE:g}); the re-ranker was not written"
        )
    return parity


def _export_head(head: PairHead, width: int, path: Path) -> None:
    """`head.onnx`: `queries (M, P)`, `results (M, P)`, `cosines (M,)` -> `logits (M,)`."""
    pairs = torch.export.Dim("pairs")
    sample = (torch.rand(3, width), torch.rand(3, width), torch.rand(3))
    with warnings.catch_warnings():
        # the three inputs share their one dynamic axis, which the exporter remarks on when naming it
        warnings.filterwarnings("ignore", message=".*axis name", category=UserWarning)
        try:
            program = torch.onnx.export(
                head.eval(),
                sample,
                dynamo=True,
                opset_version=DEFAULT_OPSET,
                input_names=["queries", "results", "cosines"],
                output_names=["logits"],
                dynamic_shapes=({0: pairs}, {0: pairs}, {0: pairs}),
                verbose=False,
            )
        except torch.onnx.OnnxExporterError as exc:
            raise UserError(f"cannot export the re-ranker's head to ONNX: {untraceable_reason(exc)}") from exc
    with atomic_write(path) as temporary:
        cast(torch.onnx.ONNXProgram, program).save(temporary, external_data=False)


@torch.no_grad()
def _parity(model: PairModel, exported: OnnxPairScorer, preprocess: Preprocess) -> dict[str, float]:
    """Largest differences of descriptors and probabilities between PyTorch and onnxruntime, on random images."""
    rng = np.random.default_rng(0)
    size = (_PARITY_IMAGES, preprocess.in_chans, preprocess.image_size, preprocess.image_size)
    images = rng.standard_normal(size).astype(np.float32)
    described = model.describe(torch.from_numpy(images)).numpy()
    onnx_described = exported.describe_inputs(images)
    queries, results = (
        np.repeat(np.arange(_PARITY_IMAGES), _PARITY_IMAGES),
        np.tile(np.arange(_PARITY_IMAGES), _PARITY_IMAGES),
    )
    cosines = rng.uniform(-1, 1, len(queries)).astype(np.float32)
    logits = model.head(*(torch.from_numpy(described[rows]) for rows in (queries, results)), torch.from_numpy(cosines))
    reference = torch.sigmoid(logits).numpy().astype(np.float64)
    found = exported.probabilities(onnx_described[queries], onnx_described[results], cosines)
    return {
        "descriptor_max_abs_diff": float(np.abs(onnx_described - described).max()),
        "probability_max_abs_diff": float(np.abs(found - reference).max()),
        "pairs": float(len(queries)),
    }
