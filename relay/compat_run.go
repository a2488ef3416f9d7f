package relay

import (
	"context"

	"github.com/entoutbox/entoutbox/relay/internal/compatpath"
)

// runCompatible runs the compatible path, fed the relay's settings: the
// stock watermill-sql subscriber feeding Watermill's forwarder.
func (r *Relay) runCompatible(ctx context.Context) error {
	c := r.cfg
	return compatpath.Run(ctx, compatpath.Settings{Publishing: r.publishSettings(), DB: c.DB, Table: c.Table, Dialect: dialectOf(c.DB),
		DeadLetterTable: c.DeadLetterTable, ConsumerGroup: c.Compatible.ConsumerGroup, PollInterval: c.PollInterval,
		RetryInterval: c.RetryInterval, BatchSize: c.BatchSize, CloseTimeout: c.CloseTimeout,
		Attributes: attributes(c.Tenant, c.CloudEvents)})
}
