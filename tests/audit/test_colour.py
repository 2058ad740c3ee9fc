"""Leak pairs that differ only in colour: a drawing in blue and the same in green is said to be recoloured."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.colour import colour_differs
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.report import write_report
from retrieval.config import AuditConfig
from tests.audit.conftest import NO_HASH

_INKS = {"blue": (30, 70, 200), "green": (40, 160, 60), "red": (200, 40, 40), "orange": (230, 140, 30)}


def _drawing(seed: int, ink: tuple[int, int, int]) -> Image.Image:
    """An icon: random strokes and boxes in one ink on white paper, the same for one seed whatever the ink."""
    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (64, 64), "white")
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x0, y0, x1, y1 = (int(value) for value in rng.integers(4, 60, size=4))
        draw.rectangle((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)), outline=ink, width=3)
        draw.line((x0, y1, x1, y0), fill=ink, width=2)
    return image


def _jpeg(image: Image.Image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=70)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def test_a_recoloured_drawing_is_a_leak_that_says_it_differs_only_in_colour_and_true_copies_do_not(tmp_path):
    """Issue 49 #2: a blue document icon and a green one of another name were reported as plain copies."""
    images: list[tuple[str, Image.Image, str]] = []  # (name, image, split)
    for seed in range(8):
        images.append((f"train{seed}.png", _drawing(seed, _INKS["blue"]), "train"))
    recoloured = {  # the same drawing in another ink: another item
        "green0.png": _drawing(0, _INKS["green"]),
        "red1.png": _drawing(1, _INKS["red"]),
        "orange2.png": _drawing(2, _INKS["orange"]),
    }
    copies = {  # copies of the blue drawing itself
        "jpeg3.png": _jpeg(_drawing(3, _INKS["blue"])),
        "darker4.png": ImageEnhance.Brightness(_drawing(4, _INKS["blue"])).enhance(0.8),
        "resized5.png": _drawing(5, _INKS["blue"]).resize((40, 40)).resize((64, 64)),
    }
    images += [(name, image, "test") for name, image in {**recoloured, **copies}.items()]
    paths = []
    for name, image, _ in images:
        paths.append(tmp_path / name)
        image.save(paths[-1])
    splits = [split for _, _, split in images]
    catalogue = Catalogue(paths, None, splits)
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(len(paths), 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    findings = audit_embeddings(embeddings, catalogue, AuditConfig(k=3, checks=NO_HASH), False)
    assert findings.leaks is not None and findings.recoloured is not None
    leaked = {paths[row].name for row in np.flatnonzero(findings.leaks.leaked)}
    assert leaked == {*recoloured, *copies}  # the grey copy check matches all six drawings
    said_recoloured = {paths[row].name for row in np.flatnonzero(findings.recoloured)}
    assert said_recoloured == set(recoloured)
    summary = write_report(findings, embeddings, tmp_path / "report")
    assert summary.recoloured_leaks == 3
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("beside it recoloured: the two differ only in colour") == 3
    leaks_csv = (tmp_path / "report" / "leaks.csv").read_text()
    assert leaks_csv.count(",differs\n") == 3 and leaks_csv.count(",same\n") == 3


def test_colour_against_grey_differs_and_grey_against_grey_does_not(tmp_path):
    blue, grey, lighter = tmp_path / "blue.png", tmp_path / "grey.png", tmp_path / "lighter.png"
    _drawing(0, _INKS["blue"]).save(blue)
    _drawing(0, (60, 60, 60)).save(grey)
    _drawing(0, (120, 120, 120)).save(lighter)
    assert colour_differs(blue, grey) and not colour_differs(grey, lighter)
    assert not colour_differs(blue, tmp_path / "missing.png")
