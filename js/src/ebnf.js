// XGrammar's EBNF dialect as a CodeMirror stream language (highlighting only; the grammar is
// checked by the kernel, which pushes its diagnostics into the editor).
//
// Tokens and the highlight tags they get (classHighlighter's class in brackets):
//   name before "::="            variableName.definition   (tok-variableName tok-definition)
//   other names                  variableName              (tok-variableName)
//   "..." strings                string                    (tok-string)
//   [...] character classes      regexp                    (tok-string2)
//   # comments                   comment                   (tok-comment)
//   ::= | * + ?                  operator                  (tok-operator)
//   {m,n} repetition             number                    (tok-number)
//   ( )                          paren                     (tok-punctuation)
//   (= lookahead                 keyword                   (tok-keyword)
//   name[attributes] ::=         meta                      (tok-meta)
// Strings and classes end at the end of their line, as in XGrammar; an unclosed one is shown
// as far as it goes and the kernel's diagnostic says what is missing.

import { StreamLanguage } from "@codemirror/language";

const NAME = /^[A-Za-z_.-][A-Za-z0-9_.-]*/;
const RULE_HEAD = /^[A-Za-z_.-][A-Za-z0-9_.-]*(?=(\[[^\]\r\n]*\])?[ \t]*::=)/;

function quoted(stream, close) {
  // Reads up to and including the closing character, honouring backslash escapes.
  let escaped = false;
  while (!stream.eol()) {
    const ch = stream.next();
    if (escaped) escaped = false;
    else if (ch === "\\") escaped = true;
    else if (ch === close) return;
  }
}

export const ebnf = StreamLanguage.define({
  name: "xgrammar-ebnf",
  startState: () => ({ afterHead: false }),
  token(stream, state) {
    if (stream.eatSpace()) return null;
    const afterHead = state.afterHead;
    state.afterHead = false;
    const ch = stream.peek();
    if (ch === "#") {
      stream.skipToEnd();
      return "comment";
    }
    if (ch === '"') {
      stream.next();
      quoted(stream, '"');
      return "string";
    }
    if (ch === "[") {
      stream.next();
      quoted(stream, "]");
      return afterHead ? "meta" : "regexp"; // name[max_tokens=3] ::= is an attribute block
    }
    if (stream.match("::=")) return "operator";
    if (stream.match(/^\{\s*\d*\s*(,\s*\d*\s*)?\}/)) return "number";
    if (stream.match("(=")) return "keyword";
    if (ch === "|" || ch === "*" || ch === "+" || ch === "?") {
      stream.next();
      return "operator";
    }
    if (ch === "(" || ch === ")") {
      stream.next();
      return "paren";
    }
    if (stream.match(RULE_HEAD)) {
      state.afterHead = true;
      return "variableName.definition";
    }
    if (stream.match(NAME)) return "variableName";
    stream.next();
    return null;
  },
  languageData: {
    commentTokens: { line: "#" },
    // CodeMirror's own auto-closing is off (no brackets): code_editor.js's ebnfAutoClose knows
    // strings and classes, which closeBrackets does not.
    closeBrackets: { brackets: [] },
  },
});
