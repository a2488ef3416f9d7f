// Package listen holds the module's LISTEN connections: one per Listener,
// on a fixed set of channels, handing each notification to whoever waits
// on its channel. It reconnects with backoff, tells its waiters to look
// once after anything they may have missed (a new LISTEN, a lost
// connection), and can check, on its first LISTEN, that a notification
// sent through the database the rows are written to arrives (it does not
// behind a pooler in transaction mode): when it does not, it says so and
// the readers go on polling.
//
// Readers depend on Wakeups alone, which a database without LISTEN
// implements by polling (Polling).
//
//	l := listen.New(listen.Config{DB: db, Channels: []string{"orders"}, Logger: logger})
//	w := l.Wakeups()
//	defer w.Close()
//	go func() { _ = l.Run(ctx) }()
//	select {
//	case <-w.C("orders"): // rows were committed
//	case <-w.Missed(): // look once: a notification may have been missed
//	case <-poll.C:
//	}
package listen
