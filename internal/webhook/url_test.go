package webhook

import (
	"strings"
	"testing"
)

func TestValidateURL(t *testing.T) {
	t.Parallel()
	long := "https://example.com/" + strings.Repeat("a", MaxURLBytes-len("https://example.com/"))
	for _, ok := range []string{"https://example.com/hook", "http://example.com", "https://example.com:8443/a?b=c",
		"HTTPS://Example.COM/x", "http://[2606:4700::1]/", "http://127.0.0.1:8080/", long,
		"https://my_service.internal.example/", "https://example.com./", "https://bücher.example/", "http://[fe80::1%25eth0]/"} {
		if err := ValidateURL(ok); err != nil {
			t.Errorf("ValidateURL(%q) = %v, want nil", ok, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "url is required"},
		{"ftp://example.com/f", `scheme must be http or https, got "ftp"`},
		{"javascript:alert(1)", `scheme must be http or https, got "javascript"`},
		{"file:///etc/passwd", `got "file"`},
		{"example.com/hook", "must be absolute"},
		{"/hook", "must be absolute"},
		{"https:///hook", "must have a host"},
		{"https://", "must have a host"},
		{"https://:443/", "must have a host"},
		{"http:example.com", "scheme://host/path"},
		{"https://u:p@example.com/", "must not contain credentials"},
		{"https://u@example.com/", "must not contain credentials"},
		{long + "a", "at most 2048 bytes, got 2049"},
		{"https://example.com:0/", `port must be from 1 to 65535, got "0"`},
		{"https://example.com:70000/", `got "70000"`},
		{"https://exa mple.com/", "not a valid url"},
		{"https://example.com/%zz", "not a valid url"},
		// Hosts that no resolver can look up: refused at create, not left to fail at every delivery.
		{"https://169.254.169.254%2500.x/", `url host "169.254.169.254%00.x" is not a host name or an IP address`},
		{"https://a..b/", "is not a host name or an IP address"},
		{"https://a;b.example/", "is not a host name or an IP address"},
		{"https://" + strings.Repeat("a", 64) + ".example/", "is not a host name or an IP address"},
	} {
		err := ValidateURL(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateURL(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if err := ValidateURL("https://user:hunter2@example.com/"); strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error %q repeats the password", err)
	}
}
