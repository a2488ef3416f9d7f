// Parses each AsyncAPI document named on the command line with the official
// parser (@asyncapi/parser, its default rules) and prints one JSON line per
// document: {"file", "diagnostics": [{"severity", "code", "message", "path"}]}.
// Severity is Spectral's: 0 error, 1 warning, 2 information, 3 hint.
// Exits 2 when the parser cannot run at all.
import { readFileSync } from 'node:fs';
import { Parser } from '@asyncapi/parser';

const parser = new Parser();
for (const file of process.argv.slice(2)) {
  const { document, diagnostics } = await parser.parse(readFileSync(file, 'utf8'));
  const out = diagnostics.map((d) => ({ severity: d.severity, code: String(d.code), message: d.message, path: d.path.join('/') }));
  if (!document && !out.some((d) => d.severity === 0)) {
    out.push({ severity: 0, code: 'no-document', message: 'the parser returned no document', path: '' });
  }
  console.log(JSON.stringify({ file, diagnostics: out }));
}
