package codegen_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/relay"
)

// asyncAPIParserDir, under testdata/, holds the official AsyncAPI parser's
// npm package (npm ci there) and validate.mjs, which runs it.
const asyncAPIParserDir = "asyncapi-parser"

// asyncAPIOptionsGolden is the document of case versions generated with
// asyncAPIOptions; go test ./codegen -update rewrites it.
const asyncAPIOptionsGolden = "testdata/asyncapi-options.json"

var asyncAPIOptions = []codegen.Option{
	codegen.Server("production", "amqps://alice:s3cret@rabbit.example.com:5671/shop?heartbeat=10"),
	codegen.Server("staging", "amqp://rabbit.staging.example.com/shop"),
	codegen.TopicPrefix("shop."),
}

// generateWithOptions generates case versions with asyncAPIOptions into a
// temporary directory and returns its contract directory.
func generateWithOptions(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	require.NoError(t, generate(t, caseNamed(t, "versions"), out, asyncAPIOptions...))
	return filepath.Join(out, codegen.ContractDir)
}

// TestAsyncAPIOptions: the servers and topic prefix the generator is told
// are in the document, the URLs without their user, password or query;
// every message names the event id header, and the CloudEvents headers as
// the servers' broker (RabbitMQ) names them. The document is the golden
// file, and valid AsyncAPI 3.0.
func TestAsyncAPIOptions(t *testing.T) {
	path := filepath.Join(generateWithOptions(t), codegen.AsyncAPIFile)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(asyncAPIOptionsGolden, b, 0o644))
	}
	golden, err := os.ReadFile(asyncAPIOptionsGolden)
	require.NoError(t, err)
	if !bytes.Equal(golden, b) {
		t.Fatalf("%s is stale (go test ./codegen -update): %s", asyncAPIOptionsGolden, firstDiff(golden, b))
	}

	official := compileOffline(t, asyncAPISchema, readJSON(t, asyncAPISchema))
	require.NoError(t, official.Validate(readJSON(t, path)))
	for _, secret := range []string{"alice", "s3cret", "heartbeat"} {
		require.NotContains(t, string(b), secret)
	}

	var doc struct {
		Servers    map[string]map[string]string
		Channels   map[string]struct{ Address string }
		Components struct {
			Messages map[string]struct {
				Headers struct {
					Required   []string
					Properties map[string]any
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, map[string]string{"host": "rabbit.example.com:5671", "protocol": "amqps", "protocolVersion": "0.9.1",
		"pathname": "/shop", "description": "The broker the relay publishes to (amqps)."}, doc.Servers["production"])
	require.Equal(t, "rabbit.staging.example.com", doc.Servers["staging"]["host"])
	require.NotEmpty(t, doc.Channels)
	for topic, ch := range doc.Channels {
		require.Equal(t, "shop."+topic, ch.Address)
	}
	require.NotEmpty(t, doc.Components.Messages)
	for key, msg := range doc.Components.Messages {
		require.Contains(t, msg.Headers.Required, "_watermill_message_uuid", key)
		require.Contains(t, msg.Headers.Properties, "cloudEvents_id", key)
		require.NotContains(t, msg.Headers.Properties, "ce_id", key)
	}
}

// brokerDocuments are documents generated for one broker each, with a
// topic prefix: the CloudEvents headers each names, as the broker's
// binding names them (datacontenttype: Kafka's content-type header,
// AMQP's content-type property, which is no header, NATS's
// ce-datacontenttype).
var brokerDocuments = []struct {
	url         string
	has, hasNot []string
}{
	{"nats://nats.example.com:4222", []string{"ce-id", "ce-specversion", "ce-datacontenttype"},
		[]string{"ce_id", "content-type", "cloudEvents_id"}},
	{"kafka://kafka-1.example.com:9092", []string{"ce_id", "ce_specversion", "content-type"},
		[]string{"ce_datacontenttype", "ce-id", "cloudEvents_id"}},
	{"amqp://rabbit.example.com/shop", []string{"cloudEvents_id", "cloudEvents_specversion"},
		[]string{"cloudEvents_datacontenttype", "content-type", "ce_id"}},
}

// generateForBroker generates case versions for the broker at url with
// the topic prefix "prod_" and returns its AsyncAPI document's path.
func generateForBroker(t *testing.T, url string) string {
	t.Helper()
	out := t.TempDir()
	require.NoError(t, generate(t, caseNamed(t, "versions"), out, codegen.Server("production", url), codegen.TopicPrefix("prod_")))
	return filepath.Join(out, codegen.ContractDir, codegen.AsyncAPIFile)
}

// TestAsyncAPIPerBroker: with a server of each broker and a topic prefix,
// the document lists the server, every address starts with the prefix,
// every message requires the event id header and says outbox_publish_id
// is not for dedupe, and the CloudEvents headers are the broker binding's.
func TestAsyncAPIPerBroker(t *testing.T) {
	for _, c := range brokerDocuments {
		t.Run(c.url, func(t *testing.T) {
			var doc struct {
				Servers    map[string]struct{ Host, Protocol string }
				Channels   map[string]struct{ Address string }
				Components struct {
					Messages map[string]struct {
						ContentType string
						Headers     struct {
							Required   []string
							Properties map[string]struct{ Description string }
						}
					}
				}
			}
			b, err := os.ReadFile(generateForBroker(t, c.url))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &doc))
			require.Len(t, doc.Servers, 1)
			require.Equal(t, strings.SplitN(c.url, "/", 4)[2], doc.Servers["production"].Host)
			require.Equal(t, strings.SplitN(c.url, ":", 2)[0], doc.Servers["production"].Protocol)
			require.NotEmpty(t, doc.Channels)
			for topic, ch := range doc.Channels {
				require.Equal(t, "prod_"+topic, ch.Address)
			}
			require.NotEmpty(t, doc.Components.Messages)
			for key, msg := range doc.Components.Messages {
				require.Equal(t, "application/json", msg.ContentType, key)
				require.Contains(t, msg.Headers.Required, "_watermill_message_uuid", key)
				require.Contains(t, msg.Headers.Properties["_watermill_message_uuid"].Description, "dedupe on it", key)
				require.Contains(t, msg.Headers.Properties["outbox_publish_id"].Description, "not for dedupe", key)
				for _, h := range c.has {
					require.Contains(t, msg.Headers.Properties, h, key)
				}
				for _, h := range c.hasNot {
					require.NotContains(t, msg.Headers.Properties, h, key)
				}
			}
		})
	}
}

// TestAsyncAPIOptionsRefused: options the document cannot honour refuse
// the generation, each named with what is wrong (a password shown
// redacted), and nothing is written.
func TestAsyncAPIOptionsRefused(t *testing.T) {
	out := t.TempDir()
	err := generate(t, caseNamed(t, "versions"), out,
		codegen.Server("prod", "mem://"),
		codegen.Server("prod", "nats://127.0.0.1:4222"),
		codegen.Server("local dev", "nats://127.0.0.1:4222"),
		codegen.Server("db", "postgres://app:pw@/orders?host=/run/postgresql"),
		codegen.Server("mq", "mqtt://broker.example.com"),
		codegen.TopicPrefix("shop/"))
	require.EqualError(t, err, `entoutbox: invalid AsyncAPI options:
	codegen.TopicPrefix("shop/"): a topic prefix may hold only letters, digits, '.', '_' and '-'
	codegen.Server("prod", "mem://"): an in-process broker is no server another team can reach
	codegen.Server("prod", ...): a second server of that name
	codegen.Server("local dev", "nats://127.0.0.1:4222"): the name may hold only letters, digits, '_' and '-'
	codegen.Server("db", "postgres://app:xxxxx@/orders?host=/run/postgresql"): the URL names no host
	codegen.Server("mq", "mqtt://broker.example.com"): unknown scheme "mqtt" (want nats, amqp, redis, kafka or postgres, as the relay's --broker)`)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, entries, "a refused generation writes nothing")
}

// TestAsyncAPICloudEventsPrefixIsTheRelays: the document names the
// CloudEvents headers of a broker as the relay adds them there, and
// datacontenttype where the relay puts it (relay.MetaCloudEventsDataContentType
// but on NATS; on AMQP the key becomes the content-type property, no header).
func TestAsyncAPICloudEventsPrefixIsTheRelays(t *testing.T) {
	for _, scheme := range []string{"nats", "amqp", "amqps", "kafka", "redis", "rediss", "postgres", "postgresql"} {
		prefix := relay.CloudEventsPrefixFor(scheme)
		require.Equal(t, prefix, codegen.CloudEventsPrefix(scheme), scheme)
		want := relay.MetaCloudEventsDataContentType // the Kafka binding's content-type header
		switch scheme {
		case "nats":
			want = "ce-datacontenttype"
		case "amqp", "amqps":
			want = "" // the content-type property
		}
		require.Equal(t, want, codegen.CloudEventsKey(prefix, "datacontenttype"), scheme)
		require.Equal(t, prefix+"id", codegen.CloudEventsKey(prefix, "id"), scheme)
	}
	require.Empty(t, codegen.CloudEventsKey(relay.CloudEventsPrefixAMQPColon, "datacontenttype"))
}

// TestAsyncAPIParser parses every generated AsyncAPI document (the golden
// cases', the committed ones and one with servers and a topic prefix) with
// the official AsyncAPI parser and its default rules: no error, no
// warning. It needs Node.js and the parser's package (npm ci in
// testdata/asyncapi-parser; .ci/run does it).
func TestAsyncAPIParser(t *testing.T) {
	dir := filepath.Join("testdata", asyncAPIParserDir)
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "@asyncapi", "parser", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the official AsyncAPI parser is required under CI=true: %v (install Node.js, then npm ci --prefix codegen/%s)", err, dir)
		}
		t.Skipf("skipping: the official AsyncAPI parser is not installed (%v); install Node.js, then npm ci --prefix codegen/%s", err, dir)
	}
	var docs []string
	for _, d := range contractDirs(t) {
		docs = append(docs, filepath.Join(d, codegen.AsyncAPIFile))
	}
	docs = append(docs, filepath.Join(generateWithOptions(t), codegen.AsyncAPIFile))
	for _, c := range brokerDocuments {
		docs = append(docs, generateForBroker(t, c.url))
	}
	for i, d := range docs {
		abs, err := filepath.Abs(d)
		require.NoError(t, err)
		docs[i] = abs
	}

	cmd := exec.Command(node, append([]string{"validate.mjs"}, docs...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the parser failed: %s", stderr.String())
	parsed := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			File        string
			Diagnostics []struct {
				Severity            int
				Code, Message, Path string
			}
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		parsed++
		for _, d := range r.Diagnostics {
			if d.Severity > 1 { // information and hints, such as the newer AsyncAPI 3.1.0
				t.Logf("%s: %s (%s at %s)", r.File, d.Message, d.Code, d.Path)
				continue
			}
			t.Errorf("%s: %s: %s (%s at %q)", r.File, map[int]string{0: "error", 1: "warning"}[d.Severity], d.Message, d.Code, d.Path)
		}
	}
	require.NoError(t, sc.Err())
	require.Equal(t, len(docs), parsed, "a result per document: %s", strings.TrimSpace(stderr.String()))
}

// TestAsyncAPIScheduling: the document says of each event whether and how
// far ahead it may be scheduled, and names the header of the time it was
// due on the messages of those that may be, only those.
func TestAsyncAPIScheduling(t *testing.T) {
	type doc struct {
		Operations map[string]struct{ Description string }
		Components struct {
			Messages map[string]struct {
				Description string
				Headers     struct{ Properties map[string]any }
			}
		}
	}
	read := func(name string) doc {
		out := t.TempDir()
		require.NoError(t, generate(t, caseNamed(t, name), out))
		b, err := os.ReadFile(filepath.Join(out, codegen.ContractDir, codegen.AsyncAPIFile))
		require.NoError(t, err)
		var d doc
		require.NoError(t, json.Unmarshal(b, &d))
		return d
	}
	const (
		may = "May be scheduled up to %s ahead (events.DeliverAt, DeliverAfter) and cancelled until then: it is published " +
			"once due by the producer's database clock, never before, with header outbox_deliver_at holding the time it was due. " +
			"It takes its place in its aggregate's order when due, after the aggregate's events published before then; " +
			"events of an aggregate due at the same time keep their commit order."
		never   = "Never scheduled: its declaration's MaxDelay is not positive, so it is published once its transaction commits."
		noTable = "Never scheduled: the producer's schema has no scheduled events' table, so it is published once its transaction commits."
	)
	for _, c := range []struct {
		name string
		want map[string]string // operation → description
	}{
		{"scheduled", map[string]string{
			"sendPaymentReminder": fmt.Sprintf(may, "2 days"), "sendHoldExpired": fmt.Sprintf(may, "36h30m0.5s"),
			"sendOrderPlaced": fmt.Sprintf(may, "366 days"), "sendAuditRecorded": never, "sendLedgerClosed": never,
		}},
		{"scheduled_no_table", map[string]string{
			"sendPaymentReminder": noTable, "sendHoldExpired": noTable, "sendOrderPlaced": noTable,
			"sendAuditRecorded": never, "sendLedgerClosed": never,
		}},
	} {
		d := read(c.name)
		for op, want := range c.want {
			require.Equal(t, want, d.Operations[op].Description, "%s: %s", c.name, op)
		}
		require.NotEmpty(t, d.Components.Messages)
		for key, msg := range d.Components.Messages {
			op := ""
			for o := range c.want {
				if strings.EqualFold(strings.ReplaceAll(strings.TrimSuffix(key, ".v1"), ".", ""), strings.TrimPrefix(o, "send")) {
					op = o
				}
			}
			require.NotEmpty(t, op, "%s: message %s", c.name, key)
			require.Equal(t, c.want[op], msg.Description, "%s: message %s", c.name, key)
			_, named := msg.Headers.Properties["outbox_deliver_at"]
			require.Equal(t, strings.HasPrefix(c.want[op], "May"), named, "%s: message %s names outbox_deliver_at", c.name, key)
		}
	}
}
