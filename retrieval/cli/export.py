"""`retrieval export`: a checkpoint as an export directory for inference runtimes (ONNX, run by onnxruntime).

    retrieval export --checkpoint CKPT --format onnx --out DIR [--opset 18]

DIR then holds `model.onnx`, `preprocess.json` and `manifest.json` (`retrieval.export.onnx_export`);
`index build|add|query --model DIR` and `serve` embed with it through onnxruntime, no torch needed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]

_FORMATS = ("onnx",)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="export a checkpoint for inference runtimes (ONNX + its preprocessing as JSON)",
        description="Write DIR/model.onnx (the embedder up to the L2-normalized embedding, dynamic batch axis), "
        "DIR/preprocess.json (the eval transform as data) and DIR/manifest.json (source checkpoint sha256, opset, "
        "the onnxruntime vs PyTorch difference measured here). A model the exporter cannot convert is refused, "
        "naming the op.",
    )
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT", help="a run's checkpoints/best.pt")
    parser.add_argument("--format", default="onnx", choices=_FORMATS, help="export format (default: onnx)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="export directory to write")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (default: 18)")


def run(args: argparse.Namespace) -> int:
    from retrieval.export.onnx_export import export_checkpoint  # torch.onnx loads only for this command

    manifest = export_checkpoint(args.checkpoint, args.out, opset=args.opset)
    parity = manifest["parity"]
    print(f"export: {args.out} (model.onnx, preprocess.json, manifest.json)")
    print(
        f"model: {manifest['backbone']}, {manifest['embedding_dim']}-d embeddings, "
        f"input {' x '.join(str(side) for side in manifest['input']['shape'])}, opset {manifest['opset']}"
    )
    print(
        f"parity onnxruntime vs PyTorch: max abs {parity['embedding_max_abs_diff']:.2e} (embeddings), "
        f"{parity['preprocess_max_abs_diff']:.2e} (preprocessed pixels), {parity['images']} images"
    )
    return 0
