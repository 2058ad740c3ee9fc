"""A learned re-ranker's ONNX pair model with onnxruntime and no torch, and its use on an index's search.

`OnnxPairScorer` runs `describe.onnx` (images -> descriptors, through `OnnxEncoder` and the checkpoint's
preprocessing) and `head.onnx` (pairs of descriptors and their cosine -> logits). `IndexReranker` re-scores
a search of an index (`index query --reranker`, `serve --reranker`): the query images are described with
their embedding, and each result's image is read from the index metadata's `path` and described once (a
bounded cache keeps the descriptors by id and path). The blend is `retrieval.core.learned_rerank.Blend`,
the one evaluation chose and scored. Torch-free, like `retrieval.export.onnx_encoder`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from retrieval.core.learned_rerank import DESCRIBE_FILE, HEAD_FILE, PREPROCESS_FILE, Blend, read_reranker
from retrieval.core.preprocess import Preprocess
from retrieval.core.rerank import DatabaseAugmentation, Gallery
from retrieval.errors import UserError
from retrieval.export.onnx_encoder import OnnxEncoder, load_onnx_session
from retrieval.inference.interface import ModelInfo

__all__ = ["IndexReranker", "OnnxPairScorer", "reranker_for_index"]

_CACHED_DESCRIPTORS = 100_000  # result images described and kept (a descriptor is P float32: 1 KB at P = 256)

PathsOf = Callable[[np.ndarray], Sequence[Any]]  # ids -> their metadata `path` values (None: no image)


class OnnxPairScorer:
    """The pair model of a re-ranker directory in onnxruntime: descriptors of images, probabilities of pairs.

    Args:
        directory: holds `describe.onnx` and `head.onnx`.
        preprocess: the checkpoint's eval transform (`preprocess.json`).
        device: `auto`, `cpu`, `cuda` or `cuda:N`.
        threads: onnxruntime's intra-op threads (None: its default).
    """

    def __init__(
        self, directory: Path, preprocess: Preprocess, device: str = "auto", threads: int | None = None
    ) -> None:
        self.describer = OnnxEncoder(directory / DESCRIBE_FILE, preprocess, device=device, threads=threads)
        self.head = load_onnx_session(directory / HEAD_FILE, device, threads)

    @property
    def width(self) -> int:
        """P, the descriptors' width."""
        return self.describer.dim

    def describe_inputs(self, inputs: np.ndarray) -> np.ndarray:
        """`(B, C, S, S)` preprocessed images -> `(B, P)` descriptors."""
        return self.describer.embed_inputs(inputs)

    def describe_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(B, P)` descriptors of decoded images."""
        return self.describer.embed_images(images)

    def describe_files(self, paths: Sequence[str | Path]) -> np.ndarray:
        """`(B, P)` descriptors of image files.

        Raises:
            UserError: a file cannot be read (the re-ranker needs every image it re-scores).
        """
        described = self.describer.embed_files(paths, progress=False)
        if described.failures:
            path, reason = described.failures[0]
            raise UserError(f"the re-ranker cannot read the image {path} ({reason}); restore it or query without it")
        return described.embeddings

    def probabilities(self, queries: np.ndarray, results: np.ndarray, cosines: np.ndarray) -> np.ndarray:
        """`(M,)` float64 probabilities that each pair matches, from `(M, P)` descriptors and `(M,)` cosines."""
        if not len(queries):
            return np.zeros(0)
        feeds = {
            "queries": np.ascontiguousarray(queries, dtype=np.float32),
            "results": np.ascontiguousarray(results, dtype=np.float32),
            "cosines": np.ascontiguousarray(cosines, dtype=np.float32),
        }
        (logits,) = self.head.run(None, feeds)
        return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


class IndexReranker:
    """A learned re-ranker of an index's searches: the blend, with descriptors of queries and of result images."""

    def __init__(
        self,
        scorer: OnnxPairScorer,
        blend: Blend,
        checkpoint_sha256: str,
        augmentation: DatabaseAugmentation | None = None,
        cache_size: int = _CACHED_DESCRIPTORS,
    ) -> None:
        self.scorer, self.blend, self.cache_size = scorer, blend, cache_size
        self.checkpoint_sha256 = checkpoint_sha256  # of the checkpoint it belongs to
        self.augmentation = augmentation  # the index's augmentation it was checked against (None: plain vectors)
        self._cache: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()

    def describe_item(self, item: int, path: Any) -> np.ndarray:
        """`(1, P)` descriptor of an indexed item's image (a search by id: the item is the query).

        Raises:
            UserError: the item has no image path, or its image cannot be read.
        """
        return self._described(np.array([item]), lambda _: [path])

    def search(
        self, gallery: Gallery, queries: np.ndarray, descriptors: np.ndarray, k: int, paths_of: PathsOf
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` blended scores and ids of queries with embeddings `(n, D)` and descriptors `(n, P)`.

        Args:
            gallery: the index as searched (under a filter).
            queries: the query images' embeddings.
            descriptors: the query images' descriptors (`OnnxPairScorer.describe_*`).
            k: results per query.
            paths_of: the image file of each result id (the index metadata's `path`).
        """

        def probabilities(ids: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            found = ids >= 0
            results = self._described(ids[found], paths_of)
            rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)[found]
            chances = np.zeros(ids.shape)
            chances[found] = self.scorer.probabilities(descriptors[rows], results, cosines[found])
            return chances

        return self.blend.search(gallery, queries, k, probabilities)

    def _described(self, ids: np.ndarray, paths_of: PathsOf) -> np.ndarray:
        """`(M, P)` descriptors of result ids `ids`, read and described where the cache lacks them."""
        paths = [_image_path(item, path) for item, path in zip(ids.tolist(), paths_of(ids), strict=True)]
        keys = list(zip(ids.tolist(), paths, strict=True))
        missing = list(dict.fromkeys(key for key in keys if key not in self._cache))
        if missing:
            described = self.scorer.describe_files([path for _, path in missing])
            self._cache.update(zip(missing, described, strict=True))
        for key in keys:
            self._cache.move_to_end(key)
        out = np.stack([self._cache[key] for key in keys]) if keys else np.zeros((0, self.scorer.width), np.float32)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out


def _image_path(item: int, path: Any) -> str:
    if not path:
        raise UserError(f"item {item} has no image path in the index metadata; the re-ranker needs its image")
    return str(path)


def reranker_for_index(
    directory: str | Path,
    model_info: ModelInfo,
    augmentation: DatabaseAugmentation | None,
    device: str = "auto",
    threads: int | None = None,
) -> IndexReranker:
    """The re-ranker in `directory` for an index whose manifest's model section is `model_info` and whose stored
    vectors are augmented by `augmentation` (`stored_augmentation` of its build's spec; None: plain).

    Raises:
        UserError: the directory is not a checked re-ranker, it belongs to another checkpoint than the one the
            index was embedded with (directly, or through an export of it), or its blend was chosen on other
            results than the index gives (`RerankerManifest.check_index`).
    """
    files = read_reranker(directory)
    sha256 = model_info.trained_checkpoint
    if not sha256:
        raise UserError("this index records no checkpoint, so no re-ranker can be checked against it")
    files.manifest.belongs_to(sha256, "the checkpoint this index was built with")
    files.manifest.check_index(augmentation)
    scorer = OnnxPairScorer(files.directory, Preprocess.read(files.path(PREPROCESS_FILE)), device, threads)
    return IndexReranker(scorer, files.manifest.blend, sha256, augmentation)
