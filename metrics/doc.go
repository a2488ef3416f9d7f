// Package metrics holds entoutbox's Prometheus metrics. Nothing is
// registered globally: New registers every collector on the registerer it
// is given, and the parts of the library that report are told of the
// *Metrics explicitly (nil, the default everywhere, turns them off):
//
//	m, err := metrics.New(prometheus.DefaultRegisterer)
//	relay.New(relay.Config{..., Metrics: m})                 // the relay
//	ent.NewOutboxHandlers(client, consumer.WithMetrics(m))   // consumers
//	outbox.SetMetrics(m)                                     // Emit, process-wide
//	m.WatchBacklog(db, metrics.BacklogConfig{})              // backlog gauges
//
// Labels are bounded: topic, event, consumer, result, reason, source; never
// an event, aggregate or relay id. Topics are the outbox topics, without
// the relay's TopicPrefix.
//
// Backlog, sampled on scrape at most every BacklogConfig.MinInterval
// (5 s), with index-backed queries bounded by BacklogConfig.MaxCount:
//
//	entoutbox_outbox_pending_events{topic}                gauge
//	entoutbox_outbox_oldest_pending_age_seconds           gauge, 0 when nothing is pending
//	entoutbox_dead_letters{source="relay"|"consumer"}     gauge, open letters (not retried, not discarded)
//	entoutbox_relays_holding_partitions                   gauge, fast relays with unexpired leases
//	entoutbox_wal_slot_retained_bytes{slot}               gauge, WAL the server keeps for a WAL relay's slot
//	entoutbox_wal_slot_active{slot}                       gauge, 1 while a WAL relay streams the slot, else 0
//	entoutbox_consumer_held_aggregates{consumer}          gauge, aggregates held behind a dead letter
//	entoutbox_consumer_lag_events{consumer,topic}         gauge, numbered events the consumer has not handled
//	entoutbox_consumer_lag_oldest_seconds{consumer,topic} gauge, age of the oldest of them; 0 when none
//	entoutbox_scheduled_waiting_events                    gauge, scheduled events not moved to the outbox nor cancelled
//	entoutbox_scheduled_overdue_events                    gauge, those of them due and not moved yet
//	entoutbox_scheduled_overdue_seconds                   gauge, how long the earliest has been due; 0 when none
//	entoutbox_scheduled_cancelled_events                  gauge, cancelled, kept until cleanup
//	entoutbox_backlog_sample_age_seconds                  gauge, seconds since the last sample that worked
//	entoutbox_backlog_sample_errors_total                 counter, samples that failed
//
// While the database cannot be read the sampled gauges are absent, not
// frozen at their last values: a sample that fails drops them until one
// works again (Metrics.BacklogError says why), and
// entoutbox_backlog_sample_age_seconds grows. The rules in deploy/ alert on
// it: a relay that cannot read its database is not one with nothing to do.
//
// The lag gauges cover the consumer names with positions, on the topics
// they have positions on. Their count reads every aggregate's counter and
// position, so they are sampled beside the scrapes, no sooner than
// twenty times the last sample's duration after it; the age is a lower
// bound when some of the events' outbox rows are gone or beyond the
// MaxCount newest rows, and absent while none is found (see
// docs/consumer-order.md).
//
// The scheduled gauges read the scheduled events' table
// (BacklogConfig.ScheduledTable) by the database's clock, and are absent
// without it. A relay moves a due event into the outbox within moments:
// an overdue count or age that stays above 0 tells no relay promotes them.
//
// The WAL gauges appear once a WAL relay ran on the table; rows the WAL
// path delivered (delivered_at stays NULL) are not counted as pending.
// While no relay streams a slot, its retained bytes grow without bound:
// alert on entoutbox_wal_slot_active == 0 or on the retained bytes.
//
// Relay:
//
//	entoutbox_relay_published_total{topic,result="ok"|"error"}     counter
//	entoutbox_relay_publish_duration_seconds{topic}                histogram
//	entoutbox_relay_delivery_lag_seconds{topic}                    histogram, row created_at to broker ack
//	entoutbox_scheduled_lateness_seconds{topic}                    histogram, a scheduled event's due time to broker ack
//	entoutbox_scheduled_promoted_total                             counter, scheduled events moved into the outbox once due
//	entoutbox_scheduled_promote_failures_total                     counter, failed moves (retried with backoff)
//	entoutbox_relay_retries_total{topic}                           counter, failed publishes tried again
//	entoutbox_relay_dead_lettered_total{reason="max_attempts"|"permanent"|"malformed"}  counter
//	entoutbox_relay_claim_duration_seconds                         histogram (fast path)
//	entoutbox_relay_claim_rows                                     histogram (fast path)
//	entoutbox_relay_partitions_owned                               gauge, this process's fast relays
//	entoutbox_relay_lease_renewal_failures_total                   counter (fast path)
//
// The compatible path reports published_total, publish_duration_seconds
// and dead_lettered_total{reason="malformed"}.
//
// scheduled_lateness_seconds counts from the due time the promotion wrote
// into the row's headers (events.MetaDeliverAt), which a retried dead
// letter keeps: its retry counts as late as it went. The relay's clock
// reads the acknowledgement and the database's wrote the due time; a
// relay's clock behind the database's counts as 0.
//
// Consumers:
//
//	entoutbox_consumer_deliveries_total{consumer,event,result="handled"|"duplicate"|"retried"|"dead_lettered"}  counter
//	entoutbox_consumer_dead_lettered_total{consumer,reason}        counter, events set aside, by reason:
//	    max_attempts (the handler failed MaxAttempts times), malformed (metadata or payload unreadable,
//	    or a version newer than the code knows), unknown_event (no declaration names it),
//	    held (its aggregate is held behind an earlier dead letter), previous_missing (its
//	    aggregate's previous event never arrived)
//	entoutbox_consumer_handler_duration_seconds{consumer,event}    histogram, one try, its transaction included
//	entoutbox_consumer_event_age_seconds{consumer,event}           histogram, outbox_created_at to handled
//	entoutbox_consumer_redeliveries_total{consumer}                counter, messages the broker delivered again
//	entoutbox_consumer_gap_waits_total{consumer}                   counter, deliveries that waited for their aggregate's previous event
//	entoutbox_consumer_shed_turns_total{consumer}                  counter, waiting deliveries nacked to free a full window
//	    for their aggregate's earlier events (they come again after GapWait)
//	entoutbox_consumer_stalled{consumer,topic}                     gauge, 1 while the instance holds events of the topic that
//	    wait and has applied none of it for StallAfter (logged once when it begins)
//	entoutbox_consumer_batch_events                                histogram, events one handler transaction applied
//
// Redeliveries come from the delivery count the broker reports (NATS
// JetStream; other brokers where their subscriber sets
// events.MetaDeliveryCount); they are zero without a fault.
//
// Emit:
//
//	entoutbox_emit_events_total{event}     counter, after the transaction commits
//
// An event name a consumer does not declare is counted as event="unknown".
package metrics
