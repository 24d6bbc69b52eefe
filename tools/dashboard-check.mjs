// Validate Grafana dashboard JSON files against grafana/schema/dashboard.schema.json with ajv.
//   node tools/dashboard-check.mjs SCHEMA FILE.json ...   one JSON line per file; exit 1 if any is invalid
import fs from 'node:fs';
import Ajv from 'ajv';

const [schemaFile, ...files] = process.argv.slice(2);
const ajv = new Ajv({ allErrors: true, strict: false });
const validate = ajv.compile(JSON.parse(fs.readFileSync(schemaFile, 'utf8')));
let bad = 0;
for (const file of files) {
  const valid = validate(JSON.parse(fs.readFileSync(file, 'utf8')));
  if (!valid) bad++;
  const errors = (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
  console.log(JSON.stringify({ file, valid, errors }));
}
process.exit(bad ? 1 : 0);
