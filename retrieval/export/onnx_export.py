"""`export_checkpoint`: a `retrieval train` checkpoint -> an export directory that onnxruntime runs without torch.

The directory holds `model.onnx` (the `Embedder` in eval mode, up to the L2-normalized embedding,
`model.flip_average` included, with a dynamic batch axis), `preprocess.json` (the run's eval
transform as data, `Preprocess`) and `manifest.json` (format, source checkpoint and its sha256,
opset, embedding dimension, backbone, the sha256 of the other two files, and the parity measured
here). Everything is made and checked in a scratch directory, then each file is copied in
atomically and the manifest last (`retrieval.export.bundle`), so a refused export writes nothing.
With `--quantize NAME`, model.onnx is that quantizer's model (`retrieval.export.quantizers`; `int8`: onnxruntime's).

Exporter: `torch.onnx.export(..., dynamo=True)` (torch.export + onnxscript), the one PyTorch
maintains: the TorchScript exporter is deprecated since torch 2.9 and the fallback to it was
removed in 2.11. It exports timm ResNets at opset 18 with a dynamic batch axis, and
onnxruntime then matches eager PyTorch to about 1e-7. A model it cannot convert (an op without
an ONNX translation, or data-dependent control flow torch.export cannot trace) is refused with
one line naming the op.

Parity: a few random-noise images of different sizes and aspect ratios go through both paths
(the torch eval transform + eager PyTorch, and `Preprocess` + onnxruntime), one at a time and as
one batch; the manifest records the largest difference of the model inputs and of the
embeddings, and an export whose embeddings differ by more than `PARITY_TOLERANCE` is refused.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import cast

import numpy as np
import torch
from PIL import Image
from torch import nn

from retrieval import __version__
from retrieval.checkpoint import Checkpoint
from retrieval.core.preprocess import Preprocess
from retrieval.errors import UserError
from retrieval.export.bundle import MANIFEST_FILE, MODEL_FILE, PREPROCESS_FILE
from retrieval.export.manifest import EXPORT_FORMAT, ExportManifest, Parity
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.quantizers import QUANTIZERS, QuantizeRequest
from retrieval.inference.forward import FLOAT32, embed_batch
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.runtime.files import atomic_write, file_sha256, write_text

__all__ = ["DEFAULT_OPSET", "PARITY_TOLERANCE", "check_onnx_packages", "export_checkpoint", "export_onnx"]

DEFAULT_OPSET = 18  # read by onnxruntime >= 1.14, TensorRT 8.6+, OpenVINO 2023+
PARITY_TOLERANCE = 1e-4  # largest max-abs embedding difference onnxruntime vs PyTorch an export may have
INPUT_NAME, OUTPUT_NAME = "images", "embeddings"
_ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the `[onnx]` extra: the exporter's and the parity check's
# Parity images: (width, height) of random-noise images, squares and both orientations of odd aspect ratios.
_PARITY_SIZES = ((37, 53), (64, 48), (20, 20), (90, 31), (48, 64))


def export_checkpoint(
    checkpoint_path: str | Path,
    out_dir: str | Path,
    opset: int = DEFAULT_OPSET,
    quantize: QuantizeRequest | None = None,
) -> ExportManifest:
    """Export a checkpoint to `out_dir` (created if needed) and return the manifest written there.

    The files are made and checked in a scratch directory first, so a refused export writes
    nothing to `out_dir`; then each is copied in atomically, the manifest last. With `quantize`,
    model.onnx is the model of quantizer `quantize.method` (`retrieval.export.quantizers`) and the
    manifest's `quantization` records its calibration and its validation metrics beside the float model's.

    Raises:
        UserError: the checkpoint cannot be read, the model cannot be exported (the op is named),
            `out_dir` cannot be written, onnxruntime's embeddings differ from PyTorch's by more
            than `PARITY_TOLERANCE`, or the quantized model drops more than `quantize.tolerance`.
    """
    source, out = Path(checkpoint_path), Path(out_dir)
    check_onnx_packages()
    if not source.is_file():
        raise UserError(f"checkpoint not found: {source}; pass a run's checkpoints/best.pt with --checkpoint")
    sha256 = file_sha256(source)
    checkpoint = Checkpoint.read(source)
    encoder = ImageEncoder.from_loaded(checkpoint, source, device="cpu", sha256=sha256)
    preprocess = encoder.transform_record
    with tempfile.TemporaryDirectory(prefix="retrieval-export-") as scratch:
        staged = Path(scratch)
        export_onnx(encoder.model, staged / MODEL_FILE, preprocess.in_chans, preprocess.image_size, opset)
        write_text(staged / PREPROCESS_FILE, json.dumps(preprocess.to_dict(), indent=2) + "\n")
        parity = _measure_parity(encoder, OnnxEncoder(staged / MODEL_FILE, preprocess, device="cpu"))
        if parity.embedding_max_abs_diff > PARITY_TOLERANCE:
            raise UserError(
                f"onnxruntime's embeddings differ from PyTorch's by {parity.embedding_max_abs_diff:.2e} "
                f"(> {PARITY_TOLERANCE:g}); nothing was written to {out}: try another --opset"
            )
        quantization = None
        if quantize is not None:
            quantized_path = staged / "quantized.onnx"
            quantizer = QUANTIZERS.get(quantize.method)
            quantization = quantizer(staged / MODEL_FILE, quantized_path, checkpoint, preprocess, quantize)
            quantized_path.replace(staged / MODEL_FILE)
        manifest = _manifest(source, sha256, encoder, preprocess, opset, parity, staged)
        if quantization is not None:
            manifest.quantization = quantization
        _publish(staged, out, manifest)
    return manifest


def check_onnx_packages() -> None:
    """Refuse, in one line naming them, to export without the `[onnx]` extra's packages.

    Raises:
        UserError: onnx, onnxscript or onnxruntime is not installed.
    """
    missing = [name for name in _ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"ONNX export needs {', '.join(missing)}; install them with: pip install 'retrieval[onnx]'")


def _manifest(
    source: Path,
    sha256: str,
    encoder: ImageEncoder,
    preprocess: Preprocess,
    opset: int,
    parity: Parity,
    staged: Path,
) -> ExportManifest:
    """manifest.json of the export whose model.onnx and preprocess.json are in `staged` (as `read_export` checks it)."""
    config = encoder.model_config
    manifest = {
        "format": EXPORT_FORMAT,
        "kind": "onnx",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source_checkpoint": str(source.resolve()),
        "source_checkpoint_sha256": sha256,
        "backbone": config.backbone,
        "embedding_dim": encoder.dim,
        "flip_average": config.flip_average,
        "model_config": config.model_dump(),
        "opset": opset,
        "input": {"name": INPUT_NAME, "shape": ["batch", preprocess.in_chans, *(preprocess.image_size,) * 2]},
        "output": {"name": OUTPUT_NAME, "shape": ["batch", encoder.dim], "l2_normalized": True},
        "parity": parity.model_dump(),  # of the float model: an int8 model's difference is in `quantization`
        # `evaluate --save-threshold`'s, carried to indexes built from it
        "match_threshold": None if encoder.match_threshold is None else encoder.match_threshold.to_dict(),
        "versions": {
            "retrieval": __version__,
            "torch": torch.__version__,
            "onnxruntime": importlib.metadata.version("onnxruntime"),
        },
        "files": {name: file_sha256(staged / name) for name in (MODEL_FILE, PREPROCESS_FILE)},
    }
    return ExportManifest.model_validate(manifest)


def _publish(staged: Path, out: Path, manifest: ExportManifest) -> None:
    """Copy model.onnx and preprocess.json from `staged` into `out` atomically, then write the manifest."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in (MODEL_FILE, PREPROCESS_FILE):
            with atomic_write(out / name) as temporary:
                shutil.copyfile(staged / name, temporary)
        write_text(out / MANIFEST_FILE, json.dumps(manifest.record(), indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write the export to {out}: {exc.strerror or exc}; choose a writable --out") from exc


def export_onnx(model: nn.Module, path: str | Path, in_chans: int, image_size: int, opset: int = DEFAULT_OPSET) -> None:
    """Write `model` (in eval mode) to the ONNX file `path`: `(batch, in_chans, S, S)` images in, its output out.

    Raises:
        UserError: the exporter cannot convert the model; the message names the op (or what torch.export
            could not trace).
    """
    sample = torch.rand(2, in_chans, image_size, image_size)  # batch 2: a batch of 1 would be specialized
    try:
        program = torch.onnx.export(
            model.eval(),
            (sample,),
            dynamo=True,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
    except torch.onnx.OnnxExporterError as exc:
        raise UserError(
            f"cannot export {type(model).__name__} to ONNX: {untraceable_reason(exc)}; choose a backbone made "
            "of standard ops, or embed with the checkpoint (--checkpoint) instead"
        ) from exc
    with atomic_write(path) as temporary:
        cast(torch.onnx.ONNXProgram, program).save(temporary, external_data=False)


def untraceable_reason(exc: BaseException) -> str:
    """Why the exporter failed, in a few words: the op without an ONNX translation, or torch.export's complaint.

    Example:
        >>> untraceable_reason(RuntimeError("No ONNX function found for <OpOverload(op='aten.cummax', ...)>"))
        'op aten.cummax has no ONNX translation'
    """
    chain = [exc]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) is not None and cause not in chain:
        chain.append(cause)
    for error in chain:
        found = re.search(r"op='([\w.]+)'", str(error)) or re.search(r"\b((?:aten|prims)\.\w+)", str(error))
        if found:
            return f"op {found[1]} has no ONNX translation"
    innermost = chain[-1]
    first_line = next((line.strip() for line in str(innermost).splitlines() if line.strip()), "")
    return f"torch.export cannot trace it ({type(innermost).__name__}: {first_line[:200]})"


def _measure_parity(encoder: ImageEncoder, exported: OnnxEncoder) -> Parity:
    """Largest differences of model inputs and embeddings between the PyTorch and the exported path."""
    rng = np.random.default_rng(0)
    images = [
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)) for width, height in _PARITY_SIZES
    ]
    torch_inputs = torch.stack([encoder.preprocess(image) for image in images])
    onnx_inputs = exported.preprocess.batch(images)
    reference = embed_batch(encoder.model, torch_inputs, torch.device("cpu"), FLOAT32).numpy()
    one_by_one = np.concatenate([exported.embed_images([image]) for image in images])
    batched = exported.embed_images(images)
    return Parity(
        embedding_max_abs_diff=float(max(np.abs(one_by_one - reference).max(), np.abs(batched - reference).max())),
        preprocess_max_abs_diff=float(np.abs(onnx_inputs - torch_inputs.numpy()).max()),
        images=len(images),
        batch_sizes=[1, len(images)],
        inputs="random-noise RGB images of several sizes, through each path's own preprocessing",
    )
