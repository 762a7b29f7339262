package webhook

import (
	"net/netip"
	"strings"
	"testing"
)

// The classifier over every range, their mapped and embedded forms, and public examples. These are
// classified only, never dialled.
func TestClassify(t *testing.T) {
	t.Parallel()
	const (
		allowed = iota
		loopback
		private
		forbidden
	)
	for _, tc := range []struct {
		addr string
		want int
		what string // a part of the reason
	}{
		// Public examples.
		{"8.8.8.8", allowed, ""},
		{"1.1.1.1", allowed, ""},
		{"93.184.215.14", allowed, ""},
		{"100.63.255.255", allowed, ""},
		{"100.128.0.0", allowed, ""},
		{"172.15.255.255", allowed, ""},
		{"172.32.0.0", allowed, ""},
		{"192.167.255.255", allowed, ""},
		{"192.169.0.0", allowed, ""},
		{"169.253.255.255", allowed, ""},
		{"223.255.255.255", allowed, ""},
		{"2606:4700::1", allowed, ""},
		{"2001:4860:4860::8888", allowed, ""},
		{"2a00:1450:4001::200e", allowed, ""},
		{"::ffff:8.8.8.8", allowed, ""},
		{"64:ff9b::808:808", allowed, ""}, // NAT64 of 8.8.8.8
		{"2001:200::1", allowed, ""},      // just above 2001::/23

		// Loopback.
		{"127.0.0.1", loopback, "loopback"},
		{"127.1.2.3", loopback, "loopback"},
		{"127.255.255.255", loopback, "loopback"},
		{"::1", loopback, "loopback"},
		{"::ffff:127.0.0.1", loopback, "IPv4-mapped form of a loopback"},

		// Private.
		{"10.0.0.1", private, "RFC 1918"},
		{"10.255.255.255", private, "RFC 1918"},
		{"172.16.0.1", private, "RFC 1918"},
		{"172.31.255.255", private, "RFC 1918"},
		{"192.168.1.1", private, "RFC 1918"},
		{"::ffff:10.1.2.3", private, "IPv4-mapped form of a private"},
		{"fc00::1", private, "unique local"},
		{"fd00:ec2:0:1::254", private, "unique local"}, // beside AWS's services, not one of them
		{"fd20:ce::253", private, "unique local"},

		// Forbidden whatever the settings.
		{"0.0.0.0", forbidden, "unspecified"},
		{"0.1.2.3", forbidden, "this network"},
		{"::", forbidden, "unspecified"},
		{"::ffff:0.0.0.0", forbidden, "mapped form of the unspecified"},
		{"100.64.0.1", forbidden, "carrier-grade NAT"},
		{"100.127.255.255", forbidden, "carrier-grade NAT"},
		{"169.254.169.254", forbidden, "cloud metadata endpoint"},
		{"fd00:ec2::254", forbidden, "AWS's metadata endpoint over IPv6"}, // in fc00::/7, refused all the same
		{"fd00:ec2::253", forbidden, "AWS's link-local services"},
		{"fd20:ce::254", forbidden, "Google Cloud's metadata endpoint"},
		{"100.100.100.200", forbidden, "Alibaba Cloud's metadata endpoint"},
		{"192.0.0.192", forbidden, "Oracle Cloud's metadata endpoint"},
		{"169.254.169.253", forbidden, "link-local"},
		{"::ffff:169.254.169.254", forbidden, "mapped form of the cloud metadata endpoint"},
		{"::ffff:169.254.1.1", forbidden, "mapped form of a link-local"},
		{"fe80::1", forbidden, "link-local"},
		{"fe80::1%eth0", forbidden, "link-local"},
		{"febf:ffff::1", forbidden, "link-local"},
		{"fec0::1", forbidden, "site-local"},
		{"224.0.0.1", forbidden, "multicast"},
		{"239.255.255.250", forbidden, "multicast"},
		{"ff02::1", forbidden, "multicast"},
		{"ff05::2", forbidden, "multicast"},
		{"255.255.255.255", forbidden, "broadcast"},
		{"240.0.0.1", forbidden, "reserved"},
		{"192.0.0.170", forbidden, "IETF protocol"},
		{"192.0.2.1", forbidden, "documentation"},
		{"198.51.100.7", forbidden, "documentation"},
		{"203.0.113.9", forbidden, "documentation"},
		{"198.18.0.1", forbidden, "benchmarking"},
		{"198.19.255.255", forbidden, "benchmarking"},
		{"192.88.99.1", forbidden, "6to4 relay"},
		{"::7f00:1", forbidden, "IPv4-compatible"},  // ::127.0.0.1
		{"::808:808", forbidden, "IPv4-compatible"}, // ::8.8.8.8: deprecated, refused whatever it embeds
		{"64:ff9b::7f00:1", forbidden, "NAT64 form (64:ff9b::/96) of a loopback"},
		{"64:ff9b::a00:1", forbidden, "NAT64 form (64:ff9b::/96) of a private"},
		{"64:ff9b::a9fe:a9fe", forbidden, "NAT64 form (64:ff9b::/96) of the cloud metadata endpoint"},
		{"64:ff9b::a9fe:101", forbidden, "NAT64 form (64:ff9b::/96) of a link-local"},
		{"64:ff9b:1::808:808", forbidden, "local-use NAT64"},
		{"2001::1", forbidden, "Teredo"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", forbidden, "Teredo"},
		{"2001:db8::1", forbidden, "documentation"},
		{"2001:2::1", forbidden, "IETF protocol"},
		{"2002:7f00:1::1", forbidden, "6to4"},
		{"2002:808:808::1", forbidden, "6to4"},
		{"3fff::1", forbidden, "documentation"},
		{"100::1", forbidden, "discard-only"},
		{"4000::1", forbidden, "not a global unicast"},
		{"1::1", forbidden, "not a global unicast"},
	} {
		a := netip.MustParseAddr(tc.addr)
		rg, ok := classify(a)
		got := forbidden
		switch {
		case ok:
			got = allowed
		case rg.kind == kindLoopback:
			got = loopback
		case rg.kind == kindPrivate:
			got = private
		}
		if got != tc.want {
			t.Errorf("classify(%s) = %d (%s), want %d", tc.addr, got, rg.what, tc.want)
			continue
		}
		if !strings.Contains(rg.what, tc.what) {
			t.Errorf("classify(%s) says %q, want it to contain %q", tc.addr, rg.what, tc.what)
		}

		// The policies: what each setting allows.
		for _, p := range []Policy{{}, {AllowLoopback: true}, {AllowPrivate: true}, {AllowLoopback: true, AllowPrivate: true}} {
			wantOK := tc.want == allowed || (tc.want == loopback && p.AllowLoopback) || (tc.want == private && p.AllowPrivate)
			e := p.check(a)
			if (e == nil) != wantOK {
				t.Errorf("%+v.check(%s) = %v, want allowed=%v", p, tc.addr, e, wantOK)
			}
			if e != nil && !strings.Contains(e.Error(), a.String()) {
				t.Errorf("the refusal %q does not name the address %s", e, a)
			}
		}
	}
	if e := (Policy{}).check(netip.MustParseAddr("127.0.0.1")); !strings.Contains(e.Error(), "WEBHOOK_ALLOW_LOOPBACK") {
		t.Errorf("the refusal %q does not say how to allow loopback", e)
	}
	if e := (Policy{}).check(netip.MustParseAddr("10.0.0.1")); !strings.Contains(e.Error(), "WEBHOOK_ALLOW_PRIVATE") {
		t.Errorf("the refusal %q does not say how to allow private addresses", e)
	}
}

// The numeric host forms inet_aton reads as IPv4 addresses, and names that are not numeric.
func TestLegacyIPv4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host    string
		want    string // "" when not parsed
		numeric bool
	}{
		{"127.1", "127.0.0.1", true},
		{"2130706433", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"0177.0.0.1", "127.0.0.1", true},
		{"0x7f000001", "127.0.0.1", true},
		{"127.0.1", "127.0.0.1", true},
		{"10.1.2.3.", "10.1.2.3", true},
		{"017700000001", "127.0.0.1", true},
		{"134744072", "8.8.8.8", true},
		{"0", "0.0.0.0", true},
		{"4294967296", "", true},
		{"256.1", "", true},
		{"1.2.3.4.5", "", true},
		{"08.1", "", true},    // not octal
		{"foo.123", "", true}, // ends in a number: never a DNS name
		{"example.com", "", false},
		{"localhost", "", false},
		{"123.example", "", false},
		{"0xg", "", false},
	} {
		a, parsed, numeric := legacyIPv4(tc.host)
		if numeric != tc.numeric || parsed != (tc.want != "") || (parsed && a.String() != tc.want) {
			t.Errorf("legacyIPv4(%q) = %v, %v, %v; want %q, numeric %v", tc.host, a, parsed, numeric, tc.want, tc.numeric)
		}
	}
}

// metadataHosts are the cloud metadata endpoints, and the other link-local services, in every form
// a url's host may give them: refused whatever the settings.
var metadataHosts = []string{
	// AWS (and GCP, Azure, DigitalOcean, OpenStack...): 169.254.169.254 and its forms.
	"169.254.169.254",
	"169.254.169.254.",
	"::ffff:169.254.169.254",               // IPv4-mapped
	"::ffff:a9fe:a9fe",                     // the same, in hex
	"::169.254.169.254",                    // IPv4-compatible (deprecated)
	"::a9fe:a9fe",                          // the same, in hex
	"::ffff:0:a9fe:a9fe",                   // IPv4-translated (SIIT)
	"64:ff9b::a9fe:a9fe",                   // NAT64
	"64:ff9b::169.254.169.254",             // NAT64, dotted
	"64:ff9b:1::a9fe:a9fe",                 // local-use NAT64
	"2002:a9fe:a9fe::",                     // 6to4
	"2002:a9fe:a9fe::1",                    // 6to4, a host behind it
	"2001:0:4136:e378:8000:63bf:5601:5601", // Teredo, whose client address is 169.254.169.254 inverted
	"2852039166",                           // a single decimal number
	"0xa9fea9fe",                           // a single hex number
	"0xa9.0xfe.0xa9.0xfe",                  // hex parts
	"0251.0376.0251.0376",                  // octal parts
	"169.254.43518",                        // a.b.c, c of 16 bits
	"169.16689662",                         // a.b, b of 24 bits
	"0xa9fe.0xa9fe",                        // what no inet_aton reads, but numeric: never a name
	// AWS over IPv6 (Nitro): the metadata endpoint, the DNS resolver, the time service.
	"fd00:ec2::254",
	"fd00:ec2::253",
	"fd00:ec2::123",
	"fd00:ec2:0:0:0:0:0:254",
	"::ffff:fd00:ec2", // not IPv6 at all: the mapped 253.0.14.194, reserved
	// GCP over IPv6.
	"fd20:ce::254",
	// Alibaba Cloud, Oracle Cloud.
	"100.100.100.200",
	"::ffff:100.100.100.200",
	"64:ff9b::6464:64c8",
	"192.0.0.192",
	"::ffff:192.0.0.192",
	// Their other forms: decimal, hex, NAT64 dotted, trailing dot.
	"1684301000",
	"0x646464c8",
	"100.100.100.200.",
	"64:ff9b::100.100.100.200",
	"3221225664",
	"0xc00000c0",
	"192.0.0.192.",
	"64:ff9b::c000:c0",
	// Azure's wireserver, 168.63.129.16 (the platform's DNS, DHCP, health probes and the VM
	// agent's endpoint, which hands out the VM's extension settings): a public address, in every
	// form.
	"168.63.129.16",
	"168.63.129.16.",
	"::ffff:168.63.129.16",
	"::ffff:a83f:8110",
	"::a83f:8110",
	"64:ff9b::a83f:8110",
	"64:ff9b::168.63.129.16",
	"2002:a83f:8110::",
	"2822734096",
	"0xa83f8110",
	"0250.077.0201.020",
	"168.63.33040",
	// Google Cloud's metadata server by name (it resolves to 169.254.169.254 inside GCP; refused
	// at the dial there, and by name before any resolution), in any case, with a trailing dot,
	// short (the search domain completes it), or written in full-width letters (IDNA maps them).
	"metadata.google.internal",
	"metadata.google.internal.",
	"METADATA.Google.Internal",
	"metadata",
	"metadata.",
	"ｍｅｔａｄａｔａ.google.internal",
	// AWS's name for its metadata endpoint.
	"instance-data",
	"instance-data.",
	// The link-local ranges as a whole (AWS's time service 169.254.169.123, its DNS 169.254.169.253,
	// OpenStack's IPv6 metadata fe80::a9fe:a9fe).
	"169.254.0.1",
	"169.254.169.123",
	"169.254.169.253",
	"169.254.255.255",
	"fe80::a9fe:a9fe",
	"fe80::1",
	"fe80::1%eth0",
}

// The metadata endpoints are refused whatever the settings: before any connection for a host
// written as an address (or a numeric form of one), and on the address dialled for one a name
// resolves to (TestMetadataRefusedAtTheDial dials them).
func TestMetadataRefusedWhateverTheSettings(t *testing.T) {
	t.Parallel()
	everything := Policy{AllowLoopback: true, AllowPrivate: true}
	for _, p := range []Policy{{}, {AllowLoopback: true}, {AllowPrivate: true}, everything} {
		for _, host := range metadataHosts {
			e := p.CheckHost(host)
			if e == nil {
				t.Errorf("%+v: the host %s is allowed", p, host)
				continue
			}
			if strings.Contains(e.Error(), "WEBHOOK_ALLOW") {
				t.Errorf("%+v: the refusal of %s says a setting would allow it: %q", p, host, e)
			}
			if a, err := netip.ParseAddr(host); err == nil {
				if e := p.check(a); e == nil {
					t.Errorf("%+v: the dialled address %s is allowed", p, a)
				}
			}
		}
	}
	// The refusal says what the address is.
	for host, what := range map[string]string{
		"169.254.169.254":           "cloud metadata endpoint",
		"::ffff:169.254.169.254":    "IPv4-mapped form of the cloud metadata endpoint",
		"64:ff9b::a9fe:a9fe":        "NAT64 form (64:ff9b::/96) of the cloud metadata endpoint",
		"fd00:ec2::254":             "AWS",
		"fd20:ce::254":              "Google Cloud's metadata endpoint",
		"100.100.100.200":           "Alibaba Cloud's metadata endpoint",
		"192.0.0.192":               "Oracle Cloud's metadata endpoint",
		"168.63.129.16":             "Azure's wireserver",
		"::ffff:168.63.129.16":      "IPv4-mapped form of Azure's wireserver",
		"metadata.google.internal.": "metadata.google.internal. is Google Cloud's metadata server",
		"instance-data":             "instance-data is AWS's metadata endpoint",
		"2852039166":                "2852039166 is 169.254.169.254, a non-standard numeric form of the cloud metadata endpoint",
	} {
		if e := everything.CheckHost(host); e == nil || !strings.Contains(e.Error(), what) {
			t.Errorf("the refusal of %s, %v, does not say %q", host, e, what)
		}
	}
}
