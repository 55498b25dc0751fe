"""The hover over the answer (`HOVER_JS`): one floating table per page of both models' likeliest tokens, from each
token's `data-alt`, model text as `textContent`. A click pins it; choosing a token sends `select`, a fork
(`branches.fork_start`); a saved run (`runfile`) passes no `trigger`, so offers no forks."""

from __future__ import annotations

from .style import GREY, RED

HOVER_JS = """
// One table for the page, however often the component is mounted.
const tip = document.querySelector("body > .cascade-alts") || document.createElement("div");
tip.className = "cascade-alts";
tip.setAttribute("role", "tooltip");
tip.style.cssText = "position:fixed;z-index:1000;display:none;max-width:min(560px,95vw);padding:8px 10px;" +
  "background:var(--background-fill-primary,#fff);color:var(--body-text-color,#222);" +
  "border:1px solid rgba(128,128,128,.45);border-radius:8px;box-shadow:0 4px 14px rgba(0,0,0,.18);" +
  "font-size:.85em;line-height:1.35;pointer-events:none";
document.body.appendChild(tip);

const shown = (text) => "\\u201c" + text.replace(/\\n/g, "\\u21b5").replace(/\\t/g, "\\u21e5") + "\\u201d";

// An element with its style and text (model text only ever as textContent).
function el(tag, css, text = "", className = "") {
  const e = document.createElement(tag);
  e.style.cssText = css;
  e.textContent = text;
  if (className) e.className = className;
  return e;
}

let pinned = null;

function choose(token, text) {
  const lists = JSON.parse(token.dataset.alt);
  hide();
  trigger("select", {index: lists[2], value: text});
}

function column(title, items, chosen, colour, token) {
  const box = el("div", "flex:1 1 0;min-width:150px");
  box.appendChild(el("div", "font-weight:600;margin-bottom:3px" + (colour ? ";color:" + colour : ""), title));
  if (!items) {
    box.appendChild(el("div", "color:__GREY__", "did not read this position"));
    return box;
  }
  const table = el("table", "border-collapse:collapse;width:100%");
  for (const [text, pct] of items) {
    const row = table.insertRow();
    row.className = text === chosen ? "chosen" : "";
    const t = row.insertCell(), p = row.insertCell();
    t.textContent = (text === chosen ? "\\u25b8 " : "") + shown(text);
    p.textContent = pct + "%";
    t.style.cssText = "padding:1px 8px 1px 0;white-space:pre" + (text === chosen ? ";font-weight:600" : "");
    p.style.cssText = "padding:1px 0;text-align:right;font-variant-numeric:tabular-nums";
    if (token) {  // pinned: each row is a choice
      row.classList.add("choice");
      row.tabIndex = 0;
      row.title = "write on from here with " + shown(text) + " (a new branch)";
      row.style.cursor = "pointer";
      row.addEventListener("click", (e) => { e.stopPropagation(); choose(token, text); });
      row.addEventListener("keydown", (e) => { if (e.key === "Enter") choose(token, text); });
      row.addEventListener("mouseenter", () => { row.style.background = "rgba(128,128,128,.15)"; });
      row.addEventListener("mouseleave", () => { row.style.background = ""; });
    }
  }
  box.appendChild(table);
  return box;
}

function hide() {
  pinned = null;
  tip.style.display = "none";
  tip.style.pointerEvents = "none";
}

function show(token, pin) {
  if (token.hasAttribute("title")) {  // its details move into the table's head
    token.dataset.details = token.getAttribute("title");
    token.removeAttribute("title");
  }
  let lists;
  try { lists = JSON.parse(token.dataset.alt); } catch (e) { return; }
  const chosen = token.textContent;
  tip.replaceChildren();
  const details = el("div", "white-space:pre-line;margin-bottom:6px", token.dataset.details || "", "alts-details");
  const cols = el("div", "display:flex;gap:14px", "", "alts-columns");
  const choice = pin ? token : null;
  cols.appendChild(column("small model's likeliest", lists[0], chosen, "", choice));
  cols.appendChild(column("big model's likeliest", lists[1], chosen, "__RED__", choice));
  tip.append(details, cols);
  // A saved run (no `trigger`) cannot fork: its hover offers nothing to click.
  const hint = el("div", "margin-top:6px;color:__GREY__",
                  pin ? "Choose a token to write on from it: a new branch, with the same settings."
                  : !trigger ? ""
                  : earlier(token)
                  ? "An earlier answer: show its branch (Branches of this session) to write on from it."
                  : "Click the token to write on from one of these.", "alts-hint");
  if (hint.textContent) tip.appendChild(hint);
  pinned = pin ? token : null;
  tip.style.pointerEvents = pin ? "auto" : "none";
  tip.style.display = "block";
  const r = token.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
  const left = Math.max(4, Math.min(r.left, window.innerWidth - w - 4));
  const below = r.bottom + 6 + h <= window.innerHeight;
  tip.style.left = left + "px";
  tip.style.top = (below ? r.bottom + 6 : Math.max(4, r.top - h - 6)) + "px";
}

// An earlier answer of a conversation (`conversation.py`): its hover shows, its forks start from its branch.
const earlier = (token) => !!token.closest(".cascade-earlier");

const tokenAt = (e) => {
  const token = e.target.closest && e.target.closest("[data-alt]");
  return token && element.contains(token) ? token : null;
};
element.addEventListener("mouseover", (e) => {
  const token = tokenAt(e);
  if (token && !pinned) show(token, false);
});
element.addEventListener("mouseout", (e) => {
  const token = tokenAt(e);
  if (token && !pinned && !token.contains(e.relatedTarget)) hide();
});
element.addEventListener("click", (e) => {
  const token = tokenAt(e);
  if (!token || !trigger || earlier(token)) return;  // a saved run (no page to fork on) only shows
  e.stopPropagation();
  if (pinned === token) hide(); else show(token, true);
});
document.addEventListener("click", (e) => { if (pinned && !tip.contains(e.target)) hide(); });
document.addEventListener("keydown", (e) => { if (e.key === "Escape" && pinned) hide(); });
""".replace("__GREY__", GREY).replace("__RED__", RED)


def standalone_hover_js(selector: str) -> str:
    """The hover for a page without Gradio (a saved run): on the element `selector` names, no forks."""
    return f"(function (element, trigger) {{{HOVER_JS}}})(document.querySelector({selector!r}), null);"
