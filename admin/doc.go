// Package admin repairs and inspects an outbox: it lists, retries and
// discards dead letters, replays delivered events to the broker and reads
// the status of the outbox. `entoutbox dead-letters`, `entoutbox replay` and
// `entoutbox status` are its command line. It works on a *sql.DB, on the
// tables of package schema under the names the application gave them:
//
//	a, err := admin.Open(db, admin.Tables{Outbox: "orders_outbox", DeadLetters: "orders_dead_letters"})
//
// and returns its own types (DeadLetter, Result, Status), which print as
// JSON as the command prints them. Its SQL on the outbox tables is that of
// the relay, the metrics and the console (internal/outboxdb): a row is
// delivered when any read path delivered it, the WAL path included.
//
// # Retrying a dead letter
//
// Every retry, of a relay's dead letter or of a consumer's, puts the event
// back in the outbox as a pending row with its original event id, and the
// relay publishes it again:
//
//   - A relay dead letter: the relay moved the row out of the outbox when
//     it gave up, so the row is written again from the dead letter.
//   - A consumer dead letter: the outbox row that was delivered, when it is
//     still retained, is deleted and written again at the end of the
//     outbox (pending); when retention removed it, it is written from the
//     dead letter. The other consumers have the event's id in their
//     processed events and skip it as a duplicate; the consumer that gave
//     up has no record of it and handles it.
//
// The row is written again rather than reset in place so that every relay
// read path finds it: the compatible path reads on from its offset and
// would never go back to a row reset below it, and the WAL path reads
// inserts only. A retried event is
// therefore delivered after the events of its aggregate that went out
// while it waited in the dead letters.
//
// A consumer skips an event that has a dead letter of its own with the
// event's id (consumer.RecordDelivery). So a retry clears the letter's
// event_id and keeps the id in retried_event_id, beside retried_at: the
// letter stays, marked, and the consumer handles the event again. If it
// fails again, the consumer writes a new dead letter.
//
// A retry is safe to repeat: a letter already retried or discarded is left
// alone, an event whose outbox row is still pending is not written twice,
// and consumers dedupe by event id, so no consumer's effect happens twice.
// Retry within the processed-events retention (entoutbox cleanup
// --processed-retention): once another consumer's record of the event is
// deleted, it handles the event again.
//
// A retry or replay reaches consumers however soon after the first
// delivery, on every broker: NATS JetStream drops a message whose
// Nats-Msg-Id it stored within the stream's duplicate window, and that id
// is the message's publish id (events.MetaPublishID), one per outbox row
// (a retry writes a new row) and one per replay, while the event id
// consumers dedupe on stays the same.
//
// # Discarding a dead letter
//
// Discard marks a letter (discarded_at, discard_note) and deletes nothing.
// Its consumer keeps skipping the event, also when it is replayed.
//
// # Repairs and the aggregate's order
//
// Discarding a letter skips its event in its aggregate's order: in the
// same transaction, the consumer's position (every consumer's, for a
// relay letter) moves past it when the aggregate waits for it, and past
// the discarded events after it; the aggregate is then held at its next
// event when that one's letter is open (set aside behind the held one),
// and goes on otherwise. A letter behind the held one is skipped when the
// consumer reaches it. Retry settles the position the same way. Each
// Result lists the Positions its repair moved or held. Retried
// and discarded letters are settled: PurgeSettled deletes those settled
// longer ago than a retention; open letters are never deleted.
//
// # Replaying delivered events
//
// Replay publishes retained delivered events (the relay's
// --delete-delivered keeps none) straight to the broker, with their
// original event ids and the message the relay builds (under a publish id
// of the replay's own), in id order, which is
// insertion order and so per-aggregate order. A new consumer, or one whose
// read model was rebuilt and its processed events and positions
// (outbox_consumer_positions) cleared, handles them in order; a consumer
// that handled them skips them as duplicates. A replay that begins after
// an aggregate's first events starts the aggregate there once the
// consumer waited consumer.Config.StartAfter for the earlier ones.
package admin
