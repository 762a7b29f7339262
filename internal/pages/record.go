package pages

import (
	"encoding/binary"
	"errors"
	"time"
)

// A record's body: the id (a varint), a bit set of the NULL-able fields present, then every field
// in a fixed order: integers as varints, times as microseconds since the Unix epoch (UTC, as the
// database stores DATETIME(6)), strings and bytes as their length and their bytes. The reference
// is followed by the routing hash (ReferenceNeedle), so that a statement can find a reference's
// columns by their bytes.

const (
	hasValue = 1 << iota
	hasProcessedAt
	hasProcessedBy
	hasLastError
	hasNextAttemptAt
	hasURL
	hasPayload
	hasReferenceID
	hasMaxRetries
	hasPosition
	hasClaimID
	hasWorkerID
)

func encodeRow(b []byte, r Row) []byte {
	b = binary.AppendVarint(b, r.ID)
	var set uint64
	flag := func(present bool, bit uint64) {
		if present {
			set |= bit
		}
	}
	flag(r.Value != nil, hasValue)
	flag(r.ProcessedAt != nil, hasProcessedAt)
	flag(r.ProcessedBy != nil, hasProcessedBy)
	flag(r.LastError != nil, hasLastError)
	flag(r.NextAttemptAt != nil, hasNextAttemptAt)
	flag(r.URL != nil, hasURL)
	flag(r.Payload != nil, hasPayload)
	flag(r.ReferenceID != nil, hasReferenceID)
	flag(r.MaxRetries != nil, hasMaxRetries)
	flag(r.Position != nil, hasPosition)
	flag(r.ClaimID != nil, hasClaimID)
	flag(r.WorkerID != nil, hasWorkerID)
	b = binary.AppendUvarint(b, set)
	b = binary.AppendUvarint(b, uint64(r.RoutingHash))
	b = appendString(b, r.Kind)
	b = binary.AppendVarint(b, int64(r.State))
	b = appendTime(b, r.CreatedAt)
	b = binary.AppendVarint(b, r.ProcessCount)
	b = binary.AppendVarint(b, r.Attempts)
	if r.Value != nil {
		b = appendString(b, *r.Value)
	}
	if r.ProcessedAt != nil {
		b = appendTime(b, *r.ProcessedAt)
	}
	if r.ProcessedBy != nil {
		b = appendString(b, *r.ProcessedBy)
	}
	if r.LastError != nil {
		b = appendString(b, *r.LastError)
	}
	if r.NextAttemptAt != nil {
		b = appendTime(b, *r.NextAttemptAt)
	}
	if r.URL != nil {
		b = appendString(b, *r.URL)
	}
	if r.Payload != nil {
		b = appendString(b, string(r.Payload))
	}
	if r.ReferenceID != nil {
		b = append(b, ReferenceNeedle(*r.ReferenceID, r.RoutingHash)...)
	}
	if r.MaxRetries != nil {
		b = binary.AppendVarint(b, *r.MaxRetries)
	}
	if r.Position != nil {
		b = binary.AppendVarint(b, *r.Position)
	}
	if r.ClaimID != nil {
		b = appendString(b, *r.ClaimID)
	}
	if r.WorkerID != nil {
		b = appendString(b, *r.WorkerID)
	}
	b = binary.AppendUvarint(b, uint64(len(r.TaskAttempts)))
	for _, a := range r.TaskAttempts {
		b = binary.AppendVarint(b, a.Number)
		b = appendTime(b, a.StartedAt)
		b = binary.AppendVarint(b, a.DurationUS)
		b = binary.AppendVarint(b, a.Status)
		if a.Error != nil {
			b = append(b, 1)
			b = appendString(b, *a.Error)
		} else {
			b = append(b, 0)
		}
		b = appendString(b, a.ClaimID)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte { return binary.AppendVarint(b, t.UnixMicro()) }

// ReferenceNeedle is how a task's reference is stored in a record: its length, its bytes and its
// routing hash (4 bytes, big-endian). A statement looks for these bytes in a column to find the
// columns that hold a reference's tasks (internal/mysql/pagestore/pages.sql, PagesOfReference): with the length before
// and the hash after, another field (a kind, a url) never matches them, and a payload only if it
// holds them on purpose; the reader decodes and checks every record it gets anyway.
func ReferenceNeedle(ref string, hash uint32) []byte {
	b := appendString(nil, ref)
	return binary.BigEndian.AppendUint32(b, hash)
}

var errCorrupt = errors.New("pages: a corrupt record")

// reader reads a record's fields in order; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) skip(n int) {
	if r.err != nil || len(r.b) < n {
		r.err = errCorrupt
		return
	}
	r.b = r.b[n:]
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errCorrupt
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) time() time.Time { return time.UnixMicro(r.varint()).UTC() }

func decodeRow(body []byte) (Row, error) {
	rd := &reader{b: body}
	var r Row
	r.ID = rd.varint()
	set := rd.uvarint()
	hash := rd.uvarint()
	if hash > 1<<32-1 {
		return Row{}, errCorrupt
	}
	r.RoutingHash = uint32(hash)
	r.Kind = rd.string()
	r.State = int(rd.varint())
	r.CreatedAt = rd.time()
	r.ProcessCount = rd.varint()
	r.Attempts = rd.varint()
	str := func(bit uint64) *string {
		if set&bit == 0 {
			return nil
		}
		s := rd.string()
		return &s
	}
	tm := func(bit uint64) *time.Time {
		if set&bit == 0 {
			return nil
		}
		t := rd.time()
		return &t
	}
	num := func(bit uint64) *int64 {
		if set&bit == 0 {
			return nil
		}
		v := rd.varint()
		return &v
	}
	r.Value = str(hasValue)
	r.ProcessedAt = tm(hasProcessedAt)
	r.ProcessedBy = str(hasProcessedBy)
	r.LastError = str(hasLastError)
	r.NextAttemptAt = tm(hasNextAttemptAt)
	r.URL = str(hasURL)
	if p := str(hasPayload); p != nil {
		r.Payload = []byte(*p)
	}
	r.ReferenceID = str(hasReferenceID)
	if r.ReferenceID != nil {
		rd.skip(4) // the routing hash again: the needle's tail (ReferenceNeedle)
	}
	r.MaxRetries = num(hasMaxRetries)
	r.Position = num(hasPosition)
	r.ClaimID = str(hasClaimID)
	r.WorkerID = str(hasWorkerID)
	n := rd.uvarint()
	if n > uint64(len(rd.b)) {
		return Row{}, errCorrupt
	}
	for range n {
		a := Attempt{Number: rd.varint(), StartedAt: rd.time(), DurationUS: rd.varint(), Status: rd.varint()}
		if rd.byte() == 1 {
			e := rd.string()
			a.Error = &e
		}
		a.ClaimID = rd.string()
		r.TaskAttempts = append(r.TaskAttempts, a)
	}
	if rd.err == nil && len(rd.b) != 0 {
		rd.err = errCorrupt
	}
	if rd.err != nil {
		return Row{}, rd.err
	}
	return r, nil
}
