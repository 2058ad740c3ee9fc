"""ImageEncoder: the checkpoint's model and eval transform, batched file embedding that skips bad files."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from retrieval.checkpoint import Checkpoint
from retrieval.config import config_from_dict
from retrieval.data import load_image
from retrieval.data.transforms import build_eval_transform
from retrieval.errors import UserError
from retrieval.export.index_encoder import encoder_for_index
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.models import Embedder
from tests.conftest import TINY_BACKBONE
from tests.data.exif_images import write_oriented_jpegs


@pytest.fixture(scope="module")
def images(tmp_path_factory, csv_dataset_factory):
    root = tmp_path_factory.mktemp("data")
    csv_dataset_factory(root, train_classes=2, test_classes=1, per_class=3)
    return sorted((root / "images").glob("*.png"))


def _reference(checkpoint_path, paths) -> np.ndarray:
    """One image at a time through a freshly built Embedder and the run's eval transform, as evaluation reads it."""
    checkpoint = Checkpoint.read(checkpoint_path)
    model = Embedder(**{**checkpoint.model_config.model_dump(), "pretrained": False, "weights": None}).eval()
    model.load_state_dict(checkpoint.model)
    config = config_from_dict(checkpoint.run_config)
    transform = build_eval_transform(config.augment, config.data.image_size, model.data_config(), config.model.in_chans)
    with torch.no_grad():
        return np.concatenate([model(transform(load_image(p))[None]).numpy() for p in paths])


def test_embed_files_matches_one_by_one_reference_and_skips_bad_files(tiny_checkpoint, images, tmp_path):
    text, truncated, missing = tmp_path / "text.png", tmp_path / "truncated.png", tmp_path / "missing.png"
    text.write_text("not an image")
    truncated.write_bytes(images[0].read_bytes()[:200])
    paths = [images[0], text, *images[1:3], truncated, missing, images[4]]
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    result = encoder.embed_files(paths, batch_size=3, progress=False)
    assert result.positions.tolist() == [0, 2, 3, 6]
    assert [path for path, _ in result.failures] == [str(text), str(truncated), str(missing)]
    reasons = [reason.split(":")[0] for _, reason in result.failures]
    assert reasons == ["UnidentifiedImageError", "OSError", "FileNotFoundError"]
    assert result.embeddings.dtype == np.float32 and result.embeddings.shape == (4, 16)
    expected = _reference(tiny_checkpoint, [paths[i] for i in result.positions])
    np.testing.assert_allclose(result.embeddings, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(result.embeddings, axis=1), 1.0, atol=1e-5)


def test_batch_size_workers_and_decoded_images_give_the_same_embeddings(tiny_checkpoint, images):
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    one = encoder.embed_files(images, batch_size=1, progress=False).embeddings
    many = encoder.embed_files(images, batch_size=4, num_workers=1, progress=False).embeddings
    decoded = encoder.embed_images([Image.open(p) for p in images])
    np.testing.assert_allclose(many, one, atol=1e-5)
    np.testing.assert_allclose(decoded, one, atol=1e-5)
    assert encoder.embed_images([]).shape == (0, 16)


def test_info_records_the_checkpoint_and_a_wrong_checkpoint_is_refused(tiny_checkpoint, other_checkpoint, tmp_path):
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    info = encoder.info().record()
    assert info["checkpoint_sha256"] == hashlib.sha256(tiny_checkpoint.read_bytes()).hexdigest()
    assert info["model_config"]["backbone"] == TINY_BACKBONE and info["embedding_dim"] == 16
    assert (
        info["image_size"] == 32
        and info["transform"]["resize_mode"] == "resize"
        and info["transform"]["channels"] == "RGB"
    )
    assert encoder_for_index(info, device="cpu").checkpoint_sha256 == info["checkpoint_sha256"]

    with pytest.raises(UserError, match="is not the one this index was built with"):
        encoder_for_index(info, checkpoint=other_checkpoint, device="cpu")
    with pytest.raises(UserError, match="checkpoint not found"):
        encoder_for_index({**info, "checkpoint": str(tmp_path / "moved.pt")}, device="cpu")


def test_a_flip_average_checkpoint_embeds_an_image_and_its_mirror_alike(
    tiny_checkpoint, checkpoint_factory, images, tmp_path
):
    """model.flip_average travels in the checkpoint's model config to every encoder (embed, index, serve)."""
    flipping = ImageEncoder.from_checkpoint(checkpoint_factory(tmp_path / "flip.pt", flip_average=True), device="cpu")
    plain = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    image = load_image(images[0])
    mirrored = [image, ImageOps.mirror(image)]
    np.testing.assert_allclose(*flipping.embed_images(mirrored), atol=1e-6)
    assert not np.allclose(*plain.embed_images(mirrored), atol=1e-3)
    assert flipping.info().model_settings["flip_average"] is True


def test_a_jpeg_stored_sideways_embeds_like_the_upright_image_from_a_file_and_decoded(tmp_path, tiny_checkpoint):
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    paths = write_oriented_jpegs(tmp_path)  # upright, sideways with EXIF orientation 6, sideways untagged
    embedded = encoder.embed_files(paths, batch_size=3, progress=False)
    with Image.open(paths[1]) as sideways:  # what `serve` hands the encoder: a decoded upload
        decoded = encoder.embed_images([sideways])[0]
    upright, tagged, untagged = embedded.embeddings
    assert float(upright @ tagged) > 0.9999 and float(upright @ decoded) > 0.9999
    assert float(upright @ untagged) < 0.999  # an untrained model, yet the pixels left sideways embed apart
