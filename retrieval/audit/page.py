"""The report's HTML page: every section with thumbnails, in the search page's look, in one self-contained file.

Thumbnails are embedded (small JPEG data URIs), so the page opens from any folder or machine
without the images beside it; each section shows its first `limit` findings (groups for the
duplicate sections, class pairs for the confused classes) and points to its CSV for the rest.
Every text is HTML-escaped (`_text`: a carriage return too, which HTML would read as a newline),
so a card names its file exactly, whatever the name holds, in its `title` and in a link that opens
it (a `file:` URI, percent-encoded). Styles are the search page's (`retrieval/serve/static/style.css`)
plus a few rules for finding rows.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.audit.tables import SECTIONS, LabelIssueRow, Row, Section
from retrieval.images import UnreadableImage, load_image

if TYPE_CHECKING:
    from retrieval.audit.findings import AuditSummary

__all__ = ["render_page"]

_SEARCH_STYLE = Path(__file__).resolve().parents[1] / "serve" / "static" / "style.css"
_THUMBNAIL = 96  # pixels, the longer side
_CARDS = 12  # images shown per finding: a group chained through a whole class would make a page of megabytes
_STYLE = """
main.audit { display: block; max-width: 1200px; }
section { margin-bottom: 32px; }
section h2 { margin: 0 0 4px; font-size: 18px; }
section p.about, p.note { margin: 0 0 12px; color: #5b6573; font-size: 13px; }
p.warning { margin: 0 0 12px; color: #b3261e; font-weight: 600; }
.finding { display: flex; gap: 12px; align-items: center; padding: 8px; margin-bottom: 8px;
  border: 1px solid #d5dae1; border-radius: 8px; background: #fff; }
.finding .cards { display: flex; flex-wrap: wrap; gap: 8px; }
.finding .result { width: 110px; margin: 0; cursor: default; }
.finding .fields { min-width: 180px; font-size: 13px; overflow-wrap: anywhere; }
.finding .disagree { color: #b3261e; font-weight: 600; }
.finding .reason { font-weight: 600; margin-bottom: 4px; }
.finding .result .label { white-space: normal; overflow: visible; overflow-wrap: anywhere; }
"""
# Sections whose consecutive rows with the same cells in these columns are one finding (a group, a class pair).
_GROUPED = {
    "exact_duplicates": ("group",),
    "near_duplicates": ("group",),
    "confused_classes": ("class_a", "class_b"),
}
_UNITS = {"exact_duplicates": "group", "near_duplicates": "group", "confused_classes": "pair"}
_PATH_COLUMNS = ("path", "partner_path")
_CARD_COLUMNS = {"path": ("split", "label"), "partner_path": ("partner_split", "partner_label")}


def render_page(tables: dict[str, list[Row]], summary: AuditSummary, limit: int, title: str) -> str:
    """The whole page: a summary, the left-out sections said once, and each present section's first findings."""
    thumbnail = _thumbnails()
    parts = [f"<p class='warning'>{_text(warning)}</p>" for warning in summary.warnings]
    parts += [f"<p class='note'>{_text(note)}</p>" for note in summary.left_out]
    for section in SECTIONS:
        if section.name in tables:
            parts.append(_section(section, tables[section.name], limit, thumbnail))
    head = f"{summary.images} images, k={summary.k}"
    if summary.threshold is not None:
        head += f", near-duplicate threshold {summary.threshold:.4f} ({summary.threshold_source})"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_text(title)}</title><style>{_SEARCH_STYLE.read_text(encoding='utf-8')}{_STYLE}</style>"
        f"</head><body><header><h1>{_text(title)}</h1><p>{_text(head)}</p></header>"
        f"<main class='audit'>{''.join(parts)}</main></body></html>\n"
    )


def _section(section: Section, rows: list[Row], limit: int, thumbnail: Callable[[str], str]) -> str:
    columns = _GROUPED.get(section.name)
    if columns is None:
        items = [[row] for row in rows]
    else:
        items = [list(members) for _, members in groupby(rows, key=lambda row: [row.cell(name) for name in columns])]
    unit = _UNITS.get(section.name, "row") + ("" if len(items) == 1 else "s")
    shown = "".join(_finding(section, item, thumbnail) for item in items[:limit])
    more = f" The first {limit} are shown; {section.name}.csv lists all." if len(items) > limit else ""
    return (
        f"<section id='{section.name}'><h2>{section.title} ({len(items)} {unit})</h2>"
        f"<p class='about'>{_text(section.about)}.{_text(more)}</p>{shown or '<p>none found</p>'}</section>"
    )


def _finding(section: Section, rows: list[Row], thumbnail: Callable[[str], str]) -> str:
    """One finding: the images it is about as cards, and its other cells."""
    cards = []
    for row in rows:
        for column in _PATH_COLUMNS:
            path = str(row.cell(column))
            if path:
                cards.append(_card(path, _caption(row, column), thumbnail(path)))
        for number, voter in enumerate(row.voters if isinstance(row, LabelIssueRow) else (), start=1):
            caption = f"neighbour {number} · label: {voter.label} · cosine {voter.score:.3f}"
            cards.append(_card(voter.path, caption, thumbnail(voter.path)))
    if len(cards) > _CARDS:
        cards = [*cards[:_CARDS], f"<div class='label'>and {len(cards) - _CARDS} more</div>"]
    on_cards = ("keep", "split", "label", "suggested_label", "partner_split", "partner_label", "votes")
    shown = [name for name in section.columns if name not in _PATH_COLUMNS and name not in on_cards]
    fields = [f"<div class='reason'>{_text(_reason(section.name, rows))}</div>"]
    for name in shown:
        value = rows[0].cell(name)
        if value == "" or (section.name in _GROUPED and name == "score"):
            continue
        warn = " class='disagree'" if name == "labels_agree" and value == 0 else ""
        fields.append(f"<div{warn}>{_text(name)}: {_text(str(value))}</div>")
    cards_html, fields_html = "".join(cards), "".join(fields)
    return f"<div class='finding'><div class='cards'>{cards_html}</div><div class='fields'>{fields_html}</div></div>"


def _caption(row: Row, column: str) -> str:
    """A card's caption: the image's split and label, and the label its neighbours suggest when there is one."""
    split, label = (str(row.cell(name)) for name in _CARD_COLUMNS[column])
    suggested = str(row.cell("suggested_label")) if column == "path" else ""
    parts = [split, f"label: {label}" if label else "", f"suggested: {suggested}" if suggested else ""]
    return " · ".join(part for part in parts if part)


def _reason(section: str, rows: list[Row]) -> str:
    """One line saying why the finding is listed, from its first row's cells."""
    row = rows[0]
    cell = row.cell
    if section == "exact_duplicates":
        return f"{len(rows)} files with identical bytes: keep one"
    if section == "near_duplicates":
        best = max(float(member.cell("score")) for member in rows)
        return f"{len(rows)} images the embedding scores as copies (best cosine {best:.4f})"
    if section == "leaks":
        ratio = float(cell("ratio"))
        if cell("colour") == "differs":
            return (
                f"the {cell('partner_split')} image beside it recoloured: the two differ only in colour, perhaps "
                f"another item (distance ratio {ratio:.3f})"
            )
        return f"a copy of the {cell('partner_split')} image beside it (distance ratio {ratio:.3f})"
    if section == "label_issues":
        return (
            f"labelled {cell('label')!r}, its neighbours say {cell('suggested_label')!r} "
            f"(votes: {cell('votes')}; label score {float(cell('label_score')):.3f}, lower is surer)"
        )
    if section == "outliers":
        nearest = f"; nearest class {cell('nearest_class')!r}" if cell("nearest_class") != "" else ""
        return f"far from every class with its neighbours (strangeness {float(cell('strangeness')):.3f}){nearest}"
    return f"images of {cell('class_a')!r} and {cell('class_b')!r} are each other's neighbours ({cell('count')} images)"


def _card(path: str, caption: str, source: str) -> str:
    """An image's card: its thumbnail linking to the file, the full path on hover, and its caption."""
    link = Path(path).absolute().as_uri()
    return (
        f"<figure class='result' title='{_text(path)}'><a href='{_text(link)}'><img alt='' src='{source}'></a>"
        f"<figcaption class='meta label'>{_text(caption)}</figcaption></figure>"
    )


def _text(value: str) -> str:
    """`value` escaped for HTML text and quoted attributes, a carriage return as a reference (HTML reads a raw one
    as a line feed), so the browser shows exactly `value`."""
    return html.escape(value, quote=True).replace("\r", "&#13;")


def _thumbnails() -> Callable[[str], str]:
    """A function from an image path to its thumbnail's data URI, each file read once; '' for an unreadable one."""
    made: dict[str, str] = {}

    def thumbnail(path: str) -> str:
        if path not in made:
            try:
                image = load_image(path, "RGB")
            except UnreadableImage:  # the report still renders; the CSV names the file
                made[path] = ""
                return ""
            image.thumbnail((_THUMBNAIL, _THUMBNAIL))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=85)
            made[path] = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        return made[path]

    return thumbnail
