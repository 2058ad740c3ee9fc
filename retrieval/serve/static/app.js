// The search page: upload or drop an image, show the top-k results, click one to search with it.
"use strict";

const $ = (id) => document.getElementById(id);
const drop = $("drop"), file = $("file"), preview = $("preview"), results = $("results");

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function search(body, describe) {
  showError("");
  $("status").textContent = "searching…";
  try {
    const response = await fetch("/search", { method: "POST", ...body });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    render(answer.results);
    $("status").textContent = `${answer.results.length} results for ${describe} in ${answer.took_ms.toFixed(1)} ms`;
  } catch (error) {
    $("status").textContent = "";
    showError(String(error.message || error));
  }
}

function searchFile(image) {
  if (!image) return;
  const form = new FormData();
  form.append("image", image);
  form.append("k", $("k").value);
  if ($("filter").value.trim()) form.append("filter", $("filter").value);
  showPreview(URL.createObjectURL(image));
  search({ body: form }, image.name);
}

function searchId(id) {
  showPreview(`/thumb/${id}`);
  const body = JSON.stringify({ id: id, k: Number($("k").value), filter: $("filter").value.trim() || undefined });
  search({ body: body, headers: { "Content-Type": "application/json" } }, `item ${id}`);
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
    meta.append(score, label);
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

fetch("/info").then((r) => r.json()).then((manifest) => {
  const model = manifest.model || {};
  const backbone = (model.model_config || {}).backbone || "no model";
  const count = manifest.count ?? "?";
  $("info").textContent = `${count} vectors · ${manifest.kind || ""} ${manifest.factory || ""} · ${backbone}`;
}).catch(() => { $("info").textContent = ""; });
