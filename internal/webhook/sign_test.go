package webhook

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// testSecret is the Standard Webhooks library's own test secret, 24 bytes.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func testKey(t *testing.T) []byte {
	t.Helper()
	k, err := ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	want, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	for _, s := range []string{testSecret, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", " " + testSecret + "\n",
		"whsec_" + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 25))} {
		k, err := ParseSecret(s)
		if err != nil {
			t.Fatalf("ParseSecret(%q): %v", s, err)
		}
		if s != "whsec_"+base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 25)) && !bytes.Equal(k, want) {
			t.Fatalf("ParseSecret(%q) = %x, want %x", s, k, want)
		}
	}
	short := base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"whsec_", "empty"},
		{"whsec_not*base64*at*all!!", "not valid base64"},
		{"whsec_" + short, "16 bytes long once decoded: at least 24"},
	} {
		_, err := ParseSecret(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("ParseSecret(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
		if tc.in != "" && strings.Contains(err.Error(), strings.TrimPrefix(tc.in, "whsec_")) && strings.TrimPrefix(tc.in, "whsec_") != "" {
			t.Fatalf("the error %q echoes the secret", err)
		}
	}
}

// Sign agrees with the Standard Webhooks library, both ways.
func TestSignMatchesTheLibrary(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now()
	for _, body := range [][]byte{[]byte(`{"a":1}`), nil, []byte(`"é\u0000"`)} {
		got := Sign(key, "msg_1", ts, body)
		want, err := wh.Sign("msg_1", ts, body)
		if err != nil || got != want {
			t.Fatalf("Sign = %q, the library signs %q (%v)", got, want, err)
		}
		h := http.Header{}
		h.Set(HeaderID, "msg_1")
		h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(HeaderSignature, got)
		if err := wh.Verify(body, h); err != nil {
			t.Fatalf("the library rejects our signature: %v", err)
		}
		if err := wh.Verify(append(body, ' '), h); err == nil {
			t.Fatal("the library accepts a tampered body")
		}
	}
}
