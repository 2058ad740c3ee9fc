"""`retrieval export`: a checkpoint as an export directory for inference runtimes (ONNX, run by onnxruntime).

    retrieval export --checkpoint CKPT --format onnx --out DIR [--opset 18]
                     [--quantize int8|NAME [--calibration-images 256] [--tolerance 0.01] [--set data.KEY=VALUE]]

DIR then holds `model.onnx`, `preprocess.json` and `manifest.json` (`retrieval.export.onnx_export`);
`index build|add|query --model DIR` and `serve` embed with it through onnxruntime, no torch needed.
With `--quantize int8`, model.onnx is onnxruntime's static int8 model, written only when its
validation Recall@1 and MAP@R stay within `--tolerance` of the float model's (`retrieval.export.quantize`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import existing_checkpoint, output_folder

if TYPE_CHECKING:
    from retrieval.export.manifest import Quantization

__all__ = ["add_parser", "run"]

_FORMATS = ("onnx",)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="export a checkpoint for inference runtimes (ONNX + its preprocessing as JSON)",
        description="Write DIR/model.onnx (the embedder up to the L2-normalized embedding, dynamic batch axis), "
        "DIR/preprocess.json (the eval transform as data) and DIR/manifest.json (source checkpoint sha256, opset, "
        "the onnxruntime vs PyTorch difference measured here). A model the exporter cannot convert is refused, "
        "naming the op. With --quantize int8, model.onnx is the int8 model, written only when the run's validation "
        "Recall@1 and MAP@R stay within --tolerance of the float model's (the manifest records both).",
    )
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT", help="a run's checkpoints/best.pt")
    parser.add_argument("--format", default="onnx", choices=_FORMATS, help="export format (default: onnx)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="export directory to write")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (default: 18)")
    parser.add_argument(
        "--quantize",
        metavar="NAME",
        help="int8: onnxruntime static quantization calibrated on training images, refused when validation "
        "Recall@1 or MAP@R drops by more than --tolerance (or a quantizer registered in retrieval.quantizers)",
    )
    parser.add_argument(
        "--calibration-images",
        type=int,
        metavar="N",
        help="--quantize: training images the activation ranges are measured on (default: 256)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        help="--quantize: largest absolute drop of validation Recall@1 and MAP@R accepted (default: 0.01)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="data.KEY=VALUE",
        help="--quantize: data.* keys over the checkpoint's data section, e.g. a dataset moved (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from retrieval.export.bundle import MODEL_FILE

    output_folder(args.out, "--out", MODEL_FILE)  # before torch loads: refused in a moment, not after the export

    from retrieval.errors import UserError
    from retrieval.export.quantizers import QuantizeRequest

    options = {"calibration_images": args.calibration_images, "tolerance": args.tolerance}
    given = {name: value for name, value in options.items() if value is not None}
    if args.quantize is None and (given or args.overrides):
        raise UserError("--calibration-images, --tolerance and --set apply to --quantize int8 only; add it")
    request = (
        None if args.quantize is None else QuantizeRequest(args.quantize, **given, overrides=tuple(args.overrides))
    )
    existing_checkpoint(args.checkpoint)
    from retrieval.export.onnx_export import export_checkpoint  # torch.onnx loads only for this command

    manifest = export_checkpoint(args.checkpoint, args.out, opset=args.opset, quantize=request)
    parity = manifest.parity
    print(f"export: {args.out} (model.onnx, preprocess.json, manifest.json)")
    print(
        f"model: {manifest.backbone}, {manifest.embedding_dim}-d embeddings, "
        f"input {' x '.join(str(side) for side in manifest.input.shape)}, opset {manifest.opset}"
    )
    print(
        f"parity onnxruntime vs PyTorch: max abs {parity.embedding_max_abs_diff:.2e} (embeddings), "
        f"{parity.preprocess_max_abs_diff:.2e} (preprocessed pixels), {parity.images} images"
    )
    if manifest.quantization is not None:
        print(_quantization_line(args.quantize, manifest.quantization))
    return 0


def _quantization_line(method: str, record: Quantization) -> str:
    """`int8: recall@1 0.9123 (float 0.9150), map@r ..., nearest neighbour kept for 0.9100 of the images on the val
    split, 256 calibration images`."""
    int8, float_ = record.int8, record.float_metrics
    scores = ", ".join(f"{name} {int8[name]:.4f} (float {float_[name]:.4f})" for name in record.drop)
    kept = f", nearest neighbour kept for {record.nearest_neighbor_agreement:.4f} of the images"
    return f"{method}: {scores}{kept} on the {record.split} split, {record.calibration_images} calibration images"
