"""`OnnxEncoder`: images to embeddings with an export (`model.onnx` + `preprocess.json`), onnxruntime and no torch.

It offers what `index build|add|query` and `serve` use of a checkpoint's `ImageEncoder` (the
`retrieval.inference.interface.Encoder` protocol): images are read by `retrieval.images.load_image`
(upright, transparency on white), preprocessed by `Preprocess` (numpy + Pillow, pixel for pixel the
PyTorch eval transform) and embedded by onnxruntime. Nothing it imports imports torch, timm or
torchvision, so a deployment needs only onnxruntime, numpy and Pillow (the `serve` extra).

Example:
    encoder = OnnxEncoder.from_export("exported/")            # checks the files against the manifest
    embeddings = encoder.embed_files(paths).embeddings         # (M, D) float32 unit vectors
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from retrieval.core.match_threshold import MatchThreshold
from retrieval.core.preprocess import Preprocess
from retrieval.errors import UserError
from retrieval.export.bundle import read_export
from retrieval.images import UnreadableImage, flatten_image, load_image
from retrieval.inference.interface import EmbeddedFiles, ModelInfo
from retrieval.runtime.heartbeat import with_progress

__all__ = ["OnnxEncoder", "load_onnx_session", "onnx_encoder_for_index"]


class OnnxEncoder:
    """An ONNX embedder in an onnxruntime session with its preprocessing; `(M, D)` float32 unit vectors out.

    Raises:
        UserError: onnxruntime cannot load the model, or it does not take the `(B, C, S, S)` float32
            images `preprocess` makes (channels, or a fixed height or width, differ) or give `(B, D)`.

    Args:
        model_path: an ONNX model taking `(B, C, S, S)` float32 images and giving `(B, D)` embeddings.
        preprocess: the eval transform the model was trained and measured with.
        info: what an index manifest records about the model (`from_export` fills it from the manifest).
        device: `auto` (CUDA when onnxruntime has it, else the CPU), `cpu`, `cuda` or `cuda:N`.
        threads: onnxruntime's intra-op threads (None: its default, every core).
    """

    def __init__(
        self,
        model_path: str | Path,
        preprocess: Preprocess,
        info: ModelInfo | None = None,
        device: str = "auto",
        threads: int | None = None,
    ) -> None:
        self.session = load_onnx_session(Path(model_path), device, threads)
        self.preprocess = preprocess
        self._info = info or ModelInfo()
        self._input = self.session.get_inputs()[0].name
        self._dim = _embedding_dim(self.session, Path(model_path), preprocess)
        self.match_threshold: MatchThreshold | None = None  # the source checkpoint's, from the export's manifest

    @classmethod
    def from_export(cls, directory: str | Path, device: str = "auto", threads: int | None = None) -> OnnxEncoder:
        """Load a `retrieval export` directory, its files checked against its manifest (`read_export`)."""
        files = read_export(directory)
        manifest = files.manifest
        info = ModelInfo(
            model_dir=str(files.directory),
            onnx_sha256=files.model_sha256,
            source_checkpoint_sha256=manifest.source_checkpoint_sha256,
            model_settings=manifest.model_settings,
            embedding_dim=manifest.embedding_dim,
            image_size=files.preprocess.image_size,
            transform=files.preprocess.to_dict(),
        )
        encoder = cls(files.model_path, files.preprocess, info, device, threads)
        if encoder.dim != manifest.embedding_dim:
            raise UserError(
                f"{files.model_path} gives {encoder.dim}-d embeddings, but manifest.json's embedding_dim is "
                f"{manifest.embedding_dim}; export the model again"
            )
        encoder.match_threshold = manifest.match_threshold
        return encoder

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return self._dim

    @property
    def model_sha256(self) -> str:
        """The sha256 of model.onnx (empty for a model not loaded by `from_export`)."""
        return self._info.onnx_sha256 or ""

    def info(self) -> ModelInfo:
        """What the index manifest records about the model that embedded it."""
        return self._info

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(M, D)` embeddings of already-decoded PIL images, in one batch."""
        return self.embed_inputs(self.preprocess.batch([flatten_image(image) for image in images]))

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """The size its preprocessing resizes a `width` x `height` image to, before the crop or pad."""
        return self.preprocess.resized_size(width, height)

    def embed_inputs(self, inputs: np.ndarray) -> np.ndarray:
        """`(B, C, S, S)` preprocessed float32 images -> `(B, D)` float32 embeddings."""
        if not len(inputs):
            return np.zeros((0, self.dim), dtype=np.float32)
        (embeddings,) = self.session.run(None, {self._input: np.ascontiguousarray(inputs, dtype=np.float32)})
        return np.asarray(embeddings, dtype=np.float32)

    def embed_files(
        self, paths: Sequence[str | Path], batch_size: int = 64, num_workers: int = 0, progress: bool = True
    ) -> EmbeddedFiles:
        """Embed image files in batches, skipping (and reporting) the ones that cannot be read.

        `num_workers` threads read and preprocess the images of a batch (Pillow decodes and resizes
        without holding the GIL); 0 reads them in this thread.
        """
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}")
        files = [Path(path) for path in paths]
        chunks, positions, failures = [], [], []
        with ThreadPoolExecutor(max(num_workers, 1)) as pool:
            starts = range(0, len(files), batch_size)
            for start in with_progress(starts, "embed", progress):
                batch = files[start : start + batch_size]
                read = list(pool.map(self._read, batch)) if num_workers else [self._read(path) for path in batch]
                good = [i for i, item in enumerate(read) if isinstance(item, np.ndarray)]
                failures += [(str(batch[i]), item) for i, item in enumerate(read) if isinstance(item, str)]
                positions += [start + i for i in good]
                chunks.append(self.embed_inputs(np.stack([read[i] for i in good]) if good else np.zeros((0,))))
        embeddings = np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)
        return EmbeddedFiles(embeddings, np.asarray(positions, dtype=np.int64), failures)

    def _read(self, path: Path) -> np.ndarray | str:
        """The model input of one image file, or why it cannot be read."""
        try:
            return self.preprocess(load_image(path))
        except UnreadableImage as exc:
            return exc.reason


def onnx_encoder_for_index(
    model_info: ModelInfo | Mapping[str, Any], model_dir: str | Path | None, device: str = "auto"
) -> OnnxEncoder:
    """The export an index was built with: its recorded directory, or `model_dir` if it holds the same model.onnx.

    `model_info` is the index manifest's `model` section (`OnnxEncoder.info()` when it was built).

    Raises:
        UserError: the index was built with a checkpoint, the export is missing or broken, or its
            model.onnx is not the one the index recorded.
    """
    info = ModelInfo.read(model_info)
    recorded = info.onnx_sha256 or ""
    if not recorded:
        raise UserError(
            "this index was not built with an export; query it with its checkpoint (--checkpoint CKPT or none), "
            "or rebuild it with --model DIR"
        )
    directory = Path(model_dir) if model_dir is not None else Path(info.model_dir or "")
    encoder = OnnxEncoder.from_export(directory, device=device)
    if encoder.model_sha256 != recorded:
        raise UserError(
            f"the model in {directory} is not the one this index was built with (model.onnx sha256 "
            f"{encoder.model_sha256[:12]}... != {recorded[:12]}...); pass the original with --model or rebuild "
            "the index"
        )
    return encoder


def load_onnx_session(model_path: Path, device: str = "auto", threads: int | None = None) -> Any:
    """An onnxruntime session of `model_path` on `device` (`auto`, `cpu`, `cuda`, `cuda:N`) with `threads` intra-op.

    Raises:
        UserError: onnxruntime is not installed, the device is unknown or absent, or the file cannot be loaded.
    """
    ort = _onnxruntime()
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    return _load_session(ort, model_path, options, _providers(device, ort))


def _onnxruntime() -> Any:
    """The onnxruntime module, or a one-line error saying how to install it (the `serve` and `onnx` extras have it)."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise UserError("onnxruntime is not installed; install it with: pip install 'retrieval[serve]'") from exc
    return onnxruntime


def _load_session(ort: Any, model_path: Path, options: Any, providers: list[Any]) -> Any:
    """An onnxruntime session of `model_path`; a file it cannot load (truncated, not ONNX, ...) is one line."""
    try:
        return ort.InferenceSession(str(model_path), options, providers=providers)
    except Exception as exc:  # onnxruntime's own errors (Fail, InvalidProtobuf, ...) derive from Exception alone
        reason = next(iter(str(exc).strip().splitlines()), "") or exc.__class__.__name__
        raise UserError(
            f"onnxruntime cannot load {model_path} ({reason}); if the file is damaged, export the model again"
        ) from exc


def _embedding_dim(session: Any, model_path: Path, preprocess: Preprocess) -> int:
    """D of a model taking the `(B, C, S, S)` float32 images `preprocess` makes and giving `(B, D)` embeddings.

    Dimensions the model leaves free (named, like the batch) take any size; fixed ones must match.

    Raises:
        UserError: another number of inputs or outputs, another input type or rank, other channels,
            height or width, or an output that is not `(B, D)` with a fixed D.
    """
    inputs, outputs = session.get_inputs(), session.get_outputs()
    made = (preprocess.in_chans, preprocess.image_size, preprocess.image_size)
    takes = tuple(inputs[0].shape) if len(inputs) == 1 else ()
    fixed = zip(takes[1:], made, strict=True) if len(takes) == 4 else None
    fits = fixed is not None and all(not isinstance(got, int) or got == want for got, want in fixed)
    if not fits or inputs[0].type != "tensor(float)":
        shape = ", ".join(map(str, made))
        raise UserError(
            f"{model_path} takes {_describe(inputs)}, but preprocess.json makes float32 (B, {shape}) images "
            f"({preprocess.channels}, image_size {preprocess.image_size}); export the model again"
        )
    gives = tuple(outputs[0].shape) if len(outputs) == 1 else ()
    if len(gives) != 2 or not isinstance(gives[1], int):
        raise UserError(f"{model_path} gives {_describe(outputs)}, not (B, D) embeddings; export the model again")
    return int(gives[1])


def _describe(arguments: Sequence[Any]) -> str:
    """onnxruntime's inputs or outputs as `tensor(float) (batch, 3, 32, 32)`, joined by commas."""
    return ", ".join(f"{argument.type} ({', '.join(map(str, argument.shape))})" for argument in arguments) or "nothing"


def _providers(device: str, ort: Any) -> list[str | tuple[str, dict[str, int]]]:
    """onnxruntime execution providers for `--device` (`auto` prefers CUDA when this onnxruntime build has it)."""
    has_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    if device == "cpu" or (device == "auto" and not has_cuda):
        return ["CPUExecutionProvider"]
    name, _, index = device.partition(":")
    if name not in ("auto", "cuda") or (index and not index.isdigit()) or (name == "auto" and index):
        raise UserError(f"unknown --device {device!r}; use auto, cpu, cuda or cuda:N")
    if not has_cuda:
        raise UserError(f"--device {device}: this onnxruntime has no CUDA; install onnxruntime-gpu or use --device cpu")
    return [("CUDAExecutionProvider", {"device_id": int(index or 0)}), "CPUExecutionProvider"]
