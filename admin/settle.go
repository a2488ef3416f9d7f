package admin

import (
	"context"
	"fmt"
)

// Position is a consumer's position on one aggregate that a repair moved
// or held (see "Repairs and the aggregate's order" in the package doc).
type Position struct {
	Consumer      string `json:"consumer"`
	Topic         string `json:"topic"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	LastSeq       int64  `json:"last_seq"`           // the last event applied or skipped
	HeldSeq       int64  `json:"held_seq,omitempty"` // the event it is held at; 0 when it is not
}

// aggregateKey names the positions a letter's repair settles.
type aggregateKey struct{ source, topic, aggregateType, aggregateID string }

func keyOf(d DeadLetter) (aggregateKey, bool) {
	k := aggregateKey{d.Source, d.Topic, d.AggregateType, d.AggregateID}
	return k, d.AggregateSeq > 0 && d.AggregateType != "" && d.AggregateID != "" && d.Source != ""
}

// settle settles, in tx, the positions the repair of letters of k may
// have freed or held: its consumer's on its aggregate, or every
// consumer's for a relay letter (its event was never sent to any). It
// returns those that changed.
func (a *Admin) settle(ctx context.Context, tx tx, k aggregateKey) ([]Position, error) {
	exists, err := a.tables.TableExists(ctx, tx, a.tables.Positions)
	if err != nil || !exists {
		return nil, err
	}
	consumers := []string{k.source}
	if k.source == relaySource {
		if consumers, err = a.tables.PositionsOf(ctx, tx, k.topic, k.aggregateType, k.aggregateID); err != nil {
			return nil, err
		}
	}
	var out []Position
	for _, c := range consumers {
		s, err := a.tables.Settle(ctx, tx, c, k.topic, k.aggregateType, k.aggregateID)
		if err != nil {
			return nil, err
		}
		if s.Changed {
			out = append(out, Position{Consumer: c, Topic: k.topic, AggregateType: k.aggregateType,
				AggregateID: k.aggregateID, LastSeq: s.LastSeq, HeldSeq: s.HeldSeq})
		}
	}
	return out, nil
}

// relaySource is the source of the relay's dead letters.
const relaySource = "relay"

// String says where the position is, for the command's output.
func (p Position) String() string {
	s := fmt.Sprintf("position of %s on %s %s/%s: at seq %d", p.Consumer, p.Topic, p.AggregateType, p.AggregateID, p.LastSeq)
	if p.HeldSeq > 0 {
		return s + fmt.Sprintf(", held at seq %d behind its open dead letter (retry it, or discard it to skip it)", p.HeldSeq)
	}
	return s + ", not held: its later events are applied"
}
