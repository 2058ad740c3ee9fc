// The search page: upload or drop an image, show the top-k results, click one to search with it.
"use strict";

const $ = (id) => document.getElementById(id);
const drop = $("drop"), file = $("file"), preview = $("preview"), results = $("results");
const SHOWN_APART = ["id", "path", "label"];  // a card shows these on their own; its other columns as fields
// One example condition per column type, for the filter box's placeholder.
const EXAMPLES = { int: (c) => `${c} in (1, 2)`, float: (c) => `${c} < 10.5`, str: (c) => `${c} = 'x'`,
  bool: (c) => `${c} = true` };

function quoted(name) {
  return /^[A-Za-z_][\w.]*$/.test(name) ? name : `\`${name}\``;
}

// The filter box's placeholder and tooltip from the index's own columns (`/info` columns).
function describeColumns(columns) {
  const usable = columns.filter((c) => c.name !== "path" && EXAMPLES[c.type]);
  const preferred = usable.filter((c) => c.name !== "id").concat(usable.filter((c) => c.name === "id"));
  const examples = preferred.slice(0, 2).map((c) => EXAMPLES[c.type](quoted(c.name)));
  if (examples.length) $("filter").placeholder = `e.g. ${examples.join(" and ")}`;
  $("filter").title = `columns: ${columns.map((c) => `${c.name} (${c.type})`).join(", ")}; ` +
    "operators: = != < <= > >= in, not in, is null, and, or, not, ( )";
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

// The last search, run again when the count, the filter or the minimum score changes; and its number,
// so that only the answer of the newest search is shown, whichever answer arrives last.
let repeat = null, latest = 0;
let searched = "";  // the filter text the last Enter searched with

async function search(body, describe) {
  const mine = ++latest;
  showError("");
  $("status").textContent = "searching…";
  try {
    const response = await fetch("/search", { method: "POST", ...body });
    const answer = await response.json();
    if (mine !== latest) return;
    if (!response.ok) throw new Error(answer.error || response.statusText);
    render(answer.results);
    const found = answer.results.length || answer.min_score == null
      ? `${answer.results.length} results` : `no match above ${answer.min_score.toFixed(4)}`;
    $("status").textContent = `${found} for ${describe} in ${answer.took_ms.toFixed(1)} ms`;
  } catch (error) {
    if (mine !== latest) return;
    $("status").textContent = "";
    render([]);  // results of another filter or count must not stay under this one's error
    showError(String(error.message || error));
  }
}

// Run `query` now and whenever the settings change; it reads the count, filter and minimum score each time.
function searchWith(query) {
  repeat = query;
  query();
}

function searchAgain() {
  if (repeat) repeat();
}

function searchFile(image) {
  if (!image) return;
  showPreview(URL.createObjectURL(image));
  searchWith(() => {
    const form = new FormData();
    form.append("image", image);
    form.append("k", $("k").value);
    if ($("filter").value.trim()) form.append("filter", $("filter").value);
    if ($("min-score").value !== "") form.append("min_score", $("min-score").value);
    search({ body: form }, image.name);
  });
}

function searchId(id) {
  showPreview(`/thumb/${id}`);
  searchWith(() => {
    const minScore = $("min-score").value === "" ? undefined : Number($("min-score").value);
    const filter = $("filter").value.trim() || undefined;
    const body = JSON.stringify({ id: id, k: Number($("k").value), filter: filter, min_score: minScore });
    search({ body: body, headers: { "Content-Type": "application/json" } }, `item ${id}`);
  });
}

function showPreview(src) {
  preview.src = src;
  preview.hidden = false;
  $("drop-text").textContent = "Drop another image, or click to choose one";
}

function render(items) {
  results.replaceChildren(...items.map((item, rank) => {
    const card = document.createElement("button");
    card.className = "result";
    card.dataset.id = item.id;
    card.title = `${item.path || ""}\nclick: more like this`;
    const thumb = document.createElement("img");
    thumb.src = item.thumb;
    thumb.alt = `item ${item.id}`;
    thumb.loading = "lazy";
    const meta = document.createElement("div");
    meta.className = "meta";
    const score = document.createElement("div");
    score.className = "score";
    score.textContent = `#${rank + 1}  ${item.score.toFixed(4)}`;
    const label = document.createElement("div");
    label.className = "label";
    label.textContent = `${item.label ?? ""} · id ${item.id}`;
    const fields = document.createElement("div");
    fields.className = "fields";
    const shown = Object.entries(item.metadata || {}).filter(([name]) => !SHOWN_APART.includes(name));
    fields.textContent = shown.map(([name, value]) => `${name}: ${value ?? "–"}`).join(" · ");
    card.title += shown.length ? `\n${fields.textContent}` : "";
    meta.append(score, label, fields);
    card.append(thumb, meta);
    card.addEventListener("click", () => searchId(item.id));
    return card;
  }));
}

file.addEventListener("change", () => searchFile(file.files[0]));
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  searchFile(event.dataTransfer.files[0]);
});
drop.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") file.click(); });
// A new count, filter or minimum score searches again: results of the old ones never stay under the new.
// The filter searches on Enter, and on leaving the box changed ("change" fires for both: Enter is handled
// alone, so that one Enter is one search).
$("k").addEventListener("change", searchAgain);
$("min-score").addEventListener("change", searchAgain);
$("filter").addEventListener("keydown", (event) => {
  if (event.key !== "Enter") return;
  event.preventDefault();
  searched = $("filter").value;
  searchAgain();
});
$("filter").addEventListener("change", () => {
  if ($("filter").value !== searched) searchAgain();
  searched = $("filter").value;
});

fetch("/info").then((r) => r.json()).then((manifest) => {
  const model = manifest.model || {};
  const backbone = (model.model_config || {}).backbone || "no model";
  const count = manifest.count ?? "?";
  $("info").textContent = `${count} vectors · ${manifest.kind || ""} ${manifest.factory || ""} · ${backbone}`;
  describeColumns(manifest.columns || []);
  const stored = manifest.match_threshold;
  if (stored) {  // the threshold the model's validation pairs chose: the page applies it until changed
    $("min-score").value = stored.score.toFixed(4);
    $("min-score").title = `stored threshold: false match rate ${stored.target_fmr} on ${stored.chosen_on} pairs`;
  }
}).catch(() => { $("info").textContent = ""; });
