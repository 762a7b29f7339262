package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
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
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("url port must be from 1 to 65535, got %q", p)
		}
	}
	return nil
}
