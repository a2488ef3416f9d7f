package schematest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// ajvScript validates cases read from stdin with ajv 8's 2020-12 dialect
// and ajv-formats, in ajv's default (strict) mode: each payload is the
// exact text to JSON.parse, as a consumer in JavaScript reads it. It writes
// one verdict per case.
const ajvScript = `
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const ajv = new Ajv2020({allErrors: true});
addFormats(ajv);
const validators = {};
for (const [id, schema] of Object.entries(input.schemas)) {
	try {
		validators[id] = ajv.compile(schema);
	} catch (e) {
		process.stderr.write("compiling " + id + ": " + e.message + "\n");
		process.exit(2);
	}
}
const out = input.cases.map(c => {
	let value;
	try {
		value = JSON.parse(c.payload);
	} catch (e) {
		return {valid: false, errors: ["not JSON: " + e.message]};
	}
	const validate = validators[c.schema];
	const valid = validate(value);
	return {valid, errors: valid ? [] : validate.errors.map(e => e.instancePath + " " + e.message)};
});
process.stdout.write(JSON.stringify(out));
`

// Ajv runs ajv through node from the package installed next to this file
// (npm ci --prefix internal/schematest/ajv, which .ci/run does).
type Ajv struct {
	node    string
	modules string
}

// NewAjv returns the ajv runner, or nil, having logged why, when node or
// the ajv package is missing; under CI=true that fails the test instead.
func NewAjv(t testing.TB) *Ajv {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	modules := filepath.Join(filepath.Dir(file), "ajv", "node_modules")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(modules, "ajv-formats", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("schematest: ajv is not installed (%v): install node and run npm ci --prefix internal/schematest/ajv, as .ci/run does", err)
		}
		t.Logf("schematest: no ajv check (%v); npm ci --prefix internal/schematest/ajv installs it", err)
		return nil
	}
	return &Ajv{node: node, modules: modules}
}

// Case is one payload for a schema, by the schema's id in the map given
// to Validate.
type Case struct {
	Schema  string
	Payload []byte
}

// Verdict is ajv's on one case.
type Verdict struct {
	Valid  bool     `json:"valid"`
	Errors []string `json:"errors"`
}

// Validate runs every case through ajv in one node process. schemas are
// the documents by id.
func (a *Ajv) Validate(t testing.TB, schemas map[string]map[string]any, cases []Case) []Verdict {
	t.Helper()
	type jsCase struct {
		Schema  string `json:"schema"`
		Payload string `json:"payload"`
	}
	in := struct {
		Schemas map[string]map[string]any `json:"schemas"`
		Cases   []jsCase                  `json:"cases"`
	}{Schemas: schemas}
	for _, c := range cases {
		in.Cases = append(in.Cases, jsCase{c.Schema, string(c.Payload)})
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("schematest: %v", err)
	}
	cmd := exec.Command(a.node, "-e", ajvScript)
	cmd.Env = append(os.Environ(), "NODE_PATH="+a.modules)
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("schematest: running ajv: %v\n%s", err, stderr.String())
	}
	var verdicts []Verdict
	if err := json.Unmarshal(out, &verdicts); err != nil || len(verdicts) != len(cases) {
		t.Fatalf("schematest: ajv answered %d verdicts for %d cases (%v): %.500s", len(verdicts), len(cases), err, out)
	}
	return verdicts
}
