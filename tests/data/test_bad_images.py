"""Missing, truncated and corrupt images: one clear error by default, or skipped, logged once and counted."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from retrieval.data import EvalSplit, ImageDataset, ImageLoader
from retrieval.errors import UserError
from retrieval.evaluate.evaluator import evaluate_model
from tests.conftest import TINY_BACKBONE
from tests.data.official_layouts import write_image
from tests.train.training import train


def _to_tensor(image):
    return torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1) / 255.0


def _images(tmp_path, damage):
    """Six 8x8 PNGs of three classes; the one at index 2 is damaged (`truncated`, `corrupt` or `missing`)."""
    paths = [write_image(tmp_path / f"{i}.png", i) for i in range(6)]
    if damage == "truncated":  # a real PNG cut in the middle of its pixel data
        paths[2].write_bytes(paths[2].read_bytes()[:60])
    elif damage == "corrupt":
        paths[2].write_bytes(b"\x89PNG\r\n\x1a\n not really")
    else:
        paths[2].unlink()
    return paths, np.array([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("damage", ["truncated", "corrupt", "missing"])
def test_by_default_an_unreadable_image_is_one_line_naming_it(tmp_path, workers, damage):
    paths, labels = _images(tmp_path, damage)
    loader = ImageLoader(ImageDataset(paths, labels, _to_tensor), batch_size=4, num_workers=workers)
    with pytest.raises(UserError) as caught:
        list(loader)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"cannot read image {paths[2]}: ") and "data.on_bad_image=skip" in message


@pytest.mark.parametrize("workers", [0, 1])
def test_skip_leaves_the_image_out_logs_it_once_and_counts_every_pass(tmp_path, capsys, workers):
    paths, labels = _images(tmp_path, "truncated")
    dataset = ImageDataset(paths, labels, _to_tensor, on_bad_image="skip")
    loader = ImageLoader(dataset, batch_size=4, num_workers=workers)
    for _ in range(2):  # two epochs
        batches = list(loader)
        images = torch.cat([images for images, _ in batches])
        expected = torch.stack([_to_tensor(Image.open(path).convert("RGB")) for path in paths[:2]])
        torch.testing.assert_close(images[:2], expected)
        assert torch.cat([labels for _, labels in batches]).tolist() == [0, 0, 1, 2, 2]
        assert loader.skipped_indices == [2]
    err = capsys.readouterr().err
    assert err.count(f"skipping unreadable image: cannot read image {paths[2]}") == 1
    assert err.count("skipped 1 unreadable image(s) in this pass") == 2


def test_a_batch_of_only_unreadable_images_is_not_yielded(tmp_path):
    paths, labels = _images(tmp_path, "missing")
    loader = ImageLoader(ImageDataset(paths, labels, _to_tensor, on_bad_image="skip"), batch_size=1)
    assert len(list(loader)) == 5 and loader.skipped_indices == [2]


class _MeanColour(torch.nn.Module):
    """A fixed embedder: the mean colour of the image (enough to tell the classes apart)."""

    def forward(self, images):
        return torch.nn.functional.normalize(images.mean(dim=(2, 3)), dim=1)


@pytest.mark.parametrize("flags", [False, True])
def test_evaluation_with_skip_scores_the_readable_images_only(tmp_path, flags):
    paths, labels = _images(tmp_path, "corrupt")
    query = np.array([True, False, True, True, False, True]) if flags else None
    gallery = np.array([False, True, True, False, True, True]) if flags else None
    split = EvalSplit(ImageDataset(paths, labels, _to_tensor, on_bad_image="skip"), labels, query, gallery)
    keep = [0, 1, 3, 4, 5]
    reference = EvalSplit(
        ImageDataset([paths[i] for i in keep], labels[keep], _to_tensor),
        labels[keep],
        None if query is None else query[keep],
        None if gallery is None else gallery[keep],
    )
    device = torch.device("cpu")
    assert evaluate_model(_MeanColour(), split, 4, device) == evaluate_model(_MeanColour(), reference, 4, device)


def _train_config(tmp_path, csv_dataset, workers, on_bad_image):
    """A one-epoch CPU run of a tiny resnet on the conftest CSV dataset."""
    config = {
        "model": {"backbone": TINY_BACKBONE, "embedding_dim": 8, "pretrained": False},
        "data": {
            "name": "csv",
            "path": str(csv_dataset),
            "image_size": 32,
            "batch_size": 8,
            "num_workers": workers,
            "on_bad_image": on_bad_image,
        },
        "loss": {"name": "proxy_nca"},
        "train": {"epochs": 1, "freeze_backbone_epochs": 0, "freeze_bn": False, "device": "cpu"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_training_skips_a_corrupt_and_a_missing_image_and_reports_the_count(tmp_path, csv_dataset, capsys):
    """End to end through the run `retrieval train` makes, loading in a worker process (workers=0 is covered above)."""
    images = csv_dataset.parent / "images"
    (images / "train_0_0.png").write_bytes((images / "train_0_0.png").read_bytes()[:50])
    (images / "test_100_1.png").unlink()
    config = _train_config(tmp_path, csv_dataset, 1, "skip")
    train(output_dir=tmp_path / "run", config=config)
    err = capsys.readouterr().err
    assert err.count("skipping unreadable image: cannot read image") == 2
    assert "train_0_0.png" in err and "test_100_1.png" in err
    assert "skipped 1 unreadable image(s) in this pass" in err  # the epoch, and the test set's evaluation


def test_a_sharded_evaluation_keeps_rows_aligned_around_a_skipped_image(tmp_path):
    # What one torchrun rank embeds: a contiguous Subset of the split, here items 1..4 with item 2 unreadable.
    from torch.utils.data import Subset

    from retrieval.inference.forward import embed_loader

    paths, labels = _images(tmp_path, "corrupt")
    shard = Subset(ImageDataset(paths, labels, _to_tensor, on_bad_image="skip"), range(1, 5))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    embeddings = embed_loader(model, ImageLoader(shard, batch_size=2), torch.device("cpu"), progress=False)
    assert embeddings.shape == (4, 4)
    assert np.isnan(embeddings[1]).all() and not np.isnan(embeddings[[0, 2, 3]]).any()
    with torch.no_grad():
        expected = model(torch.stack([_to_tensor(Image.open(paths[i]).convert("RGB")) for i in (1, 3, 4)]))
    # atol too: batches of 2 and of 3 sum in another order, and a value near 0 then differs by more than rtol of
    # itself (1 run in 5 failed on a loaded machine); a misaligned row would differ by the weights' whole scale.
    np.testing.assert_allclose(embeddings[[0, 2, 3]], expected.numpy(), rtol=1e-5, atol=1e-6)
