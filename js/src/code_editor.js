// The front end of cfgzip_lab.widgets.code_editor.CodeEditor (an anywidget).
//
// It only translates: the document goes to the `value` trait on every edit, the selection head
// to `cursor`, the `diagnostics` trait becomes lint marks, and a {type: "jump"} message from
// Python (CodeEditor.jump_to) moves the cursor there, scrolls it into view and focuses.
//
// Positions on the wire are 1-based line and column counted in code points, as Python counts
// them (cfgzip_lab.grammar.diagnostics.position_of); CodeMirror counts UTF-16 units, so the
// two are converted here and nowhere else. Positions past the end of a line or of the text are
// clamped: diagnostics are computed for the text of the last check, which typing may have
// shortened since.
//
// Typing never fights the author (issue 21): CodeMirror's bracket auto-closing knows nothing of
// EBNF, and typing `string ::= "\"" [^"\\]* "\""` key by key ended in `… "\""]`. It is off, and
// ebnfAutoClose (below) closes `"`, `[`, `(`, `{` only outside strings, classes and comments, and
// steps over a closing `"` or `]` only when it is not escaped. Tooltips (the lint messages) are
// drawn in the page's <body>, outside the editor's clip box: on the first lines they used to open
// above the editor and be cut off. `read_only` shows a text that cannot be edited (the EBNF
// XGrammar built from a JSON Schema).

import { basicSetup } from "codemirror";
import { Compartment, EditorState, Prec } from "@codemirror/state";
import { EditorView, keymap, tooltips } from "@codemirror/view";
import { HighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { indentWithTab } from "@codemirror/commands";
import { lintGutter, setDiagnostics } from "@codemirror/lint";
import { classHighlighter, tags } from "@lezer/highlight";
import { ebnf } from "./ebnf.js";

/** Document offset of (line, column), both 1-based, column in code points; clamped. */
export function offsetOf(doc, line, column) {
  const l = doc.line(Math.min(Math.max(1, line | 0), doc.lines));
  let units = 0;
  let points = 1;
  for (const ch of l.text) {
    if (points >= column) break;
    units += ch.length;
    points += 1;
  }
  return l.from + units;
}

/** {line, column} (1-based, column in code points) of a document offset. */
export function positionOf(doc, offset) {
  const l = doc.lineAt(offset);
  return { line: l.number, column: [...l.text.slice(0, offset - l.from)].length + 1 };
}

/**
 * What the text before `column` of `line` is in: "code", "string", "class" or "comment", and
 * whether the character at `column` would be escaped (after an odd run of backslashes). Strings
 * and classes end at the end of their line in XGrammar's EBNF, so one line tells.
 */
export function contextAt(line, column) {
  let mode = "code";
  let escaped = false;
  for (const ch of line.slice(0, column)) {
    if (mode === "comment") break;
    if (mode === "string" || mode === "class") {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if ((mode === "string" && ch === '"') || (mode === "class" && ch === "]")) mode = "code";
    } else if (ch === "#") mode = "comment";
    else if (ch === '"') mode = "string";
    else if (ch === "[") mode = "class";
  }
  return { mode, escaped };
}

const PAIRS = { "(": ")", "[": "]", "{": "}", '"': '"' };

/**
 * What typing `typed` at `column` of `line` should do: {insert, cursor} (the text to insert and
 * where the cursor goes in it), {skip: true} (move over the next character), or null (insert it
 * as typed). Pure, so that its table can be tested without a browser.
 */
export function autoClose(line, column, typed) {
  const { mode, escaped } = contextAt(line, column);
  const next = line.charAt(column);
  if (mode === "comment") return null;
  if (mode === "string" || mode === "class") {
    const closer = mode === "string" ? '"' : "]";
    if (typed === closer && !escaped && next === closer) return { skip: true };
    return null; // inside a string or a class nothing is auto-closed
  }
  if ((typed === ")" || typed === "]" || typed === "}") && next === typed) return { skip: true };
  if (PAIRS[typed] !== undefined && (next === "" || /\s/.test(next) || ")]}".includes(next))) {
    return { insert: typed + PAIRS[typed], cursor: 1 };
  }
  return null;
}

/**
 * Enter at `column` of `line`: how many characters after the cursor stay on this line, because
 * they are only the `)` auto-closed for groups opened earlier on it (issue 35.3: Enter after
 * `action ::= ("mix" | "bake" ws qty` pushed the auto-inserted `)` down, the next rule was typed
 * after it, and the only error was "rule 'ws' must start on a new line"). 0 where Enter splits
 * the line as usual: other text after the cursor, right after a `(` (CodeMirror opens the pair
 * onto its own lines), in a string, class or comment, or a `)` this line did not open.
 */
export function closersKept(line, column) {
  const rest = line.slice(column);
  const closers = rest.trimEnd();
  if (!/^\)+$/.test(closers) || "([{".includes(line.charAt(column - 1) || " ")) return 0;
  let mode = "code";
  let escaped = false;
  let open = 0;
  for (const ch of line.slice(0, column)) {
    if (mode === "comment") break;
    if (mode === "string" || mode === "class") {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if ((mode === "string" && ch === '"') || (mode === "class" && ch === "]")) mode = "code";
    } else if (ch === "#") mode = "comment";
    else if (ch === '"') mode = "string";
    else if (ch === "[") mode = "class";
    else if (ch === "(") open += 1;
    else if (ch === ")") open = Math.max(0, open - 1);
  }
  return mode === "code" && open >= closers.length ? rest.length : 0;
}

const ebnfAutoClose = [
  Prec.high(
    EditorView.inputHandler.of((view, from, to, text) => {
      if (text.length !== 1 || from !== to || view.state.selection.ranges.length !== 1 || view.composing) return false;
      if (view.state.readOnly) return false;
      const line = view.state.doc.lineAt(from);
      const action = autoClose(line.text, from - line.from, text);
      if (action === null) return false;
      if (action.skip) {
        view.dispatch({ selection: { anchor: from + 1 }, userEvent: "input.type", scrollIntoView: true });
      } else {
        view.dispatch({
          changes: { from, to, insert: action.insert },
          selection: { anchor: from + action.cursor },
          userEvent: "input.type",
          scrollIntoView: true,
        });
      }
      return true;
    }),
  ),
  // Backspace between a pair it would have inserted ("", [], (), {} in code) deletes both.
  // Enter before only the ')' closing this line's groups leaves them on this line (closersKept).
  Prec.high(
    keymap.of([
      {
        key: "Enter",
        run: (view) => {
          const range = view.state.selection.main;
          if (!range.empty || view.state.selection.ranges.length !== 1 || view.state.readOnly) return false;
          const line = view.state.doc.lineAt(range.head);
          const kept = closersKept(line.text, range.head - line.from);
          if (kept === 0) return false;
          const end = range.head + kept;
          view.dispatch({
            changes: { from: end, insert: "\n" },
            selection: { anchor: end + 1 },
            userEvent: "input",
            scrollIntoView: true,
          });
          return true;
        },
      },
      {
        key: "Backspace",
        run: (view) => {
          const range = view.state.selection.main;
          if (!range.empty || view.state.selection.ranges.length !== 1 || view.state.readOnly) return false;
          const line = view.state.doc.lineAt(range.head);
          const col = range.head - line.from;
          const before = line.text.charAt(col - 1);
          if (col < 1 || PAIRS[before] === undefined || line.text.charAt(col) !== PAIRS[before]) return false;
          if (contextAt(line.text, col - 1).mode !== "code") return false;
          view.dispatch({ changes: { from: range.head - 1, to: range.head + 1 }, userEvent: "delete.backward" });
          return true;
        },
      },
    ]),
  ),
];

/**
 * The change a mark's quick fix makes in `doc` ({from, to, insert}), or null when the text it
 * replaces is no longer there (typed over since the check). `fix` is the mark's `fix`: line,
 * column, end_line, end_column, replacement, found (the text replaced), label.
 */
export function fixChange(doc, fix) {
  const from = offsetOf(doc, fix.line, fix.column);
  const to = Math.max(from, offsetOf(doc, fix.end_line, fix.end_column));
  if (doc.sliceString(from, to) !== fix.found) return null;
  return { from, to, insert: fix.replacement };
}

function toLint(doc, d) {
  const from = offsetOf(doc, d.line, d.column);
  const to = Math.max(from, offsetOf(doc, d.end_line ?? d.line, d.end_column ?? d.column));
  const severity = d.severity === "warning" ? "warning" : d.severity === "info" ? "info" : "error";
  const lint = { from, to, severity, message: d.message, source: d.source || undefined };
  if (d.fix) {
    // the quick fix's button in the hover text and the lint panel: the same edit as Python's apply_fix
    lint.actions = [
      {
        name: `Fix: ${d.fix.label}`,
        apply: (view) => {
          const change = fixChange(view.state.doc, d.fix);
          if (change === null) return;
          view.dispatch({ changes: change, selection: { anchor: change.from + change.insert.length } });
        },
      },
    ];
  }
  return lint;
}

// Colours for the tags ebnf.js emits, from JupyterLab's theme variables (the ones its own code
// cells use), so the editor follows the light, dark or any other theme; the fallbacks serve
// pages without JupyterLab's CSS. Given explicitly: basicSetup's default style is only a
// fallback, which the classHighlighter below (stable tok-* classes for tests) would switch off.
const jp = (name, fallback) => `var(--jp-${name}, ${fallback})`;
const colours = HighlightStyle.define([
  { tag: tags.definition(tags.variableName), color: jp("mirror-editor-def-color", "#6f42c1"), fontWeight: "bold" },
  { tag: tags.variableName, color: jp("mirror-editor-variable-2-color", "#005cc5") },
  { tag: tags.string, color: jp("mirror-editor-string-color", "#032f62") },
  { tag: tags.regexp, color: jp("mirror-editor-string-2-color", "#22863a") },
  { tag: tags.comment, color: jp("mirror-editor-comment-color", "#6a737d"), fontStyle: "italic" },
  { tag: tags.operator, color: jp("mirror-editor-operator-color", "#d73a49") },
  { tag: tags.number, color: jp("mirror-editor-number-color", "#e36209") },
  { tag: tags.keyword, color: jp("mirror-editor-keyword-color", "#d73a49"), fontWeight: "bold" },
  { tag: tags.meta, color: jp("mirror-editor-meta-color", "#6a737d") },
]);

// The editor's own surfaces (text, gutters, cursor, selection, search panel, tooltips) in the
// same theme variables: CodeMirror's defaults are light ones, which a dark JupyterLab would
// show as a white block.
const chrome = (height) =>
  EditorView.theme({
    // "&.cm-editor", not "&": the theme's class is also on the tooltip container in <body>, which
    // must not get the editor's height and background (it would cover the page and take clicks).
    "&.cm-editor": {
      height,
      border: `1px solid ${jp("border-color1", "#ccc")}`,
      fontSize: "12px",
      color: jp("content-font-color1", "#000"),
      backgroundColor: jp("cell-editor-background", "#f7f7f7"),
    },
    ".cm-scroller": { overflow: "auto", fontFamily: jp("code-font-family", "monospace") },
    ".cm-content": { caretColor: jp("editor-cursor-color", "#000") },
    ".cm-cursor, .cm-dropCursor": { borderLeftColor: jp("editor-cursor-color", "#000") },
    ".cm-gutters": {
      color: jp("ui-font-color2", "#6c6c6c"),
      backgroundColor: jp("cell-editor-background", "#f7f7f7"),
      borderRight: `1px solid ${jp("border-color2", "#ddd")}`,
    },
    ".cm-activeLine, .cm-activeLineGutter": { backgroundColor: jp("cell-editor-active-background", "#fff") },
    ".cm-selectionBackground, .cm-content ::selection": {
      backgroundColor: `${jp("editor-selected-background", "#d9d9d9")} !important`,
    },
    "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground": {
      backgroundColor: `${jp("editor-selected-focused-background", "#d7d4f0")} !important`,
    },
    ".cm-panels": { color: jp("ui-font-color1", "#000"), backgroundColor: jp("layout-color2", "#f5f5f5") },
    ".cm-panels.cm-panels-bottom": { borderTop: `1px solid ${jp("border-color1", "#ccc")}` },
    ".cm-textfield": {
      color: jp("ui-font-color1", "#000"),
      backgroundColor: jp("input-background", "#fff"),
      border: `1px solid ${jp("border-color1", "#ccc")}`,
    },
    ".cm-button": {
      color: jp("ui-font-color1", "#000"),
      backgroundImage: "none",
      backgroundColor: jp("layout-color3", "#eee"),
      border: `1px solid ${jp("border-color1", "#ccc")}`,
    },
    ".cm-tooltip": {
      color: jp("ui-font-color1", "#000"),
      backgroundColor: jp("layout-color1", "#fff"),
      border: `1px solid ${jp("border-color1", "#ccc")}`,
    },
  });

function render({ model, el }) {
  let fromModel = false; // a change the model made: do not send it back
  let lastCursor = null;

  const sync = EditorView.updateListener.of((update) => {
    if (update.docChanged && !fromModel) {
      model.set("value", update.state.doc.toString());
      model.save_changes();
    }
    if (update.selectionSet || update.docChanged) {
      const cursor = positionOf(update.state.doc, update.state.selection.main.head);
      if (!lastCursor || cursor.line !== lastCursor.line || cursor.column !== lastCursor.column) {
        lastCursor = cursor;
        model.set("cursor", cursor);
        model.save_changes();
      }
    }
  });

  const height = model.get("height") || "480px";
  const editable = new Compartment();
  const readOnly = (on) => [EditorState.readOnly.of(on), EditorView.editable.of(!on)];
  const view = new EditorView({
    parent: el,
    state: EditorState.create({
      doc: model.get("value") || "",
      extensions: [
        basicSetup,
        keymap.of([indentWithTab]), // Tab indents; Esc then Tab (or Ctrl-M) moves focus on
        ebnf,
        ebnfAutoClose,
        tooltips({ parent: document.body }), // never clipped by the editor or the output area
        syntaxHighlighting(colours),
        syntaxHighlighting(classHighlighter), // stable tok-* class names as well (tests, user CSS)
        lintGutter(),
        sync,
        chrome(height),
        editable.of(readOnly(!!model.get("read_only"))),
      ],
    }),
  });
  el.classList.add("cfgzip-code-editor");
  const onReadOnly = () => view.dispatch({ effects: editable.reconfigure(readOnly(!!model.get("read_only"))) });

  // JupyterLab's notebook shortcuts (a, b, d d, Esc, Shift-Enter...) must not see keys typed here,
  // as ipywidgets' own text areas do.
  const stop = (event) => event.stopPropagation();
  view.dom.addEventListener("keydown", stop);
  view.dom.addEventListener("keypress", stop);

  const showDiagnostics = () => {
    const doc = view.state.doc;
    const list = (model.get("diagnostics") || []).map((d) => toLint(doc, d));
    view.dispatch(setDiagnostics(view.state, list));
  };

  const onValue = () => {
    const text = model.get("value") || "";
    if (text === view.state.doc.toString()) return;
    fromModel = true;
    try {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    } finally {
      fromModel = false;
    }
    showDiagnostics();
  };

  const onMessage = (msg) => {
    if (!msg || msg.type !== "jump") return;
    const pos = offsetOf(view.state.doc, msg.line, msg.column);
    view.dispatch({ selection: { anchor: pos }, effects: EditorView.scrollIntoView(pos, { y: "center" }) });
    view.focus();
  };

  model.on("change:value", onValue);
  model.on("change:diagnostics", showDiagnostics);
  model.on("change:read_only", onReadOnly);
  model.on("msg:custom", onMessage);
  showDiagnostics();

  return () => {
    model.off("change:value", onValue);
    model.off("change:diagnostics", showDiagnostics);
    model.off("change:read_only", onReadOnly);
    model.off("msg:custom", onMessage);
    view.destroy();
  };
}

export default { render };
