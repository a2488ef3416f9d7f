package relay

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// CloudEvents makes every relayed message a CloudEvents 1.0 event in binary
// content mode: the payload is the event's data and the attributes travel
// as metadata, so consumers in other languages and CloudEvents SDKs read
// them. Each key is Prefix and the attribute's name, as the broker's
// CloudEvents protocol binding names its headers (ce_id on Kafka, ce-id on
// NATS, cloudEvents_id on AMQP):
//
//	id               the event id
//	type             wire name and version, e.g. order.paid.v2
//	source           Source
//	time             when the event was written (RFC 3339)
//	specversion      1.0
//	datacontenttype  application/json (see below)
//	dataschema       DataSchemaBase + the version's schema path
//	                 (schemas/order.paid.v2.json), when DataSchemaBase is set
//	tenant           Config.Tenant, an extension attribute, when set
//
// datacontenttype is where the binding puts it in binary mode: the
// content-type header on Kafka (and with the default prefix), the AMQP
// content-type property on AMQP (the metadata key content-type, which
// package broker's AMQP publisher sends as that property), ce-datacontenttype
// on NATS, whose binding has no exception for it.
//
// The outbox metadata stays as it was: entoutbox consumers ignore these
// keys.
type CloudEvents struct {
	// Source is the source of every event: a URI reference naming the
	// producing service, e.g. "urn:shop:orders". Required.
	Source string
	// DataSchemaBase is the URI under which the generated JSON Schemas
	// (the ent package's entoutbox/) are published, e.g.
	// "https://contracts.example.com/orders/". dataschema is left out
	// when empty.
	DataSchemaBase string
	// Prefix starts every attribute's key: one of the CloudEventsPrefix
	// constants, the one of the broker's binding (CloudEventsPrefixFor
	// gives it for a broker URL's scheme). Empty is CloudEventsPrefixKafka.
	Prefix string
}

// The attribute key prefixes of the CloudEvents protocol bindings.
const (
	// CloudEventsPrefixKafka is the Kafka binding's: ce_id. The default;
	// the SDKs' Kafka bindings read it.
	CloudEventsPrefixKafka = "ce_"
	// CloudEventsPrefixNATS is the NATS binding's: ce-id. The Go SDK's
	// JetStream binding reads it as binary mode (with ce_ it takes the
	// payload for a structured event, and fails).
	CloudEventsPrefixNATS = "ce-"
	// CloudEventsPrefixAMQP is the AMQP binding's preferred separator:
	// cloudEvents_id. JMS clients can read no other.
	CloudEventsPrefixAMQP = "cloudEvents_"
	// CloudEventsPrefixAMQPColon is the AMQP binding's other separator:
	// cloudEvents:id, the only one some readers know (the Go SDK's AMQP
	// binding among them).
	CloudEventsPrefixAMQPColon = "cloudEvents:"
)

// CloudEventsPrefixFor is the attribute key prefix of the CloudEvents
// binding of a broker URL scheme (see package broker): NATS's for nats,
// AMQP's preferred for amqp and amqps, and Kafka's for every other, which
// has no binding of its own.
func CloudEventsPrefixFor(scheme string) string {
	switch strings.ToLower(scheme) {
	case "nats":
		return CloudEventsPrefixNATS
	case "amqp", "amqps":
		return CloudEventsPrefixAMQP
	}
	return CloudEventsPrefixKafka
}

// The CloudEvents attributes, as metadata keys with the default prefix
// (CloudEventsPrefixKafka).
const (
	MetaCloudEventsID          = "ce_id"
	MetaCloudEventsType        = "ce_type"
	MetaCloudEventsSource      = "ce_source"
	MetaCloudEventsTime        = "ce_time"
	MetaCloudEventsSpecVersion = "ce_specversion"
	MetaCloudEventsDataSchema  = "ce_dataschema"
	// MetaCloudEventsDataContentType holds datacontenttype with every
	// prefix but NATS's: the Kafka binding maps it to the content-type
	// header, the AMQP binding to the content-type property (section
	// 3.2.1 and 3.1.1 of each), not to a prefixed key.
	MetaCloudEventsDataContentType = "content-type"
)

// validate says what makes ce unusable, naming the field after prefix.
func (ce *CloudEvents) validate(prefix string) error {
	if ce == nil {
		return nil
	}
	if ce.Source == "" {
		return fmt.Errorf("relay: %sSource is empty; name the producing service, e.g. urn:shop:orders", prefix)
	}
	if _, err := url.Parse(ce.Source); err != nil {
		return fmt.Errorf("relay: %sSource %q is not a URI reference: %w", prefix, ce.Source, err)
	}
	if ce.DataSchemaBase != "" {
		u, err := url.Parse(ce.DataSchemaBase)
		if err != nil || !u.IsAbs() {
			return fmt.Errorf("relay: %sDataSchemaBase %q is not an absolute URI", prefix, ce.DataSchemaBase)
		}
	}
	switch ce.Prefix {
	case "", CloudEventsPrefixKafka, CloudEventsPrefixAMQP, CloudEventsPrefixAMQPColon:
	case CloudEventsPrefixNATS:
		// The NATS binding percent-encodes these characters in header
		// values, and readers differ in decoding them: refuse them rather
		// than send a value each reads its own way.
		for _, f := range [...]struct{ name, value string }{{"Source", ce.Source}, {"DataSchemaBase", ce.DataSchemaBase}} {
			if i := strings.IndexFunc(f.value, func(r rune) bool { return r <= ' ' || r == '"' || r == '%' || r >= 0x7f }); i >= 0 {
				return fmt.Errorf("relay: %s%s %q: character %q would be percent-encoded by the NATS binding (Prefix %q); leave it out",
					prefix, f.name, f.value, []rune(f.value[i:])[0], ce.Prefix)
			}
		}
	default:
		return fmt.Errorf("relay: %sPrefix %q is no CloudEvents binding's: want %q (Kafka), %q (NATS), %q or %q (AMQP)", prefix, ce.Prefix,
			CloudEventsPrefixKafka, CloudEventsPrefixNATS, CloudEventsPrefixAMQP, CloudEventsPrefixAMQPColon)
	}
	return nil
}

// CloudEventsType is the type of an event version: "order.paid.v2".
func CloudEventsType(name string, version int) string { return fmt.Sprintf("%s.v%d", name, version) }

// DataSchema is the dataschema of an event version: DataSchemaBase joined
// with the schema's path in the generated contract,
// schemas/<name>.v<version>.json; "" without a DataSchemaBase.
func (ce *CloudEvents) DataSchema(name string, version int) string {
	if ce.DataSchemaBase == "" {
		return ""
	}
	return strings.TrimSuffix(ce.DataSchemaBase, "/") + "/" + fmt.Sprintf("schemas/%s.v%d.json", name, version)
}

// attributes is what ce adds to every message: none when nil.
func (ce *CloudEvents) attributes() engine.Attributes {
	if ce == nil {
		return nil
	}
	return ce.set
}

// prefix is the attributes' key prefix: Prefix, or the default.
func (ce *CloudEvents) prefix() string {
	if ce.Prefix == "" {
		return CloudEventsPrefixKafka
	}
	return ce.Prefix
}

// set adds the attributes of one event to its metadata.
func (ce *CloudEvents) set(md message.Metadata, eventID, name string, version int, createdAt time.Time) {
	p := ce.prefix()
	md[p+"id"] = eventID
	md[p+"type"] = CloudEventsType(name, version)
	md[p+"source"] = ce.Source
	md[p+"time"] = createdAt.UTC().Format(time.RFC3339Nano)
	md[p+"specversion"] = "1.0"
	if p == CloudEventsPrefixNATS {
		md[p+"datacontenttype"] = "application/json"
	} else {
		md[MetaCloudEventsDataContentType] = "application/json"
	}
	if s := ce.DataSchema(name, version); s != "" {
		md[p+"dataschema"] = s
	}
}
