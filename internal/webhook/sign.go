// Package webhook delivers one attempt of a task, an event that carries a webhook, over HTTP, and
// classifies the result: delivered, a temporary failure (retry later), a permanent failure, or
// refused (the address is one the service must not connect to). It signs every request the
// Standard Webhooks way (https://www.standardwebhooks.com), follows no redirects, verifies TLS,
// reads a bounded part of any answer, and never connects to loopback, private, link-local or other
// internal addresses unless its Config allows loopback or the private ranges: the check is made on
// the address actually dialled, after name resolution (see address.go for the ranges).
//
// It imports the standard library only; storage, ordering and retries are the engine's
// (RetryDelay gives the delay, the engine keeps the count).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is this package's delivery format version, named in the default User-Agent.
const Version = "0.1.0"

// DefaultUserAgent is the User-Agent of a Client whose Config sets none.
const DefaultUserAgent = "exactlyonce-webhook/" + Version

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts a Standard Webhooks secret.
const secretPrefix = "whsec_"

// MinSecretBytes is the shortest key ParseSecret accepts: the spec recommends keys of 24 to 64
// bytes.
const MinSecretBytes = 24

// ParseSecret decodes a Standard Webhooks secret, "whsec_" followed by the key in base64 (the bare
// base64 is accepted too; padding is optional; surrounding white space is ignored, as a value read
// from a file or Secrets Manager may end with a newline). The error names the problem and never
// contains the secret.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), secretPrefix)
	if s == "" {
		return nil, errors.New("webhook secret is empty: expected whsec_ followed by the key in base64")
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		// err quotes the offending input position only, but say nothing of the secret at all.
		return nil, errors.New("webhook secret is not valid base64: expected whsec_ followed by the key in standard base64")
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("webhook secret is %d bytes long once decoded: at least %d are needed", len(key), MinSecretBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature header value for a message: "v1," followed by the base64
// HMAC-SHA256, with key, of the message id, ".", the timestamp in unix seconds, ".", and the body.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}
