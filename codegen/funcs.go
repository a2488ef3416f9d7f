package codegen

import (
	"strconv"
	"strings"
	"text/template"
)

// funcs are merged into ent's global function map, hence the prefix.
var funcs = template.FuncMap{
	"outboxComment": comment,
	"outboxQuote":   strconv.Quote,
	"outboxModel":   model,
	// The path of a version's JSON Schema in the ent package, for the
	// generated handlers' embed.
	"outboxSchemaFile": func(name string, version int) string { return ContractDir + "/" + SchemaPath(name, version) },
	// The payload checks of every event version, as Go, and the name of
	// each version's.
	"outboxPayloadChecks":    payloadChecks,
	"outboxPayloadCheckName": payloadCheckName,
	// The readers of each event's latest struct from its checked payload,
	// as Go, and the name of each event's ("": encoding/json reads it).
	"outboxPayloadReaders":    payloadReaders,
	"outboxPayloadReaderName": payloadReaderName,
}

// comment renders text as // lines, one per line of text.
func comment(text string) string {
	text = strings.TrimSpace(text)
	if text == "" {
		return ""
	}
	return "// " + strings.ReplaceAll(text, "\n", "\n// ")
}

// model fetches the validated model the hook stored for the templates.
func model(annotations map[string]any) *Model {
	m, _ := annotations[annotationKey].(*Model)
	return m
}
