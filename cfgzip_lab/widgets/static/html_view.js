// cfgzip_lab's HtmlView (an anywidget): HTML whose rule names, railroad boxes and spans answer
// the mouse. Hand-written ES module with no imports and no build step (the CodeMirror editor is
// the only bundled front end); cfgzip_lab.widgets.html_view.HtmlView is its Python side.
//
// It only translates, as the editor does:
//   click on [data-rule] or on a railroad diagram's nonterminal box -> {type: "rule", rule}
//   click on [data-action="name" data-arg="..."]                   -> {type: "action", action, arg}
//   click on [data-span="start,end"]                               -> {type: "span", start, end}
//   hover on [data-span]: the span's code points are marked in the [data-sample] element of the
//   same [data-sample-root] (a parse tree and its sample), until the mouse leaves; a click keeps
//   the mark. Offsets count code points, as Python does.
//   A drawn parse tree (.cfgzip-tree-canvas) opens with its top node in view and keeps its scroll
//   when it is redrawn for the same sample (a fold badge clicked).

const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function markSample(root, span) {
  const sample = root && root.querySelector("[data-sample]");
  if (!sample) return;
  if (sample.dataset.text === undefined) sample.dataset.text = sample.textContent;
  const points = Array.from(sample.dataset.text);
  if (!span) {
    sample.innerHTML = esc(points.join(""));
    return;
  }
  const [start, end] = span;
  const head = esc(points.slice(0, start).join(""));
  const body = esc(points.slice(start, end).join(""));
  const tail = esc(points.slice(end).join(""));
  const mark = body ? `<mark class="cfgzip-span-mark">${body}</mark>` : `<mark class="cfgzip-span-mark cfgzip-span-empty"></mark>`;
  sample.innerHTML = head + mark + tail;
}

function spanOf(node) {
  const [start, end] = (node.dataset.span || "").split(",").map((x) => parseInt(x, 10));
  return Number.isFinite(start) && Number.isFinite(end) ? [start, end] : null;
}

function ruleOf(target) {
  const named = target.closest("[data-rule]");
  if (named) return named.dataset.rule;
  const box = target.closest("g.non-terminal");
  if (!box) return null;
  const title = box.querySelector("title");
  const text = title ? title.textContent : (box.querySelector("text") || {}).textContent;
  return text ? text.replace(/^rule /, "") : null;
}

function render({ model, el }) {
  el.classList.add("cfgzip-html-view");
  const sticky = new Map(); // sample root -> span kept by a click
  const draw = () => {
    // A drawn parse tree redrawn for the same sample (a node folded or unfolded) keeps its
    // scroll position; a new tree starts with its top node in view (a wide tree's root sits far
    // to the right of the canvas's left edge).
    const before = el.querySelector(".cfgzip-tree-canvas");
    const sampleBefore = el.querySelector("[data-sample]");
    const kept = before && sampleBefore ? [sampleBefore.textContent, before.scrollLeft, before.scrollTop] : null;
    el.innerHTML = model.get("value") || "";
    sticky.clear();
    const canvas = el.querySelector(".cfgzip-tree-canvas");
    if (!canvas) return;
    const sample = el.querySelector("[data-sample]");
    if (kept && sample && sample.textContent === kept[0]) {
      canvas.scrollLeft = kept[1];
      canvas.scrollTop = kept[2];
      return;
    }
    const top = canvas.querySelector('g.cfgzip-tree-node[data-path=""]');
    if (top) {
      const box = top.getBoundingClientRect(), view = canvas.getBoundingClientRect();
      canvas.scrollLeft = Math.max(0, box.left - view.left + box.width / 2 - canvas.clientWidth / 2);
    }
  };
  const over = (event) => {
    const node = event.target.closest("[data-span]");
    if (!node || !el.contains(node)) return;
    const root = node.closest("[data-sample-root]");
    markSample(root, spanOf(node));
  };
  const out = (event) => {
    const node = event.target.closest("[data-span]");
    if (!node) return;
    const root = node.closest("[data-sample-root]");
    markSample(root, sticky.get(root) || null);
  };
  const click = (event) => {
    const action = event.target.closest("[data-action]");
    if (action && el.contains(action)) {
      event.preventDefault();
      model.send({ type: "action", action: action.dataset.action, arg: action.dataset.arg || "" });
      return;
    }
    const rule = ruleOf(event.target);
    if (rule) {
      event.preventDefault();
      event.stopPropagation();
      model.send({ type: "rule", rule });
      return;
    }
    const node = event.target.closest("[data-span]");
    if (node && el.contains(node)) {
      const span = spanOf(node);
      const root = node.closest("[data-sample-root]");
      if (root) sticky.set(root, span);
      markSample(root, span);
      if (span) model.send({ type: "span", start: span[0], end: span[1] });
    }
  };
  el.addEventListener("mouseover", over);
  el.addEventListener("mouseout", out);
  el.addEventListener("click", click);
  model.on("change:value", draw);
  draw();
  return () => {
    model.off("change:value", draw);
    el.removeEventListener("mouseover", over);
    el.removeEventListener("mouseout", out);
    el.removeEventListener("click", click);
  };
}

export default { render };
