"""`IndexBuildOptions`: one object for every build setting; keyword settings replace its fields."""

from __future__ import annotations

import pytest

from retrieval.errors import UserError
from retrieval.index import IndexBuildOptions, SearchIndex
from retrieval.inference.interface import ModelInfo


def test_keyword_settings_replace_the_fields_of_the_options_given(data) -> None:
    vectors, _ = data
    options = IndexBuildOptions(kind="ivf", model_info=ModelInfo(checkpoint_sha256="ab" * 32), progress=False)
    index = SearchIndex.build(vectors[:300], None, options, kind="flat")
    assert index.kind == "flat" and index.manifest.model.record() == {"checkpoint_sha256": "ab" * 32}
    assert options.kind == "ivf"  # the options given are left as they were


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "fast"}, "unknown index kind 'fast'"),
        ({"max_memory": "lots"}, "cannot read memory size 'lots'"),
        ({"database_augmentation": "kreciprocal"}, "kreciprocal re-ranks queries, not the stored vectors"),
    ],
)
def test_bad_options_are_refused_when_made(fields, message) -> None:
    with pytest.raises(UserError, match=message):
        IndexBuildOptions(**fields)
