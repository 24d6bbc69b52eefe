// Generate the JSON Schema of a Grafana dashboard from the pinned @grafana/schema (its TypeScript
// types), for tools/dashboard-check.mjs.   node tools/dashboard-schema.mjs > grafana/schema/dashboard.schema.json
import path from 'node:path';
import { createRequire } from 'node:module';
import { createGenerator } from 'ts-json-schema-generator';

const require = createRequire(import.meta.url);
const pkg = require('@grafana/schema/package.json');
const types = path.join(path.dirname(require.resolve('@grafana/schema/package.json')),
  'dist/esm/raw/dashboard/x/dashboard_types.gen.d.ts');
const schema = createGenerator({ path: types, type: 'Dashboard', skipTypeCheck: true }).createSchema('Dashboard');
// An annotation's target is the query of its datasource (the types say so in a TODO and list only
// the "grafana" datasource's fields): let a datasource put its own query fields there.
schema.definitions.AnnotationTarget.additionalProperties = true;
schema.$comment = `Generated from @grafana/schema ${pkg.version} by tools/dashboard-schema.mjs`;
process.stdout.write(JSON.stringify(schema, null, 2) + '\n');
