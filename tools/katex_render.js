// Render TeX to HTML with KaTeX, for tools/build_site.py (math on the static site needs no script).
//   node tools/katex_render.js PATH/TO/node_modules/katex < [{"tex": "...", "display": true}, ...]
// prints [{"html": "..."} | {"error": "..."}, ...] in the same order.
"use strict";
const katex = require(require("path").resolve(process.argv[2]));
let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const out = JSON.parse(input).map(({ tex, display }) => {
    try {
      return { html: katex.renderToString(tex, { displayMode: display, throwOnError: true, output: "htmlAndMathml" }) };
    } catch (err) {
      return { error: String(err.message || err) };
    }
  });
  process.stdout.write(JSON.stringify(out));
});
