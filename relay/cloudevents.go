package relay

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// CloudEvents makes every relayed message a CloudEvents 1.0 event in binary
// content mode: the payload is the event's data and the attributes travel
// as ce_ prefixed metadata (as the Kafka and AMQP bindings carry them), so
// consumers in other languages and CloudEvents SDKs read them:
//
//	ce_id               the event id
//	ce_type             wire name and version, e.g. order.paid.v2
//	ce_source           Source
//	ce_time             when the event was written (RFC 3339)
//	ce_specversion      1.0
//	ce_datacontenttype  application/json
//	ce_dataschema       DataSchemaBase + the version's schema path
//	                    (schemas/order.paid.v2.json), when DataSchemaBase is set
//
// The outbox metadata stays as it was: entoutbox consumers ignore the ce_
// keys.
type CloudEvents struct {
	// Source is the ce_source of every event: a URI reference naming the
	// producing service, e.g. "urn:shop:orders". Required.
	Source string
	// DataSchemaBase is the URI under which the generated JSON Schemas
	// (the ent package's entoutbox/ directory) are published, e.g.
	// "https://contracts.example.com/orders/". ce_dataschema is left out
	// when empty.
	DataSchemaBase string
}

// The CloudEvents attributes, as binary content mode metadata keys.
const (
	MetaCloudEventsID              = "ce_id"
	MetaCloudEventsType            = "ce_type"
	MetaCloudEventsSource          = "ce_source"
	MetaCloudEventsTime            = "ce_time"
	MetaCloudEventsSpecVersion     = "ce_specversion"
	MetaCloudEventsDataContentType = "ce_datacontenttype"
	MetaCloudEventsDataSchema      = "ce_dataschema"
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
	return nil
}

// CloudEventsType is the ce_type of an event version: "order.paid.v2".
func CloudEventsType(name string, version int) string { return fmt.Sprintf("%s.v%d", name, version) }

// DataSchema is the ce_dataschema of an event version: DataSchemaBase
// joined with the schema's path in the generated contract,
// schemas/<name>.v<version>.json; "" without a DataSchemaBase.
func (ce *CloudEvents) DataSchema(name string, version int) string {
	if ce.DataSchemaBase == "" {
		return ""
	}
	return strings.TrimSuffix(ce.DataSchemaBase, "/") + "/" + fmt.Sprintf("schemas/%s.v%d.json", name, version)
}

// set adds the attributes of one event to its metadata. A nil ce adds none.
func (ce *CloudEvents) set(md message.Metadata, eventID, name string, version int, createdAt time.Time) {
	if ce == nil {
		return
	}
	md[MetaCloudEventsID] = eventID
	md[MetaCloudEventsType] = CloudEventsType(name, version)
	md[MetaCloudEventsSource] = ce.Source
	md[MetaCloudEventsTime] = createdAt.UTC().Format(time.RFC3339Nano)
	md[MetaCloudEventsSpecVersion] = "1.0"
	md[MetaCloudEventsDataContentType] = "application/json"
	if s := ce.DataSchema(name, version); s != "" {
		md[MetaCloudEventsDataSchema] = s
	}
}
