package codegen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/events"
)

// What the AsyncAPI document cannot learn from the declarations: where the
// relay publishes them. The relay is told at run time (its broker URL and
// Config.TopicPrefix); the generator must be told the same.

// Server adds the broker the relay publishes to, by the URL the relay is
// given (entoutbox relay --broker, broker.Open), as the AsyncAPI server
// name (e.g. "production"); call it once per environment. The document
// keeps the URL's host, scheme and path (AMQP's vhost, PostgreSQL's
// database), never its user, password or query. Without a server the
// document has no servers section: consumers learn the broker from the
// producing team.
func Server(name, brokerURL string) Option {
	return func(e *Extension) {
		e.asyncAPI.servers = append(e.asyncAPI.servers, serverOption{name: name, url: brokerURL})
	}
}

// TopicPrefix is the relay's Config.TopicPrefix (entoutbox relay
// --topic-prefix): every channel address of the AsyncAPI document starts
// with it. The two must be the same, or the document names topics nobody
// publishes to.
func TopicPrefix(prefix string) Option {
	return func(e *Extension) { e.asyncAPI.topicPrefix = prefix }
}

type asyncAPIConfig struct {
	servers     []serverOption
	topicPrefix string
}

type serverOption struct{ name, url string }

// asyncAPIServer is a server of the document, from a serverOption.
type asyncAPIServer struct {
	name   string
	scheme string // the broker URL's, lower case
	object jsonObject
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`) // AsyncAPI's key pattern

// check refuses options the document cannot honour, before anything is
// generated.
func (c *asyncAPIConfig) check() error {
	var problems []string
	if c.topicPrefix != "" && !topicChars.MatchString(c.topicPrefix) {
		problems = append(problems, fmt.Sprintf("codegen.TopicPrefix(%q): a topic prefix may hold only letters, digits, '.', '_' and '-'", c.topicPrefix))
	}
	seen := map[string]bool{}
	for _, s := range c.servers {
		if _, err := s.server(); err != nil {
			problems = append(problems, err.Error())
		}
		if seen[s.name] {
			problems = append(problems, fmt.Sprintf("codegen.Server(%q, ...): a second server of that name", s.name))
		}
		seen[s.name] = true
	}
	if len(problems) > 0 {
		return fmt.Errorf("entoutbox: invalid AsyncAPI options:\n\t%s", strings.Join(problems, "\n\t"))
	}
	return nil
}

// asyncAPIProtocols are the AsyncAPI protocol (and its version) of each
// broker URL scheme package broker opens, but the in-process one.
var asyncAPIProtocols = map[string]struct{ protocol, version string }{
	"nats": {"nats", ""}, "amqp": {"amqp", "0.9.1"}, "amqps": {"amqps", "0.9.1"}, "kafka": {"kafka", ""},
	"redis": {"redis", ""}, "rediss": {"redis", ""}, "postgres": {"postgres", ""}, "postgresql": {"postgres", ""},
}

// server is the document's server of s, or what makes it none; the error
// shows the URL without its password.
func (s serverOption) server() (asyncAPIServer, error) {
	fail := func(format string, args ...any) (asyncAPIServer, error) {
		return asyncAPIServer{}, fmt.Errorf("codegen.Server(%q, %q): %s", s.name, redacted(s.url), fmt.Sprintf(format, args...))
	}
	if !serverName.MatchString(s.name) {
		return fail("the name may hold only letters, digits, '_' and '-'")
	}
	u, err := url.Parse(s.url)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return fail("not a URL: %v", err)
	}
	scheme := strings.ToLower(u.Scheme)
	p, ok := asyncAPIProtocols[scheme]
	switch {
	case scheme == "mem" || scheme == "inprocess":
		return fail("an in-process broker is no server another team can reach")
	case !ok:
		return fail("unknown scheme %q (want nats, amqp, redis, kafka or postgres, as the relay's --broker)", u.Scheme)
	case u.Host == "":
		return fail("the URL names no host")
	}
	o := jsonObject{"host": u.Host, "protocol": p.protocol,
		"description": fmt.Sprintf("The broker the relay publishes to (%s).", scheme)}
	if p.version != "" {
		o["protocolVersion"] = p.version
	}
	if u.Path != "" && u.Path != "/" {
		o["pathname"] = u.Path
	}
	return asyncAPIServer{name: s.name, scheme: scheme, object: o}, nil
}

// redacted is raw with any password replaced by "xxxxx".
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// cloudEventsPrefix is the key prefix of the CloudEvents attributes the
// relay adds for a broker URL scheme, as relay.CloudEventsPrefixFor gives
// it (the generator does not import the relay).
func cloudEventsPrefix(scheme string) string {
	switch scheme {
	case "nats":
		return "ce-"
	case "amqp", "amqps":
		return "cloudEvents_"
	}
	return "ce_"
}

// cloudEventsKey is the header of a CloudEvents attribute with prefix, as
// the relay sets it: the binding's prefix and the name, but datacontenttype,
// which the Kafka binding maps to the content-type header and the AMQP
// binding to the content-type property ("", no header); the NATS binding
// has no exception.
func cloudEventsKey(prefix, attribute string) string {
	if attribute != "datacontenttype" || prefix == "ce-" {
		return prefix + attribute
	}
	if strings.HasPrefix(prefix, "cloudEvents") {
		return ""
	}
	return "content-type"
}

// The CloudEvents attributes the relay can add (relay.CloudEvents), in
// binary content mode: each a header, the binding's prefix and the name
// (cloudEventsKey).
var cloudEventAttributes = []string{"id", "source", "specversion", "type", "time", "datacontenttype", "dataschema"}

// eventIDHeader is the header (Watermill's message UUID) that carries the
// event id on every broker: the key a consumer dedupes on.
const eventIDHeader = "_watermill_message_uuid"

// headersSchema is the schema of the message metadata of a version: the
// event id, the outbox keys the relay always sets, the CloudEvents
// attributes (with cePrefix) when the relay adds them, and the emitter's
// own headers, all strings.
func headersSchema(e *Event, v *Version, cePrefix string, schedulable bool) jsonObject {
	str := func(desc string) jsonObject { return jsonObject{"type": "string", "description": desc} }
	props := jsonObject{
		eventIDHeader: jsonObject{"type": "string", "format": "uuid", "description": "the event id, the same on every delivery and " +
			"replay of the event: dedupe on it (at-least-once delivery). A header on NATS, Kafka and RabbitMQ (where the message-id " +
			"property holds it too), a field of the stream entry on Redis, the uuid column on PostgreSQL"},
		events.MetaEventName:     jsonObject{"type": "string", "const": e.Name, "description": "the event's wire name"},
		events.MetaEventVersion:  jsonObject{"type": "string", "const": strconv.Itoa(v.Number), "description": "the payload's version"},
		events.MetaAggregateType: jsonObject{"type": "string", "const": e.Aggregate, "description": "the aggregate type; events of one aggregate arrive in order"},
		events.MetaAggregateID:   jsonObject{"type": "string", "minLength": 1, "maxLength": 255, "description": "the aggregate id"},
		events.MetaCreatedAt:     jsonObject{"type": "string", "format": "date-time", "description": "when the event was written (RFC 3339, UTC)"},
		events.MetaPublishID: str("the id of this one publish of the event (event id/row id), which changes when the event is " +
			"published again (a retried dead letter, a replay): not for dedupe"),
	}
	if v.ReadableFrom > 0 && v.ReadableFrom < v.Number {
		props[events.MetaReadableFrom] = jsonObject{"type": "string", "const": strconv.Itoa(v.ReadableFrom),
			"description": "the oldest version whose consumers can read this one (rolling deploys)"}
	}
	if schedulable {
		props[events.MetaDeliverAt] = jsonObject{"type": "string", "format": "date-time", "description": "set only when the " +
			"producer scheduled the event (events.DeliverAt, DeliverAfter): the time it was due, by the producer's database clock " +
			"(RFC 3339, UTC, microseconds); it was published at that time or after, never before"}
	}
	ce := map[string]jsonObject{
		"id":          str("CloudEvents id: the event id"),
		"source":      {"type": "string", "format": "uri-reference", "description": "CloudEvents source"},
		"specversion": {"type": "string", "const": "1.0", "description": "CloudEvents spec version"},
		"type":        {"type": "string", "const": fmt.Sprintf("%s.v%d", e.Name, v.Number), "description": "CloudEvents type: wire name and version"},
		"time":        {"type": "string", "format": "date-time", "description": "CloudEvents time: when the event was written"},
		"datacontenttype": {"type": "string", "const": "application/json", "description": "CloudEvents datacontenttype (binary mode: " +
			"the content-type header on Kafka, ce-datacontenttype on NATS; on RabbitMQ the content-type property, no header)"},
		"dataschema": {"type": "string", "format": "uri", "description": "CloudEvents dataschema: this version's JSON Schema, " + SchemaPath(e.Name, v.Number) + " under the relay's base URI"},
	}
	for _, k := range cloudEventAttributes {
		if key := cloudEventsKey(cePrefix, k); key != "" { // not AMQP's datacontenttype, the message's contentType
			props[key] = ce[k]
		}
	}
	required := []string{eventIDHeader, events.MetaAggregateID, events.MetaAggregateType, events.MetaCreatedAt, events.MetaEventName, events.MetaEventVersion}
	return jsonObject{
		"type": "object",
		"description": "Message metadata. " + eventIDHeader + " is the event id, to dedupe on. The " + cePrefix + " attributes are there " +
			"when the relay adds CloudEvents attributes (binary content mode), prefixed as the broker's CloudEvents binding names " +
			"them: ce_ on Kafka (and brokers without a binding), ce- on NATS, cloudEvents_ (or cloudEvents:, as the relay is told) " +
			"on RabbitMQ; datacontenttype is where the binding puts it: the content-type header on Kafka, the content-type " +
			"property on RabbitMQ, ce-datacontenttype on NATS. The emitter's headers (events.WithHeader) are strings too.",
		"properties": props, "required": required,
		"additionalProperties": jsonObject{"type": "string"},
	}
}

// schedulable reports whether the producer may schedule e: its
// declaration allows it and the schema has the scheduled events' table.
func schedulable(m *Model, e *Event) bool { return m.ScheduledTable != "" && e.MaxDelay > 0 }

// scheduling says whether and how far ahead e may be scheduled, and what
// a consumer sees of it.
func scheduling(m *Model, e *Event) string {
	switch {
	case e.MaxDelay <= 0:
		return "Never scheduled: its declaration's MaxDelay is not positive, so it is published once its transaction commits."
	case m.ScheduledTable == "":
		return "Never scheduled: the producer's schema has no scheduled events' table, so it is published once its transaction commits."
	}
	return fmt.Sprintf("May be scheduled up to %s ahead (events.DeliverAt, DeliverAfter) and cancelled until then: it is "+
		"published once due by the producer's database clock, never before, with header %s holding the time it was due. "+
		"It takes its place in its aggregate's order when due, after the aggregate's events published before then; "+
		"events of an aggregate due at the same time keep their commit order.", e.MaxDelayText(), events.MetaDeliverAt)
}

// messageKey names a version's message in the AsyncAPI document.
func messageKey(e *Event, v *Version) string { return fmt.Sprintf("%s.v%d", e.Name, v.Number) }

// asyncAPI is the AsyncAPI 3.0 document of m: the servers of cfg, a
// channel per topic (its address with cfg's topic prefix), a message per
// event version, and per event a send operation (every event has its Emit
// method) and, when the consumer side is generated, a receive operation
// (every event has its Register method). Both list every version: the
// relay publishes rows written before a deploy, and handlers take every
// declared version. cfg was checked.
func asyncAPI(m *Model, title string, cfg *asyncAPIConfig) jsonObject {
	// The CloudEvents headers are named as on the servers' broker, when
	// they agree.
	servers := jsonObject{}
	var prefixes []string
	for _, o := range cfg.servers {
		s, _ := o.server()
		servers[s.name] = s.object
		prefixes = append(prefixes, cloudEventsPrefix(s.scheme))
	}
	slices.Sort(prefixes)
	cePrefix := "ce_"
	if prefixes = slices.Compact(prefixes); len(prefixes) == 1 {
		cePrefix = prefixes[0]
	}
	channels, operations := jsonObject{}, jsonObject{}
	messages, schemas := jsonObject{}, jsonObject{}
	for _, e := range m.Events {
		ch, ok := channels[e.Topic].(jsonObject)
		if !ok {
			desc := fmt.Sprintf("Topic %q with the relay's topic prefix %q (its Config.TopicPrefix; the generator's codegen.TopicPrefix must be the same).", e.Topic, cfg.topicPrefix)
			if cfg.topicPrefix == "" {
				desc = fmt.Sprintf("Topic %q. A relay with a topic prefix (Config.TopicPrefix) publishes to the prefix and the topic: generate with the same codegen.TopicPrefix.", e.Topic)
			}
			ch = jsonObject{"address": cfg.topicPrefix + e.Topic, "messages": jsonObject{}, "description": desc}
			channels[e.Topic] = ch
		}
		var refs []jsonObject
		for _, v := range e.Versions {
			key := messageKey(e, v)
			ch["messages"].(jsonObject)[key] = jsonObject{"$ref": "#/components/messages/" + key}
			refs = append(refs, jsonObject{"$ref": "#/channels/" + e.Topic + "/messages/" + key})
			schemas[key] = payloadSchema(e, v)
			msg := jsonObject{
				"name":        key,
				"title":       fmt.Sprintf("%s v%d", e.GoName, v.Number),
				"contentType": "application/json",
				"headers":     headersSchema(e, v, cePrefix, schedulable(m, e)),
				"payload":     jsonObject{"$ref": "#/components/schemas/" + key},
				"description": scheduling(m, e),
			}
			if e.Comment != "" {
				msg["summary"] = e.Comment
			}
			messages[key] = msg
		}
		channel := jsonObject{"$ref": "#/channels/" + e.Topic}
		operations["send"+e.GoName] = jsonObject{"action": "send", "channel": channel, "messages": refs,
			"summary":     fmt.Sprintf("Emit%s writes %q to the outbox; the relay publishes it.", e.GoName, e.Name),
			"description": scheduling(m, e)}
		if m.HasConsumers() {
			operations["receive"+e.GoName] = jsonObject{"action": "receive", "channel": channel, "messages": refs,
				"summary": fmt.Sprintf("Handlers registered with Register%s (or On%s) receive %q, older versions upcast.", e.GoName, e.GoName, e.Name)}
		}
	}
	doc := jsonObject{
		"asyncapi":           "3.0.0",
		"defaultContentType": "application/json",
		"channels":           channels,
		"operations":         operations,
		"components":         jsonObject{"messages": messages, "schemas": schemas},
	}
	if len(servers) > 0 {
		doc["servers"] = servers
	}
	// The version changes whenever the contract does.
	b, _ := json.Marshal(doc)
	sum := sha256.Sum256(b)
	desc := "Events of " + title + ", generated by entoutbox from the event declarations. " +
		"info.version is a digest of this document: it changes whenever an event, version or field does."
	if len(servers) == 0 {
		desc += " The generator was not told the relay's broker (codegen.Server): no servers are listed."
	}
	doc["info"] = jsonObject{"title": title, "version": hex.EncodeToString(sum[:6]), "description": desc}
	return doc
}
