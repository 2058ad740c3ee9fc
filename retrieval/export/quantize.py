"""`quantize_int8`: an exported float model -> onnxruntime int8 (static, QDQ), kept only if retrieval holds up.

The built-in `int8` of the quantizer registry `retrieval.export.quantizers.QUANTIZERS`.

Method: `onnxruntime.quantization.quant_pre_process` (shape inference and graph optimization,
which folds each BatchNormalization into its Conv so the quantizer sees plain Convs), then
`quantize_static` in QDQ format with per-channel int8 weights and int8 activations whose ranges
are the min/max observed on calibration images. The head (the last Gemm or MatMul, a
negligible share of the compute) and the L2 normalization after it stay in float: an int8
embedding would round every score to about 1/127.

Calibration images: `calibration_images` images of the run's training split (after its
validation holdout), sampled with a fixed seed, through the run's eval transform (what
`preprocess.json` describes; the export's parity check measures the two agree), never the
augmented training crops: the ranges must be those of the inputs the deployed model sees.

Acceptance: the run's validation split (its test split when the run has none, recorded as such)
is embedded by both models through the evaluator's own path. A non-finite value (NaN, inf) in any
embedding of an image that was read refuses the export: `score_split` leaves NaN rows out as
unreadable images, so an int8 model that breaks on some inputs would otherwise be scored on the
rest and pass. Both are then scored by `score_split`; when Recall@1 or MAP@R drops by more than
`tolerance` (absolute), the export is refused. The record also holds the share of images whose
nearest neighbour the int8 model keeps (`nearest_neighbor_agreement`): class-level metrics can
hold while a tenth of the neighbours change, and a search user sees the neighbours.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import Dataset, Subset

from retrieval.checkpoint import Checkpoint
from retrieval.core.preprocess import Preprocess
from retrieval.data import EvalSplit, ImageLoader, build_data
from retrieval.errors import UserError
from retrieval.evaluate.evaluator import embed_dataset, score_split
from retrieval.export.manifest import Quantization
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.quantizers import QuantizeRequest
from retrieval.metrics import nearest_neighbor_agreement

if TYPE_CHECKING:
    from onnx import NodeProto

__all__ = ["quantize_int8", "write_int8_model"]

_METRICS = ("recall@1", "map@r")
_SAMPLE_SEED = 0  # calibration images: the same sample on every export of a run
_BATCH_SIZE = 32  # images per calibration and evaluation batch


def quantize_int8(
    float_path: Path, int8_path: Path, checkpoint: Checkpoint, preprocess: Preprocess, request: QuantizeRequest
) -> Quantization:
    """Write the int8 model of the float ONNX model `float_path` to `int8_path`; return the manifest's record.

    Returns:
        `{method, format, calibration_images, tolerance, split, float: {recall@1, map@r},
        int8: {...}, drop: {...}, embedding_cosine: {min, mean}, nearest_neighbor_agreement}`
        (drop: float minus int8).

    Raises:
        UserError: the run's data cannot be read (pass data.* keys in `request.overrides`), an
            embedding is not finite, or Recall@1 or MAP@R drops by more than `request.tolerance`.
    """
    model = checkpoint.embedder()
    config = checkpoint.config(overrides=request.overrides)
    data = build_data(config.data, model.data_config(), config.augment, checkpoint.model_config.in_chans)
    split_name, split = ("val", data.val) if data.val is not None else ("test", data.test)
    calibration = _calibration_set(data.train, split.dataset, request.calibration_images)
    batches = (images.numpy() for images, _ in ImageLoader(calibration, batch_size=_BATCH_SIZE))
    write_int8_model(float_path, int8_path, batches)
    float_encoder = OnnxEncoder(float_path, preprocess, device="cpu")
    int8_encoder = OnnxEncoder(int8_path, preprocess, device="cpu")
    float_embeddings = embed_dataset(_AsModule(float_encoder), split.dataset, _BATCH_SIZE, torch.device("cpu"))
    int8_embeddings = embed_dataset(_AsModule(int8_encoder), split.dataset, _BATCH_SIZE, torch.device("cpu"))
    _require_finite(float_embeddings, int8_embeddings, split_name)
    record = _record(float_embeddings, int8_embeddings, split, split_name, len(calibration), request.tolerance)
    failing = [name for name in _METRICS if record.drop[name] > request.tolerance]
    if failing:
        drops = ", ".join(f"{name} {record.float_metrics[name]:.4f} -> {record.int8[name]:.4f}" for name in failing)
        raise UserError(
            f"int8 quantization loses too much on the {split_name} split ({drops}; tolerance {request.tolerance:g}); "
            "nothing was written: export without --quantize, or raise --tolerance or --calibration-images"
        )
    return record


def _require_finite(float_embeddings: np.ndarray, int8_embeddings: np.ndarray, split_name: str) -> None:
    """Refuse the export when either model gives a non-finite value for an image that was read.

    Rows of images skipped under `data.on_bad_image: skip` are all NaN in both (the same loader
    skips them): those, and only those, are not the models' doing.

    Raises:
        UserError: naming the model and how many of the split's images it failed on.
    """
    skipped = np.isnan(float_embeddings).all(axis=1) & np.isnan(int8_embeddings).all(axis=1)
    for name, embeddings in (("int8", int8_embeddings), ("float", float_embeddings)):
        broken = int((~np.isfinite(embeddings[~skipped])).any(axis=1).sum())
        if broken:
            raise UserError(
                f"the {name} model gives non-finite (NaN or inf) embeddings for {broken} of {int((~skipped).sum())} "
                f"{split_name} images; nothing was written: export without --quantize, or with more "
                "--calibration-images (activation ranges that overflow)"
            )


def _record(
    float_embeddings: np.ndarray,
    int8_embeddings: np.ndarray,
    split: EvalSplit,
    split_name: str,
    calibration_images: int,
    tolerance: float,
) -> Quantization:
    """The manifest's `quantization` record: method, calibration, both models' metrics and the drop."""
    float_metrics, _ = score_split(float_embeddings, split)
    int8_metrics, _ = score_split(int8_embeddings, split)
    kept = ~np.isnan(float_embeddings).any(axis=1)
    cosine = np.sum(float_embeddings[kept] * int8_embeddings[kept], axis=1)
    return Quantization.model_validate(
        {
            "method": "onnxruntime quantize_static",
            "format": "QDQ",
            "weights": "int8, per channel",
            "activations": "int8, per tensor, min/max calibration",
            "calibration_images": calibration_images,
            "calibration_split": "train",
            "tolerance": tolerance,
            "split": split_name,
            "float": {name: float_metrics[name] for name in _METRICS},
            "int8": {name: int8_metrics[name] for name in _METRICS},
            "drop": {name: float_metrics[name] - int8_metrics[name] for name in _METRICS},
            "embedding_cosine": {"min": float(cosine.min()), "mean": float(cosine.mean())},
            "nearest_neighbor_agreement": nearest_neighbor_agreement(float_embeddings[kept], int8_embeddings[kept]),
        }
    )


def _calibration_set(train: Dataset, eval_dataset: Dataset, count: int) -> Subset[Any]:
    """`count` training images (all of them when fewer), sampled with a fixed seed, through the eval transform.

    The training dataset carries the augmenting train transform; a copy of it gets the eval
    split's transform (both dataset kinds keep it in `.transform`).
    """
    dataset = copy.copy(train)
    dataset.transform = eval_dataset.transform  # type: ignore[attr-defined]
    size = len(dataset)  # type: ignore[arg-type]
    chosen = np.sort(np.random.default_rng(_SAMPLE_SEED).permutation(size)[: min(count, size)])
    return Subset(dataset, chosen.tolist())


def write_int8_model(float_path: Path, int8_path: Path, calibration: Iterable[np.ndarray]) -> None:
    """Quantize the float ONNX embedder `float_path` to `int8_path` (the method in the module docstring).

    Args:
        float_path: an exported model taking `(B, C, S, S)` float32 images.
        int8_path: where the int8 model goes.
        calibration: `(B, C, S, S)` float32 batches of preprocessed images; their min/max set the activation ranges.
    """
    import onnx  # the optional [onnx] extra: imported here, so the exporter can say it is missing
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="retrieval-quantize-") as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        quant_pre_process(str(float_path), str(prepared), skip_symbolic_shape=True)
        graph = onnx.load(str(prepared), load_external_data=False).graph
        quantize_static(
            str(prepared),
            str(int8_path),
            _CalibrationReader(iter(calibration), graph.input[0].name),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=_head_nodes(list(graph.node)),
        )


class _CalibrationReader:
    """onnxruntime's `CalibrationDataReader`: the calibration batches as `{input: (B, C, S, S)}`."""

    def __init__(self, batches: Iterator[np.ndarray], input_name: str) -> None:
        self._batches = batches
        self._input = input_name

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next batch, or None after the last."""
        batch = next(self._batches, None)
        return None if batch is None else {self._input: np.ascontiguousarray(batch, dtype=np.float32)}


def _head_nodes(nodes: list[NodeProto]) -> list[str]:
    """The names of the head's nodes and of every node that depends on them (the L2 normalization).

    The head is the last Gemm/MatMul's weight; with `model.flip_average` each of the two passes
    has a Gemm of that weight, and both stay float.
    """
    matrices = [node for node in nodes if node.op_type in ("Gemm", "MatMul")]
    if not matrices:
        return []
    weight = matrices[-1].input[1]
    tainted: set[str] = set()
    names = []
    for node in nodes:  # ONNX graphs are topologically sorted
        if (node.op_type in ("Gemm", "MatMul") and node.input[1] == weight) or tainted.intersection(node.input):
            tainted.update(node.output)
            names.append(node.name)
    return names


class _AsModule(nn.Module):
    """An `OnnxEncoder` as a module, so the evaluator's own loop (skipped images included) embeds with it."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.embedding_dim = encoder.dim

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, S, S)` preprocessed images -> `(B, D)` embeddings from onnxruntime."""
        return torch.from_numpy(self.encoder.embed_inputs(images.numpy()))
