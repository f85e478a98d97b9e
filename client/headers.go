package client

import "github.com/heraldmq/herald/net/wire"

// Header is one header of a record: a name and a value. A record carries
// its headers as an ordered list, as they were published; a name may
// appear more than once.
type Header struct {
	// Key is the header's name.
	Key string
	// Value is the header's value; a received one shares the frame it came
	// in (copy it to keep it past the next call that receives).
	Value []byte
}

// Headers are a record's headers, in the order they were published. The
// same type goes in (WithHeaders) and comes out (Event.Headers,
// GroupRecord.Headers), so a record's headers can be published again as
// they are: WithHeaders(ev.Headers...).
type Headers []Header

// Get returns the value of the last header named key, or nil when there is
// none.
func (h Headers) Get(key string) []byte {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value
		}
	}
	return nil
}

// headersOf returns a received record's headers (nil when it has none). It
// copies the list, which the record iterator reuses, not the values.
func headersOf(rec []wire.RecordHeader) Headers {
	if len(rec) == 0 {
		return nil
	}
	h := make(Headers, len(rec))
	for i, r := range rec {
		h[i] = Header(r)
	}
	return h
}
