"""`index build --exclude FILE.csv`: listed images stay out of the index; a keep column spares each group's first."""

from __future__ import annotations

import pytest

from retrieval.cli.main import main

pytestmark = pytest.mark.slow  # embeds images with a model


def test_excluded_images_stay_out_and_each_duplicate_group_keeps_one(csv_dataset, tiny_checkpoint, tmp_path, capsys):
    images = csv_dataset.parent / "images"
    groups = tmp_path / "near_duplicates.csv"
    groups.write_text(
        "group,keep,path\n"
        f"0,1,{images / 'train_0_0.png'}\n0,0,{images / 'train_0_1.png'}\n0,0,{images / 'train_0_2.png'}\n"
    )
    out = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset), "--out", str(out)]
    assert main([*args, "--exclude", str(groups), "--num-workers", "0"]) == 0
    printed = capsys.readouterr().out
    assert "excluded: 2 image(s) listed in" in printed and "vectors: 26 of 26 images" in printed
    from retrieval.index import SearchIndex

    index = SearchIndex.load(out)
    paths = {row["path"] for row in index.metadata_for(index.ids)}
    assert str(images / "train_0_0.png") in paths and str(images / "train_0_1.png") not in paths


def test_excluding_every_image_is_a_one_line_error(csv_dataset, tiny_checkpoint, tmp_path, capsys):
    everything = tmp_path / "all.csv"
    everything.write_text("path\n" + "".join(f"{p}\n" for p in sorted((csv_dataset.parent / "images").iterdir())))
    out = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset), "--out", str(out)]
    assert main([*args, "--exclude", str(everything)]) == 2
    assert "lists every image to index" in capsys.readouterr().err
