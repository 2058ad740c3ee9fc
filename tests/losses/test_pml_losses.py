"""pytorch-metric-learning losses from the config: the first-class entries equal PML's own loss and miner, the
`pml.<ClassName>` adapter checks its kwargs and miner, its weights train as proxies, and its memory equals PML's."""

from __future__ import annotations

import copy

import pytest
import torch
from pytorch_metric_learning import losses, miners
from torch import Tensor, nn

from retrieval.config import TrainConfig, load_config
from retrieval.errors import UserError
from retrieval.losses import LOSSES, CrossBatchMemory, build_loss, registry_name
from retrieval.sweep.grid import parse_grid, plan_cells
from retrieval.train.builders import build_optimizer

CLASSES, DIM = 5, 8


def _batch(seed: int = 0, per_class: int = 4) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(CLASSES * per_class, DIM, generator=generator)
    return embeddings, torch.arange(CLASSES).repeat_interleave(per_class)


def _value_and_grad(loss: nn.Module, embeddings: Tensor, labels: Tensor, miner: nn.Module | None = None):
    x = embeddings.clone().requires_grad_(True)
    value = loss(x, labels, miner(x, labels)) if miner is not None else loss(x, labels)
    value.backward()
    return value.detach(), x.grad


# Each first-class entry with non-default parameters, and the PML loss and miner it must equal.
REFERENCES = {
    "multi_similarity": (
        {"alpha": 3.0, "beta": 40.0, "base": 0.4, "epsilon": 0.2},
        lambda: (losses.MultiSimilarityLoss(alpha=3.0, beta=40.0, base=0.4), miners.MultiSimilarityMiner(epsilon=0.2)),
    ),
    "supcon": ({"temperature": 0.2}, lambda: (losses.SupConLoss(temperature=0.2), None)),
    "contrastive": (
        {"pos_margin": 0.1, "neg_margin": 0.9, "miner_pos_margin": 0.3, "miner_neg_margin": 0.7},
        lambda: (
            losses.ContrastiveLoss(pos_margin=0.1, neg_margin=0.9),
            miners.PairMarginMiner(pos_margin=0.3, neg_margin=0.7),
        ),
    ),
    "soft_triple": (
        {"centers_per_class": 3, "la": 10.0, "gamma": 0.2, "margin": 0.05},
        lambda: (losses.SoftTripleLoss(CLASSES, DIM, centers_per_class=3, la=10.0, gamma=0.2, margin=0.05), None),
    ),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_first_class_entry_equals_pml_loss_and_miner_value_and_gradient(name: str) -> None:
    params, reference = REFERENCES[name]
    ours = build_loss(name, params, num_classes=CLASSES, embedding_dim=DIM)
    pml_loss, pml_miner = reference()
    pml_loss.load_state_dict(ours.loss.state_dict())  # SoftTriple's centres: the same starting point
    for seed in range(3):
        embeddings, labels = _batch(seed)
        value, grad = _value_and_grad(ours, embeddings, labels)
        expected, expected_grad = _value_and_grad(pml_loss, embeddings, labels, pml_miner)
        assert value > 0
        torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)


def test_first_class_defaults_are_the_papers() -> None:
    ms = build_loss("multi_similarity", {}, CLASSES, DIM)
    assert (ms.loss.alpha, ms.loss.beta, ms.loss.base, ms.miner.epsilon) == (2.0, 50.0, 0.5, 0.1)
    assert build_loss("supcon", {}, CLASSES, DIM).loss.temperature == 0.1
    contrastive = build_loss("contrastive", {}, CLASSES, DIM)
    assert (contrastive.loss.pos_margin, contrastive.loss.neg_margin) == (0.0, 1.0)
    assert (contrastive.miner.pos_margin, contrastive.miner.neg_margin) == (0.2, 0.8)
    soft = build_loss("soft_triple", {}, CLASSES, DIM).loss
    assert (soft.centers_per_class, soft.la, 1 / soft.gamma, soft.margin) == (10, 20.0, pytest.approx(0.1), 0.01)


def test_supcon_equals_a_naive_loop() -> None:
    """-1/|P(i)| sum_p log(exp(s_ip / t) / sum_{a != i} exp(s_ia / t)), averaged over the anchors."""
    embeddings, labels = _batch(per_class=3)
    t = 0.1
    unit = nn.functional.normalize(embeddings.double(), dim=1)
    terms = []
    for i in range(len(unit)):
        others = [a for a in range(len(unit)) if a != i]
        denominator = sum(torch.exp(unit[i] @ unit[a] / t) for a in others)
        positives = [p for p in others if labels[p] == labels[i]]
        terms.append(
            -sum(torch.log(torch.exp(unit[i] @ unit[p] / t) / denominator) for p in positives) / len(positives)
        )
    expected = torch.stack(terms).mean()
    value = build_loss("supcon", {"temperature": t}, CLASSES, DIM)(embeddings, labels)
    torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=1e-6)


def test_the_pml_loss_runs_in_float32_under_autocast_and_keeps_its_weights_float32() -> None:
    embeddings, labels = _batch()
    for name in ("soft_triple", "multi_similarity"):
        loss = build_loss(name, {}, CLASSES, DIM)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            value = loss(embeddings.bfloat16().requires_grad_(True), labels)
        assert value.dtype == torch.float32 and torch.isfinite(value)
        assert all(param.dtype == torch.float32 for param in loss.parameters())


def test_loss_weights_join_the_proxy_group_without_weight_decay() -> None:
    model = nn.Linear(4, DIM)
    train = TrainConfig(lr=1e-3, proxy_lr_mult=50.0, weight_decay=0.01)
    for name, params in [
        ("soft_triple", {}),
        ("pml.ProxyNCALoss", {"kwargs": {}}),
        ("pml.ArcFaceLoss", {"kwargs": {}}),
    ]:
        loss = build_loss(name, params, CLASSES, DIM)
        optimizer = build_optimizer(model, loss, train)
        group = optimizer.param_groups[-1]
        assert group["lr"] == pytest.approx(5e-2) and group["weight_decay"] == 0.0
        assert {id(p) for p in group["params"]} == {id(p) for p in loss.parameters()} and group["params"]


@pytest.mark.parametrize(
    ("name", "pair", "proxy_shape"),
    [
        ("pml.MultiSimilarityLoss", True, None),
        ("pml.SmoothAPLoss", True, None),
        ("pml.NormalizedSoftmaxLoss", False, (CLASSES, DIM)),  # PML's W is (D, K): proxies are its rows
        ("pml.ProxyNCALoss", False, (CLASSES, DIM)),
        ("pml.SoftTripleLoss", False, None),  # several centres a class: no one proxy each
    ],
)
def test_the_adapter_declares_pk_batches_by_pml_hierarchy_and_exposes_one_weight_matrix_as_proxies(
    name: str, pair: bool, proxy_shape: tuple[int, int] | None
) -> None:
    loss = build_loss(name, {"kwargs": {}}, CLASSES, DIM)
    assert loss.needs_pk_batches is pair and registry_name(loss) == name
    assert (None if loss.proxies is None else tuple(loss.proxies.shape)) == proxy_shape
    if loss.proxies is not None:
        assert any(loss.proxies.data_ptr() == param.data_ptr() for param in loss.parameters())


def test_the_adapter_with_a_miner_equals_pml_and_counts_the_mined_pairs() -> None:
    params = {"kwargs": {"margin": 0.1}, "miner": {"name": "pml.TripletMarginMiner", "kwargs": {"margin": 0.3}}}
    loss = build_loss("pml.TripletMarginLoss", params, CLASSES, DIM)
    embeddings, labels = _batch()
    value, grad = _value_and_grad(loss, embeddings, labels)
    miner = miners.TripletMarginMiner(margin=0.3)
    expected, expected_grad = _value_and_grad(losses.TripletMarginLoss(margin=0.1), embeddings, labels, miner)
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert int(loss.last_stats["triplets"]) == len(miner(embeddings, labels)[0]) > 0


@pytest.mark.parametrize("name", ["multi_similarity", "pml.ContrastiveLoss"])
def test_the_cross_batch_memory_equals_pml_step_after_step(name: str) -> None:
    params = {"memory_size": 48} | ({"kwargs": {}} if name.startswith("pml.") else {})
    ours = build_loss(name, params, CLASSES, DIM)
    assert isinstance(ours, CrossBatchMemory)
    inner = copy.deepcopy(ours.loss)
    pml = losses.CrossBatchMemory(inner.loss, DIM, memory_size=48, miner=inner.miner)
    for step in range(5):  # 20 a batch: the memory of 48 wraps in the third step
        embeddings, labels = _batch(step)
        torch.testing.assert_close(ours(embeddings, labels), pml(embeddings, labels), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        ({"name": "pml.Nope"}, r"unknown loss.name 'pml.Nope'; pytorch-metric-learning offers: pml.AngularLoss, "),
        ({"name": "nope"}, r"valid names: .*multi_similarity.*, or any pytorch-metric-learning loss as pml"),
        (
            {"name": "pml.MultiSimilarityLoss", "kwargs": {"alpah": 2}},
            r"unknown loss.kwargs alpah for MultiSimilarityLoss; its arguments: alpha=2, beta=50, base=0.5",
        ),
        ({"name": "pml.RankedListLoss"}, r"RankedListLoss needs loss.kwargs margin, Tn; its arguments: margin="),
        ({"name": "pml.SupConLoss", "miner": "pml.Nope"}, r"unknown loss.miner 'pml.Nope'; .*pml.PairMarginMiner"),
        (
            {"name": "pml.SupConLoss", "miner": {"name": "pml.PairMarginMiner", "kwargs": {"x": 1}}},
            r"unknown loss.miner kwargs x for PairMarginMiner; its arguments: pos_margin=0.2, neg_margin=0.8",
        ),
        ({"name": "pml.SupConLoss", "kwargs": [1]}, r"loss.kwargs must be dict, got '\[1\]'"),
        ({"name": "pml.SmoothAPLoss", "memory_size": 64}, r"cross-batch memory does not take pml.SmoothAPLoss"),
        ({"name": "pml.SoftTripleLoss", "memory_size": 64}, r"unknown config key loss.memory_size"),
        ({"name": "pml.CosFaceLoss", "alpha": 1}, r"unknown config key loss.alpha .*valid parameters: kwargs, miner"),
        ({"name": "multi_similarity", "alpha": -1.0}, r"alpha and beta must be > 0"),
    ],
)
def test_unknown_names_and_bad_kwargs_are_one_line_errors_listing_what_exists(loss: dict, message: str) -> None:
    with pytest.raises(UserError, match=message) as error:
        config = load_config(None, [f"loss.name={loss.pop('name')}", *(f"loss.{k}={v}" for k, v in loss.items())])
        build_loss(config.loss.name, config.loss.params, CLASSES, DIM)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["loss.name=pml.ContrastiveLoss", "loss.kwargs.pos_margin=abc"],
            "loss.kwargs.pos_margin of ContrastiveLoss must be a finite number (its default is 0), got 'abc'; "
            "fix it in the config or with --set loss.kwargs.pos_margin=...",
        ),
        (
            ["loss.name=pml.TripletMarginLoss", "loss.miner={name: pml.TripletMarginMiner, kwargs: {margin: .nan}}"],
            "loss.miner.kwargs.margin of TripletMarginMiner must be a finite number (its default is 0.2), got nan; "
            "fix it in the config",
        ),
        (
            ["loss.name=pml.TripletMarginLoss", "loss.kwargs.margin=.inf"],
            "margin of TripletMarginLoss must be a finite",
        ),
        (["loss.name=pml.TripletMarginLoss", "loss.kwargs.swap=1"], "swap of TripletMarginLoss must be true or false"),
        (["loss.name=circle", "loss.gamma=.nan"], "loss.gamma must be a finite number, got '.nan'"),
    ],
)
def test_kwargs_of_another_type_than_the_default_or_not_finite_are_refused_by_the_config(
    overrides: list[str], message: str
) -> None:
    """PML's constructors take any value: a text margin would fail in the first step, a NaN one mine nothing."""
    with pytest.raises(UserError) as error:
        load_config(None, overrides)
    assert message in str(error.value)


def test_a_number_given_as_text_reaches_pml_as_the_number() -> None:
    config = load_config(None, ["loss.name=pml.ContrastiveLoss", "loss.kwargs.pos_margin=1e-3"])  # YAML 1.1: a str
    assert config.loss.params["kwargs"] == {"pos_margin": 0.001}


def test_a_bare_pml_class_name_and_dotted_kwargs_from_the_command_line() -> None:
    config = load_config(None, ["loss.name=MultiSimilarityLoss", "loss.kwargs.alpha=3", "loss.kwargs.base=0.25"])
    assert config.loss.name == "pml.MultiSimilarityLoss"
    assert config.loss.params == {"kwargs": {"alpha": 3, "base": 0.25}, "miner": None, "memory_size": 0}
    mapping = load_config(None, ["loss.name=pml.SoftTripleLoss", "loss.kwargs={la: 10}", "loss.kwargs.margin=0.02"])
    assert mapping.loss.params == {"kwargs": {"la": 10, "margin": 0.02}, "miner": None}
    assert "circle" in LOSSES and load_config(None, ["loss.name=circle"]).loss.name == "circle"  # ours, not PML's


def test_a_sweep_varies_one_pml_argument_and_the_first_class_names(tmp_path) -> None:
    config = tmp_path / "ms.yaml"
    config.write_text("loss: {name: pml.MultiSimilarityLoss, kwargs: {beta: 40}, miner: pml.MultiSimilarityMiner}\n")
    cells = plan_cells(str(config), [], parse_grid(["loss.kwargs.alpha=1,2.5"]), None, tmp_path / "sweep")
    loaded = [load_config(config, cell.overrides).loss.params for cell in cells]
    assert [params["kwargs"] for params in loaded] == [{"beta": 40, "alpha": 1}, {"beta": 40, "alpha": 2.5}]
    assert all(params["miner"] == "pml.MultiSimilarityMiner" for params in loaded)
    names = plan_cells(None, [], parse_grid(["loss.name=multi_similarity,supcon,soft_triple"]), None, tmp_path / "s")
    assert [load_config(None, cell.overrides).loss.name for cell in names] == [
        "multi_similarity",
        "supcon",
        "soft_triple",
    ]
