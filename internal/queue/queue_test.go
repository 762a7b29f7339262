package queue_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// Decode accepts exactly the two shapes Encode and EncodeIDs write, and nothing else: a message that
// is anything else is corrupted, and must fail rather than be processed as some other event.
func TestDecodeRejectsAnythingButPositiveIDs(t *testing.T) {
	t.Parallel()
	tooMany := make([]int64, queue.MaxIDs+1)
	for i := range tooMany {
		tooMany[i] = int64(i + 1)
	}
	for _, body := range []string{
		// not an object, or not one
		"", " ", "null", "[]", `"x"`, "1", "{}", `[{"id":1}]`, `{"id":1}{"id":2}`, `{"id":1} x`, `{"id":1}]`,
		`{"id":1`, `{"id":1,}`, `{"id":}`, `{id:1}`,
		// a bad id
		`{"id":0}`, `{"id":-1}`, `{"id":"5"}`, `{"id":1.5}`, `{"id":1e3}`, `{"id":01}`, `{"id":99999999999999999999}`,
		`{"id":null}`, `{"id":true}`, `{"id":[1]}`, `{"id":{"id":1}}`,
		// a bad list
		`{"ids":[]}`, `{"ids":null}`, `{"ids":3}`, `{"ids":[1,0]}`, `{"ids":[1,"2"]}`, `{"ids":[1,-2]}`,
		`{"ids":[1,null]}`, `{"ids":[[1]]}`, `{"ids":[1,]}`, `{"ids":{"1":1}}`, queue.EncodeIDs(tooMany),
		// both, neither, or twice
		`{"id":1,"ids":[2]}`, `{"ids":[2],"id":1}`, `{"id":5,"id":6}`, `{"ids":[1],"ids":[2]}`, `{"id":null,"id":5}`,
		// names that are not exactly "id" or "ids": encoding/json would match these case-insensitively
		`{"ID":5}`, `{"Id":5}`, `{"iD":5}`, `{"IDS":[5]}`, `{"Ids":[5]}`, `{"id":5,"ID":7}`, `{"ID":7,"id":5}`,
		`{"id ":5}`, `{"\u0130d":5}`, `{"id\u017f":[5]}`,
		// unknown fields, beside a good id or not
		`{"id":5,"x":1}`, `{"x":1,"id":5}`, `{"ids":[5],"idz":[6]}`, `{"value":"x"}`, `{"":1}`,
	} {
		ids, err := queue.Decode(body)
		require.Error(t, err, "%s decoded to %v", body, ids)
		require.Nil(t, ids, body)
	}
	for _, ids := range [][]int64{{1}, {42}, {1 << 62}, {1<<63 - 1}, {3, 1, 2}, {5, 5}, tooMany[:queue.MaxIDs]} {
		got, err := queue.Decode(queue.EncodeIDs(ids))
		require.NoError(t, err)
		require.Equal(t, ids, got)
	}
	require.Equal(t, `{"id":7}`, queue.EncodeIDs([]int64{7}), "one id keeps the one-event shape")
}

// What JSON allows around the two shapes is allowed: whitespace anywhere, and a name written with
// escapes, which is the same name.
func TestDecodeAcceptsTheShapesWithWhitespaceAndEscapes(t *testing.T) {
	t.Parallel()
	for body, want := range map[string][]int64{
		" {\n\t\"id\" : 9 } \r\n": {9},
		`{"ids":[1]}`:             {1},
		"{ \"ids\" : [ 1 , 2 ] }": {1, 2},
		`{"\u0069d":3}`:           {3},
		`{"i\u0064s":[4]}`:        {4},
	} {
		got, err := queue.Decode(body)
		require.NoError(t, err, body)
		require.Equal(t, want, got, body)
	}
}

// An error names the problem, and quotes at most a bounded piece of the body.
func TestDecodeErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"id":5,"ID":7}`:       `unknown field "ID"`,
		`{"id":5,"id":6}`:       `field "id" twice`,
		`{"ids":[1],"ids":[2]}`: `field "ids" twice`,
		`{"id":1,"ids":[2]}`:    "both id and ids",
		`{"id":1} {}`:           "trailing data",
		`{"id":-1}`:             "not a positive integer",
		`{}`:                    "no id",
		`{"ids":[1,`:            "ends early",
		`{"id":12`:              "ends early",
		`{"` + strings.Repeat("x", 1000) + `":1}`: `unknown field "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...`,
	} {
		_, err := queue.Decode(body)
		require.ErrorContains(t, err, want, body)
		require.Less(t, len(err.Error()), 200, "the error stays short: %s", err)
	}
}

// FuzzDecode: Decode never panics, and what it accepts is one of the two shapes: encoding/json
// reads the same ids from it, and EncodeIDs of them decodes back to them.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"id":1}`, `{"ids":[1,2]}`, `{"id":5,"ID":7}`, `{"ids":[1],"ids":[2]}`, `{"id":1}]`, `{"id":1e3}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		ids, err := queue.Decode(body)
		if err != nil {
			require.Nil(t, ids)
			return
		}
		require.NotEmpty(t, ids)
		require.LessOrEqual(t, len(ids), queue.MaxIDs)
		var m struct {
			ID  *int64  `json:"id"`
			IDs []int64 `json:"ids"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		if m.ID != nil {
			require.Equal(t, []int64{*m.ID}, ids, body)
		} else {
			require.Equal(t, m.IDs, ids, body)
		}
		again, err := queue.Decode(queue.EncodeIDs(ids))
		require.NoError(t, err)
		require.Equal(t, ids, again)
	})
}
