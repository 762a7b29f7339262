package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLBytes is the longest url a task may carry.
const MaxURLBytes = 2048

// ValidateURL checks a task's url before it is stored: an absolute http or https url of at most
// MaxURLBytes bytes, with a host, a port (if any) from 1 to 65535, and no credentials (user
// information) in it. The error's message names the problem in words fit for a 400 answer to the
// caller; it may quote the scheme or the port, never the rest of the url.
//
// It does not look at where the host points: Policy.CheckURL adds that for a host written as an
// address, and every delivery decides it on the address dialled (a name may resolve elsewhere by
// then).
func ValidateURL(raw string) error {
	if raw == "" {
		return errors.New("url is required")
	}
	if len(raw) > MaxURLBytes {
		return fmt.Errorf("url must be at most %d bytes, got %d", MaxURLBytes, len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("url is not a valid url")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "" {
			return errors.New("url must be absolute, starting with https:// or http://")
		}
		return fmt.Errorf("url scheme must be http or https, got %q", u.Scheme)
	}
	if u.Opaque != "" {
		return errors.New("url must have the form scheme://host/path")
	}
	if u.User != nil {
		return errors.New("url must not contain credentials (user:password@); authenticate the request with the webhook signature")
	}
	if u.Hostname() == "" {
		return errors.New("url must have a host")
	}
	if h := u.Hostname(); !lookupable(h) {
		return fmt.Errorf("url host %q is not a host name or an IP address", h)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("url port must be from 1 to 65535, got %q", p)
		}
	}
	return nil
}

// lookupable tells whether host can be dialled at all: an IP address, or a name whose ASCII form
// (IDNA, as net/http maps it) is labels of 1 to 63 letters, digits, hyphens and underscores, 253
// bytes at most, with one trailing dot allowed. A host with other bytes (a NUL or a percent that
// url.Parse decoded, a space, a semicolon) or an empty label would only fail at every delivery.
func lookupable(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if mapped, ok := idnaASCII(host); ok {
		host = mapped
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
