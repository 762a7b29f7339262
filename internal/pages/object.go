package pages

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
)

// An archived page: the page's Columns columns, as the page rows held them, in one
// object of the history's bucket, so that a read of one archived event is one GET of its page and
// the decoding of its own record (FindInObject: the column is found by the lengths in the header,
// and Find skips the column's other records without decoding them).
//
// The layout: the magic "EOPG", the format's version (1), the page number (an unsigned varint),
// each column's length (Columns unsigned varints), the CRC-32C of the columns, then the columns one
// after the other. The page number makes an object read under another page's key an error, and
// the CRC a torn or corrupt object one.

var objectMagic = []byte("EOPG\x01")

// castagnoli is the CRC table, built the first time an object is written or read: building it
// (with the tables hash/crc32 makes for the CPU's CRC instruction) took 0.1-0.15 ms of every
// function's start-up when it was built at initialisation, and only archiving and reading archived
// pages need it.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// EncodeObject returns the object of page holding cols (each a column in the page format; nil is
// an empty column).
func EncodeObject(page int64, cols *[Columns][]byte) []byte {
	n := 0
	for _, c := range cols {
		n += max(len(c), 1)
	}
	b := make([]byte, 0, len(objectMagic)+binary.MaxVarintLen64*(Columns+1)+4+n)
	b = append(b, objectMagic...)
	b = binary.AppendUvarint(b, uint64(page))
	for _, c := range cols {
		b = binary.AppendUvarint(b, uint64(max(len(c), 1)))
	}
	sum := crc32.New(castagnoli())
	for _, c := range cols {
		if len(c) == 0 {
			c = Empty()
		}
		_, _ = sum.Write(c)
	}
	b = binary.BigEndian.AppendUint32(b, sum.Sum32())
	for _, c := range cols {
		if len(c) == 0 {
			c = Empty()
		}
		b = append(b, c...)
	}
	return b
}

// ObjectColumns returns the columns of page's object obj, checked against its CRC.
func ObjectColumns(obj []byte, page int64) ([Columns][]byte, error) {
	var cols [Columns][]byte
	if !bytes.HasPrefix(obj, objectMagic) {
		return cols, errors.New("pages: not an archived page")
	}
	b := obj[len(objectMagic):]
	p, k := binary.Uvarint(b)
	if k <= 0 || int64(p) != page {
		return cols, fmt.Errorf("pages: the object of page %d says page %d", page, p)
	}
	b = b[k:]
	var lens [Columns]uint64
	total := uint64(0)
	for i := range lens {
		l, k := binary.Uvarint(b)
		if k <= 0 {
			return cols, errors.New("pages: a truncated archived page")
		}
		lens[i], total, b = l, total+l, b[k:]
	}
	if len(b) < 4 || uint64(len(b)-4) != total {
		return cols, errors.New("pages: a truncated archived page")
	}
	want := binary.BigEndian.Uint32(b)
	b = b[4:]
	if crc32.Checksum(b, castagnoli()) != want {
		return cols, errors.New("pages: an archived page whose checksum does not match")
	}
	for i, l := range lens {
		cols[i], b = b[:l:l], b[l:]
	}
	return cols, nil
}

// FindInObject returns id's row from page's object obj, if it holds it: it decodes that record
// alone.
func FindInObject(obj []byte, id int64) (Row, bool, error) {
	cols, err := ObjectColumns(obj, PageOf(id))
	if err != nil {
		return Row{}, false, err
	}
	return Find(cols[ColumnOf(id)], id)
}

// MergeColumns returns one column holding the records of every column of cols, in id order; of
// records with the same id, the last column's is kept. A record is copied as it is, not decoded.
func MergeColumns(cols ...[]byte) ([]byte, error) {
	type rec struct {
		id   int64
		body []byte
	}
	var all []rec
	for _, c := range cols {
		if len(c) == 0 {
			continue
		}
		err := walk(c, func(id int64, body []byte) (bool, error) {
			all = append(all, rec{id, body})
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	// Stable by id, so that of equal ids the last column's comes last.
	slices.SortStableFunc(all, func(a, b rec) int { return cmp.Compare(a.id, b.id) })
	out := Empty()
	for i, r := range all {
		if i+1 < len(all) && all[i+1].id == r.id {
			continue
		}
		out = binary.AppendUvarint(out, uint64(len(r.body)))
		out = append(out, r.body...)
	}
	return out, nil
}

// Count returns how many records a column holds.
func Count(col []byte) (int, error) {
	n := 0
	err := walk(col, func(int64, []byte) (bool, error) { n++; return true, nil })
	return n, err
}
