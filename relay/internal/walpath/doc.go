// Package walpath is the relay's WAL read path: it reads committed inserts
// into the outbox table from a logical replication slot (pgoutput), in
// commit order, and hands them out to the engine (package engine) one per
// aggregate at a time. The slot's confirmed position moves only past rows
// delivered or dead-lettered; the path never writes the rows it delivers,
// but records which transactions it delivered in <table>_wal_progress
// (progress.go). The rows committed before the slot's start, which the
// stream never carries, it sends itself first (catchup.go).
//
// Files: source.go runs the source (one session at a time, standby while
// another relay streams the slot), stream.go is a session (the stream, the
// slot, the dead letters), window.go its books.
//
// It knows nothing of package relay: the relay hands it its Settings.
package walpath
