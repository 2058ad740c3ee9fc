"""`retrieval.export.index_add`: images added to an index as a library call, with the model the index records."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_add import IndexAddRequest, add_to_index
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex

pytestmark = pytest.mark.slow  # embeds images with a model


def test_added_images_take_the_next_ids_and_are_found_by_their_own_vector(csv_dataset, tiny_checkpoint, tmp_path):
    index = tmp_path / "index"
    build_index(IndexBuildRequest(index, EncoderChoice(checkpoint=tiny_checkpoint), csv=csv_dataset, kind="flat"))
    before = SearchIndex.load(index).ntotal
    new = tmp_path / "new" / "zebra"
    new.mkdir(parents=True)
    for i, colour in enumerate([(250, 250, 250), (5, 5, 5)]):
        Image.new("RGB", (40, 40), colour).save(new / f"{i}.png")

    report = add_to_index(IndexAddRequest(index, images=new.parent))  # the model the index records

    assert report.ids.tolist() == [before, before + 1] and report.stored == before + 2
    after = SearchIndex.load(index)
    rows = after.metadata_for(report.ids)
    assert [row["label"] for row in rows] == ["zebra", "zebra"]
    _, found = after.search(np.stack([after.reconstruct(int(i)) for i in report.ids]), k=1)
    assert found[:, 0].tolist() == report.ids.tolist()


def test_another_checkpoint_than_the_index_records_is_refused(csv_dataset, tiny_checkpoint, other_checkpoint, tmp_path):
    index = tmp_path / "index"
    build_index(IndexBuildRequest(index, EncoderChoice(checkpoint=tiny_checkpoint), csv=csv_dataset, kind="flat"))
    before = SearchIndex.load(index).ntotal
    with pytest.raises(UserError, match="checkpoint"):
        add_to_index(IndexAddRequest(index, csv=csv_dataset, checkpoint=other_checkpoint))
    assert SearchIndex.load(index).ntotal == before  # nothing added
