"""The model record of an index manifest (`ModelInfo`): checked when read, written back with the keys it was given."""

from __future__ import annotations

import pytest

from retrieval.errors import UserError
from retrieval.inference.interface import ModelInfo


def test_a_record_round_trips_with_its_keys_and_those_of_other_versions():
    record = {"checkpoint": None, "checkpoint_sha256": "ab12", "model_config": {"backbone": "resnet10t"}, "new": 1}
    info = ModelInfo.read(record)
    assert info.model_settings == {"backbone": "resnet10t"} and info.identity == "ab12"
    assert info.record() == record


def test_the_export_wins_over_the_checkpoint_it_was_made_from():
    assert ModelInfo.read({"onnx_sha256": "cd34", "source_checkpoint_sha256": "ab12"}).identity == "cd34"
    assert ModelInfo.read({"checkpoint_sha256": "ab12"}).identity == "ab12" and ModelInfo().identity is None


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"checkpoint_sha256": 12}, "the index's model record.checkpoint_sha256 must be str or null, got 12"),
        ({"embedding_dim": "wide"}, "the index's model record.embedding_dim must be int or null, got 'wide'"),
        ({"model_config": [1]}, "the index's model record.model_config must be a mapping or null, got [1]"),
    ],
)
def test_a_damaged_record_is_one_line_naming_the_key(record, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        ModelInfo.read(record)
    assert "\n" not in str(caught.value) and str(caught.value).endswith("rebuild the index")
