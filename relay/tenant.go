package relay

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// CloudEventsTenant is the name of the CloudEvents extension attribute
// holding the tenant (Config.Tenant): its key is the binding's prefix and
// this name, ce_tenant with the default prefix (MetaCloudEventsTenant).
// CloudEvents extension names are lowercase letters and digits.
const CloudEventsTenant = "tenant"

// MetaCloudEventsTenant is the tenant's CloudEvents attribute with the
// default prefix (CloudEventsPrefixKafka).
const MetaCloudEventsTenant = CloudEventsPrefixKafka + CloudEventsTenant

// maxTenant bounds a tenant's name: a PostgreSQL identifier's length, so
// that one may name a schema after it.
const maxTenant = 63

// CheckTenant refuses a tenant name a broker's headers could not carry as
// it is: only letters, digits, '.', '_' and '-' (no character the NATS
// CloudEvents binding would percent-encode), at most 63 bytes, starting
// with a letter or digit. The empty name is no tenant, and allowed.
func CheckTenant(name string) error {
	if len(name) > maxTenant {
		return fmt.Errorf("tenant %q is %d bytes, at most %d", name, len(name), maxTenant)
	}
	for i, r := range name {
		letterOrDigit := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !letterOrDigit && (i == 0 || r != '.' && r != '_' && r != '-') {
			return fmt.Errorf("tenant %q: character %q at byte %d; want letters, digits, '.', '_' and '-', starting with a letter or digit",
				name, r, i)
		}
	}
	return nil
}

// attributes is what a relay adds to every message's metadata: the
// tenant, when it has one, and the CloudEvents attributes, when on (the
// tenant among them as an extension).
func attributes(tenant string, ce *CloudEvents) engine.Attributes {
	ceAttrs := ce.attributes()
	if tenant == "" {
		return ceAttrs
	}
	return func(md message.Metadata, eventID, name string, version int, createdAt time.Time) {
		md[events.MetaTenant] = tenant
		if ceAttrs != nil {
			ceAttrs(md, eventID, name, version, createdAt)
			md[ce.prefix()+CloudEventsTenant] = tenant
		}
	}
}
