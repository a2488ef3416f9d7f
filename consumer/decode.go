package consumer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeFields decodes a JSON object keeping numbers exact, for upcasters.
func DecodeFields(payload []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var fields map[string]any
	if err := d.Decode(&fields); err != nil {
		return nil, fmt.Errorf("payload is not a JSON object: %w", err)
	}
	return fields, nil
}

// FillDefaults sets each default whose key fields lacks: the automatic
// step between two versions in the upcast path.
func FillDefaults(fields, defaults map[string]any) {
	for k, v := range defaults {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
}
