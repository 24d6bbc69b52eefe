// Type-check Flux with the Flux language server's WASM build, under plain node (>= 18).
//   node tools/flux-check.mjs [--grafana] FILE.flux ...   one JSON line per file; exit 1 if any is invalid
//   node tools/flux-check.mjs [--grafana] -               read a JSON list of {name, query} from stdin
// --grafana defines Grafana's `v` record after the imports, as Grafana does when it runs a query.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const pkgDir = path.dirname(require.resolve('@influxdata/flux-lsp-browser/package.json'));

// The package's glue module is written for bundlers (it imports the .wasm as a module): load it
// from source with that import replaced, then instantiate the .wasm ourselves.
const source = fs.readFileSync(path.join(pkgDir, 'flux-lsp-browser_bg.js'), 'utf8')
  .replace(/^import \* as wasm from .*$/m,
    'let wasm; export function __setWasm(w) { wasm = w; cachedInt32Memory0 = new Int32Array(w.memory.buffer); cachedUint8Memory0 = new Uint8Array(w.memory.buffer); }')
  .replace(/^cached(Int32|Uint8)Memory0 = new .*$/gm, '');
const glue = await import('data:text/javascript;base64,' + Buffer.from(source).toString('base64'));
const { instance } = await WebAssembly.instantiate(
  fs.readFileSync(path.join(pkgDir, 'flux-lsp-browser_bg.wasm')), { './flux-lsp-browser_bg.js': glue });
glue.__setWasm(instance.exports);

export const GRAFANA_PRELUDE =
  'v = {timeRangeStart: -1h, timeRangeStop: now(), windowPeriod: 1m, defaultBucket: "nrg", organization: "nrg"}';

export function withGrafanaPrelude(src) {
  const lines = src.split('\n');
  let at = 0;
  lines.forEach((line, i) => { if (/^\s*import\s+"/.test(line)) at = i + 1; });
  lines.splice(at, 0, GRAFANA_PRELUDE);
  return lines.join('\n');
}

function syntaxErrors(node, out = []) {  // parse() never throws: collect Bad* nodes and `errors` lists
  if (Array.isArray(node)) { node.forEach((n) => syntaxErrors(n, out)); return out; }
  if (node && typeof node === 'object') {
    if (typeof node.type === 'string' && node.type.startsWith('Bad'))
      out.push(`${node.type}: ${JSON.stringify(node.text ?? '')}`);
    if (Array.isArray(node.errors)) for (const e of node.errors) out.push(String(e.msg ?? e));
    for (const [k, v] of Object.entries(node)) if (k !== 'errors' && k !== 'location') syntaxErrors(v, out);
  }
  return out;
}

export function checkFlux(src) {
  const syntax = syntaxErrors(glue.parse(src));
  const flux = new glue.Flux(src);
  let typeChecks;
  try { typeChecks = flux.is_valid() === true; } catch { typeChecks = false; }
  flux.free();
  return { valid: syntax.length === 0 && typeChecks, type_checks: typeChecks, syntax_errors: syntax };
}

if (process.argv[1] && import.meta.url.endsWith(path.basename(process.argv[1]))) {
  let args = process.argv.slice(2);
  const grafana = args.includes('--grafana');
  args = args.filter((a) => a !== '--grafana');
  const items = args[0] === '-'
    ? JSON.parse(fs.readFileSync(0, 'utf8'))
    : args.map((file) => ({ name: file, query: fs.readFileSync(file, 'utf8') }));
  let bad = 0;
  for (const { name, query } of items) {
    const result = checkFlux(grafana ? withGrafanaPrelude(query) : query);
    if (!result.valid) bad++;
    console.log(JSON.stringify({ name, ...result }));
  }
  process.exit(bad ? 1 : 0);
}
