package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/heraldmq/herald/client"
)

// `herald sub STREAM --group G` is a push member of a consumer group: it
// prints each delivery's records, flushes them, and then acks the delivery
// with its cursor, so a record is acked only once it has been written out.
// A member that dies between the two leaves its delivery unacked, and the
// group delivers those records again: delivery is at least once.

// groupMember is what consumeGroup needs of a *client.GroupMember
// (tests use a fake).
type groupMember interface {
	// Next returns the next delivery (client.GroupMember.Next).
	Next(ctx context.Context) (client.Delivery, error)
	// Ack acks a delivery (client.GroupMember.Ack).
	Ack(ctx context.Context, d client.Delivery) error
}

// runGroup runs `herald sub --group`: it joins the group, consumes until
// --count records or an interrupt, and leaves the group (Close), which hands
// whatever it holds unacked back to the group at once.
func (cmd *subCmd) runGroup(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return interrupted(ctx, err)
	}
	defer c.Close()
	var m *client.GroupMember
	err = cmd.waitForStream(ctx, stderr, func() error {
		jctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
		defer cancel()
		var err error
		m, err = c.Group(cmd.name, cmd.group).Subscribe(jctx, cmd.groupOptions()...)
		return err
	})
	if err != nil {
		if err = interrupted(ctx, err); err != nil {
			return fmt.Errorf("join group %s on %s: %w", cmd.group, cmd.name, err)
		}
		return nil
	}
	defer m.Close()
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	return cmd.consumeGroup(ctx, m, out, stderr)
}

// groupOptions returns the Group.Subscribe options the flags ask for.
func (cmd *subCmd) groupOptions() []client.GroupSubscribeOption {
	opts := []client.GroupSubscribeOption{client.WithWindow(cmd.window), client.WithMaxPerPush(cmd.maxPerPush), client.WithHeartbeat(cmd.heartbeat)}
	if cmd.member != "" {
		opts = append(opts, client.WithMember(cmd.member))
	}
	return opts
}

// consumeGroup prints the records of each delivery of m, flushes out and
// then acks the delivery, until --count records are printed or ctx ends
// (which is a clean exit). A delivery that --count cuts short is not acked:
// all its records go back to the group when the member leaves. An ack is
// sent even if ctx ended meanwhile, since its records were printed. An ack
// the node refuses as stale (the member lost the delivery's shard) is
// reported on stderr and consuming goes on: the group delivers those records
// again. So is an ack whose outcome is unknown (the connection was lost with
// it in flight, or --timeout passed while the client reconnects): the group
// delivers its records again unless it landed.
func (cmd *subCmd) consumeGroup(ctx context.Context, m groupMember, out *bufio.Writer, stderr io.Writer) error {
	printed := 0
	rw := &recordWriter{format: format(cmd.json, cmd.yaml), w: out}
	for cmd.count == 0 || printed < cmd.count {
		d, err := m.Next(ctx)
		if err != nil {
			return interrupted(ctx, err)
		}
		n := len(d.Records)
		if cmd.count > 0 {
			n = min(n, cmd.count-printed)
		}
		for _, rec := range d.Records[:n] {
			if rw.format.structured() {
				err = rw.write(groupRecordJSONOf(rec))
			} else {
				err = writeEventText(out, eventOf(rec))
			}
			if err != nil {
				return err
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
		printed += n
		if n < len(d.Records) {
			return nil // --count reached inside the delivery: not acked
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmd.conn.timeout)
		err = m.Ack(actx, d)
		cancel()
		switch {
		case errors.Is(err, client.ErrStaleCursor):
			fmt.Fprintf(stderr, "herald sub: %d records not acked, the group delivers them again: %s\n",
				len(d.Records), strings.ReplaceAll(err.Error(), "herald: ", ""))
			continue
		case ctx.Err() == nil && (errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded)):
			// The connection was lost with the ack in flight, or the node
			// did not answer within --timeout (the client is reconnecting):
			// the member carries on, and the records come back after their
			// visibility timeout unless the ack landed.
			fmt.Fprintf(stderr, "herald sub: %d records may not be acked, the group delivers them again unless the ack landed: %s\n",
				len(d.Records), strings.ReplaceAll(err.Error(), "herald: ", ""))
			continue
		}
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	return nil
}

// eventOf returns rec as an Event, to print it as herald sub prints one.
func eventOf(rec client.GroupRecord) client.Event {
	return client.Event{Shard: rec.Shard, Offset: rec.Offset, Timestamp: rec.Timestamp, Key: rec.Key, Headers: rec.Headers, Payload: rec.Payload}
}

// groupRecordJSON is the --json form of a group record: an event's fields
// and the delivery attempt.
type groupRecordJSON struct {
	eventJSON
	Attempts uint32 `json:"attempts"`
}

// groupRecordJSONOf returns the json and yaml form of rec.
func groupRecordJSONOf(rec client.GroupRecord) groupRecordJSON {
	return groupRecordJSON{eventJSON: eventJSONOf(eventOf(rec)), Attempts: rec.Attempts}
}

// writeGroupRecordJSON prints rec as one JSON line.
func writeGroupRecordJSON(w *bufio.Writer, rec client.GroupRecord) error {
	return writeJSONLine(w, groupRecordJSONOf(rec))
}
