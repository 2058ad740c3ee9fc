"""The long-tail ablation configs: each loads, builds its loss and sampler, and differs from the plain row only
in its ablated keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from retrieval.config import config_to_dict, load_config
from retrieval.losses import LOSSES, build_loss

ABLATION = Path(__file__).resolve().parent.parent / "configs" / "ablation"
ROWS = {
    "plain": {},
    "class_weighted": {("loss", "class_weights"): "effective_number", ("loss", "beta"): 0.999},
    "oversampled": {("data", "sampler"): "balanced"},
    "focal": {("loss", "name"): "focal_proxy", ("loss", "gamma"): 2.0},
}


def flat(raw: dict) -> dict:
    return {(section, key): value for section, values in raw.items() for key, value in values.items()}


@pytest.mark.parametrize("row", ROWS)
def test_ablation_row_differs_from_plain_only_in_its_keys(row: str) -> None:
    plain = flat(yaml.safe_load((ABLATION / "fmnist_lt100_plain.yaml").read_text()))
    ours = flat(yaml.safe_load((ABLATION / f"fmnist_lt100_{row}.yaml").read_text()))
    changed = {key: value for key, value in ours.items() if plain.get(key, object()) != value}
    assert changed == ROWS[row]
    assert plain.keys() <= ours.keys()
    if ROWS[row].get(("loss", "name"), "proxy_nca") not in LOSSES:
        pytest.skip("focal_proxy is not registered on this branch")
    config = load_config(ABLATION / f"fmnist_lt100_{row}.yaml")
    counts = np.array([5400, 54])
    loss = build_loss(config.loss.name, config.loss.params, 2, config.model.embedding_dim, class_counts=counts)
    weighted = row == "class_weighted"
    assert (getattr(loss, "class_weights", None) is not None) == weighted
    assert config_to_dict(config)["data"]["sampler"] == ("balanced" if row == "oversampled" else "random")
