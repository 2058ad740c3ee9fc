"""Benchmark CPU latency of an exported embedder: onnxruntime vs PyTorch eager, same process, same threads.

With `--quantize int8`, a third column times onnxruntime on the int8 model `retrieval export
--quantize int8` writes (`quant_pre_process` + `quantize_static`, QDQ, per-channel weights, the
head and L2 normalization in float), calibrated here on 32 random inputs: timing does not depend
on the calibration, and the untrained model has no data whose retrieval quality to measure.

For each `BACKBONE:SIZE` (default resnet18 at 64 px and resnet50 at 224 px, pretrained=False,
128-d avgmax `Embedder`), exports the model with `retrieval.export.onnx_export.export_onnx` (what
`retrieval export` writes), then times the forward pass of a single image and of a batch of 32 on
random preprocessed inputs: PyTorch through `embed_batch` (eval mode, float32, no autograd) and
onnxruntime through `OnnxEncoder.embed_inputs`. Both run with `--threads` intra-op threads
(`torch.set_num_threads`, onnxruntime's `intra_op_num_threads`), in warm blocks (`_median_ms`);
the table reports the median of `--repeats` calls, the ratio PyTorch / each onnxruntime model
(above 1: onnxruntime is faster) and its largest embedding difference from PyTorch. On a machine busier than its cores,
PyTorch's OpenMP pool waits for descheduled threads at every barrier: read `uptime` first.

Preprocessing and image decoding are not timed: they are the same Pillow work on both paths.

Usage: nice -n 5 python tools/bench_onnx.py [--models resnet18:64,resnet50:224] [--threads 2] [--repeats 20]
           [--quantize int8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

from retrieval.core.preprocess import Preprocess
from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.onnx_export import export_onnx
from retrieval.export.quantize import write_int8_model
from retrieval.inference.forward import FLOAT32, embed_batch
from retrieval.models import Embedder

BATCH_SIZES = (1, 32)


def _median_ms(runs: tuple[Callable[[], object], ...], repeats: int, warmup: int) -> list[float]:
    """Median wall time of each of `runs` in milliseconds, timed in blocks, two rounds in opposite orders.

    Each block is `warmup` untimed calls then half the `repeats` timed ones, so a runtime's
    thread pool is warm and the other's idle threads have gone to sleep; the second round runs the
    runtimes in the opposite order, so a change in the machine's load favours neither.
    """
    times: list[list[float]] = [[] for _ in runs]
    for order in (range(len(runs)), reversed(range(len(runs)))):
        for which in order:
            for _ in range(warmup):
                runs[which]()
            for _ in range(max(repeats // 2, 1)):
                started = time.perf_counter()
                runs[which]()
                times[which].append(time.perf_counter() - started)
    return [1000 * statistics.median(spent) for spent in times]


def bench_model(backbone: str, size: int, args: argparse.Namespace, folder: Path) -> list[dict[str, str]]:
    """Rows of the table for one backbone at one input size: one per batch size."""
    torch.manual_seed(0)
    model = Embedder(backbone, embedding_dim=128, pretrained=False).eval()
    path = folder / f"{backbone}_{size}.onnx"
    export_onnx(model, path, in_chans=3, image_size=size)
    preprocess = Preprocess(size, "resize", "bicubic", "RGB", (0.5,) * 3, (0.5,) * 3)
    exported = OnnxEncoder(path, preprocess, device="cpu", threads=args.threads)
    runtimes = {"onnxruntime": exported}
    if args.quantize:
        int8_path = folder / f"{backbone}_{size}.int8.onnx"
        noise = np.random.default_rng(1).standard_normal((32, 3, size, size)).astype(np.float32)
        write_int8_model(path, int8_path, [noise])
        runtimes["int8 onnxruntime"] = OnnxEncoder(int8_path, preprocess, device="cpu", threads=args.threads)
    cpu = torch.device("cpu")
    rows = []
    for batch_size in BATCH_SIZES:
        inputs = np.random.default_rng(0).standard_normal((batch_size, 3, size, size)).astype(np.float32)
        tensor = torch.from_numpy(inputs)
        repeats = args.repeats if batch_size == 1 else max(args.repeats // 4, 3)
        reference = embed_batch(model, tensor, cpu, FLOAT32).numpy()
        runs = [partial(embed_batch, model, tensor, cpu, FLOAT32)]
        runs += [partial(encoder.embed_inputs, inputs) for encoder in runtimes.values()]
        torch_ms, *onnx_ms = _median_ms(tuple(runs), repeats, args.warmup)
        row = {"model": backbone, "input": f"{size} px", "batch": str(batch_size), "PyTorch ms": f"{torch_ms:.1f}"}
        for (name, encoder), spent in zip(runtimes.items(), onnx_ms, strict=True):
            difference = np.abs(reference - encoder.embed_inputs(inputs)).max()
            row |= {f"{name} ms": f"{spent:.1f}", f"ratio {name}": f"{torch_ms / spent:.2f}"}
            row[f"max abs diff {name}"] = f"{difference:.1e}"
        rows.append(row)
        print(" | ".join(rows[-1].values()), flush=True)
    return rows


def _table(rows: list[dict[str, str]]) -> str:
    """A Markdown table of `rows`."""
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row[key] for key in header) + " |" for row in rows]
    return "\n".join(lines)


def _models(text: str) -> list[tuple[str, int]]:
    """`resnet18:64,resnet50:224` -> [("resnet18", 64), ("resnet50", 224)]."""
    try:
        return [(name, int(size)) for name, size in (part.split(":") for part in text.split(",") if part)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--models takes BACKBONE:SIZE pairs like resnet18:64, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=_models, default=_models("resnet18:64,resnet50:224"), metavar="B:S,...")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of both runtimes (default: 2)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls of a single image (batch 32: a quarter)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default: 3)")
    parser.add_argument("--quantize", choices=("int8",), help="int8: also time the int8 model (a third column)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for backbone, size in args.models:
            rows += bench_model(backbone, size, args, Path(folder))
    print(f"\nCPU latency, median, {args.threads} threads (ratio: PyTorch / that runtime)\n")
    print(_table(rows))


if __name__ == "__main__":
    main()
