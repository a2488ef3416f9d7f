package mdcode

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	page := "# Title\n" +
		"<!-- file: main.go -->\n" +
		"\n" +
		"```go\n" +
		"package main\n" +
		"```\n" +
		"prose\n" +
		"```sh\n" +
		"go run .\n" +
		"```\n" +
		"- a list item\n" +
		"  <!-- go: body orders -->\n" +
		"  ```go\n" +
		"  h.OnOrderPaid()\n" +
		"  \tx()\n" +
		"  ```\n" +
		"<!-- an ordinary comment -->\n" +
		"````\n" +
		"```\n" +
		"````\n"
	blocks, err := Parse([]byte(page))
	require.NoError(t, err)
	require.Equal(t, []Block{
		{Lang: "go", Marker: &Marker{Kind: "file", Arg: "main.go", Line: 2}, Line: 5, Text: "package main\n"},
		{Lang: "sh", Line: 9, Text: "go run .\n"},
		{Lang: "go", Marker: &Marker{Kind: "go", Arg: "body orders", Line: 12}, Line: 14, Text: "h.OnOrderPaid()\n\tx()\n"},
		{Lang: "", Line: 19, Text: "```\n"},
	}, blocks)
}

func TestParseRefuses(t *testing.T) {
	_, err := Parse([]byte("text\n```go\nx\n"))
	require.EqualError(t, err, "line 2: the code block opened here is never closed")
	_, err = Parse([]byte("<!-- go: snippet -->\n```go\nx\n```\n"))
	require.EqualError(t, err, `line 1: marker "<!-- go: snippet -->": want "go: file", "go: body PRELUDE" or "go: decl PRELUDE"`)
	_, err = Parse([]byte("<!-- file: -->\n```go\nx\n```\n"))
	require.EqualError(t, err, `line 1: marker "<!-- file: -->" says nothing after the colon`)
}
