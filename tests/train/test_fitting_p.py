"""P x K batches on data with fewer classes than the default `data.p`: a P that fits, said in one line."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from retrieval.config import DataConfig, load_config
from retrieval.data import PKSampler
from retrieval.runtime.distributed import DistributedContext
from retrieval.train.sampling import fitting_p

TEN_CLASSES = np.repeat(np.arange(10), 50)  # 10 classes of 50 images, like the digits demo's training split


@pytest.mark.parametrize(
    ("labels", "k", "world_size", "largest"),
    [
        (TEN_CLASSES, 4, 1, 10),  # every class
        (np.r_[TEN_CLASSES, 10, 11, 12], 4, 1, 10),  # classes of one image form no pair
        (np.repeat(np.arange(10), 2), 4, 1, 5),  # 20 images fill one batch of 5 x 4
        (np.repeat(np.arange(10), 4), 4, 2, 5),  # per rank, each rank its own groups of distinct images
        (np.array([0, 0, 1]), 2, 1, 1),  # below 2: no P fits
    ],
)
def test_the_largest_p_is_one_the_sampler_accepts_and_one_more_is_not(labels, k, world_size, largest):
    assert PKSampler.largest_p(labels, k, world_size) == largest
    if largest >= 2:
        PKSampler(labels, largest, k, rank=0, world_size=world_size)
        with pytest.raises(ValueError):
            PKSampler(labels, largest + 1, k, rank=0, world_size=world_size)


def test_the_default_p_is_fitted_and_said_in_one_line(caplog):
    with caplog.at_level(logging.INFO, logger="retrieval"):
        fitted = fitting_p(DataConfig(), TEN_CLASSES, DistributedContext())
    assert fitted.p == 10
    assert caplog.messages == [
        "data.p=10 classes per batch: the default 32 does not fit the training data (10 classes with at least 2 "
        "images, data.k=4); set data.p to choose"
    ]


def test_a_p_the_user_set_is_kept_even_the_default_value(caplog):
    for given in (DataConfig(p=32), load_config(None, ["data.p=32"]).data, DataConfig(p=20)):
        assert fitting_p(given, TEN_CLASSES, DistributedContext()) is given
    assert load_config(None, []).data.p == 32 and fitting_p(DataConfig(p=8), TEN_CLASSES, DistributedContext()).p == 8
