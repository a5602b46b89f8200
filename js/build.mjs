// Bundles src/code_editor.js and CodeMirror into one minified ESM file for the anywidget:
//
//   cd js && npm ci && npm run build                       -> ../cfgzip_lab/widgets/static/code_editor.js
//   node build.mjs --outfile /tmp/x.js                     (tests/test_code_editor.py: same bytes?)
//
// The header names the exact versions bundled (read from package-lock.json), so the committed
// file says what it holds. Nothing in the output depends on the time or the machine: the same
// lock file gives the same bytes.

import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const at = args.indexOf("--outfile");
const outfile = at >= 0 ? resolve(args[at + 1]) : resolve(here, "../cfgzip_lab/widgets/static/code_editor.js");

const lock = JSON.parse(readFileSync(resolve(here, "package-lock.json"), "utf8"));
const bundled = Object.entries(lock.packages)
  .filter(([path, info]) => path.startsWith("node_modules/") && !info.dev)
  .map(([path, info]) => `${path.slice("node_modules/".length)}@${info.version}`)
  .sort();
const esbuildVersion = lock.packages["node_modules/esbuild"].version;

const banner = [
  "// cfgzip_lab's grammar editor (CodeMirror 6), GENERATED: do not edit.",
  "// Source: js/src/code_editor.js; rebuild with `cd js && npm ci && npm run build`",
  `// (esbuild ${esbuildVersion}, --bundle --format=esm --minify --target=es2020).`,
  "// Bundled packages (MIT licensed: CodeMirror, Lezer, crelt, style-mod, w3c-keyname, find-cluster-break):",
  ...bundled.map((name) => `//   ${name}`),
].join("\n");

await build({
  entryPoints: [resolve(here, "src/code_editor.js")],
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  legalComments: "none",
  charset: "utf8",
  banner: { js: banner },
  outfile,
  logLevel: "warning",
});
console.log(`wrote ${outfile}`);
