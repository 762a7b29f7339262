package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// The address rule. A delivery may connect to a globally reachable unicast address only, unless
// the Config allows loopback (127.0.0.0/8, ::1) or the private ranges (RFC 1918, fc00::/7).
//
// IPv4: every range in v4Ranges is refused: "this network" 0.0.0.0/8 (0.0.0.0 is the unspecified
// address, which a connect turns into the local host), RFC 1918, carrier-grade NAT 100.64.0.0/10,
// loopback, link-local 169.254.0.0/16 (the cloud metadata endpoint 169.254.169.254 and the VPC's
// DNS 169.254.169.253), the IETF protocol assignments 192.0.0.0/24, the documentation and
// benchmarking ranges, the deprecated 6to4 relay anycast 192.88.99.0/24, multicast 224.0.0.0/4,
// the reserved 240.0.0.0/4 and the broadcast address 255.255.255.255.
//
// The cloud metadata endpoints are refused whatever the settings, in every form (mapped, NAT64,
// 6to4, numeric): 169.254.169.254 (AWS, Google Cloud, Azure and others) and the rest of the
// link-local ranges, Alibaba Cloud's 100.100.100.200 (in carrier-grade NAT) and Oracle Cloud's
// 192.0.0.192 (in the IETF protocol assignments), Azure's wireserver 168.63.129.16 (a public
// address, the platform's DNS, DHCP and VM agent endpoint, whose answers include the VM's extension
// settings), and, inside the unique local fc00::/7 that
// WEBHOOK_ALLOW_PRIVATE opens, AWS's IPv6 services fd00:ec2::/64 (metadata fd00:ec2::254, DNS
// ::253, time ::123) and Google Cloud's IPv6 metadata endpoint fd20:ce::254.
//
// The metadata endpoints' names are refused too, before any resolution, whatever the case and with
// or without a trailing dot (metadataNames): Google Cloud's metadata.google.internal and its short
// form metadata, and AWS's instance-data. Inside those clouds they resolve to 169.254.169.254, which
// the dial refuses anyway; by name the url is refused at create, and says what it is.
//
// IPv6: an address that embeds an IPv4 one is judged by it: the IPv4-mapped ::ffff:0:0/96 and
// the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052: an IPv6-only VPC reaches IPv4 receivers
// through DNS64 and a NAT gateway with these addresses, so a public embedded address is allowed).
// Otherwise only global unicast 2000::/3 is allowed, less the ranges in v6Ranges: the IETF
// protocol assignments 2001::/23 (which hold Teredo, 2001::/32), documentation 2001:db8::/32 and
// 3fff::/20, and 6to4 2002::/16. Teredo and 6to4 embed IPv4 addresses too; rather than decode them
// they are refused outright: both are deprecated tunnels no receiver needs, and a relay could carry
// the connection to the embedded address. Outside 2000::/3 this refuses the unspecified ::,
// loopback ::1 (unless allowed), the deprecated IPv4-compatible ::/96 whatever it embeds, the
// local-use NAT64 64:ff9b:1::/48 (its translator may reach anything), discard-only 100::/64,
// unique local fc00::/7 (unless private is allowed; less the metadata endpoints in it, always refused),
// link-local fe80::/10, the deprecated site-local fec0::/10 and multicast ff00::/8.

type addrKind int

const (
	kindForbidden addrKind = iota // refused whatever the settings
	kindLoopback                  // allowed by Policy.AllowLoopback
	kindPrivate                   // allowed by Policy.AllowPrivate
)

type addrRange struct {
	prefix netip.Prefix
	kind   addrKind
	what   string
}

func r(p string, kind addrKind, what string) addrRange {
	return addrRange{netip.MustParsePrefix(p), kind, what}
}

// v4Ranges are searched in order: the first that contains an address names it.
var v4Ranges = []addrRange{
	r("255.255.255.255/32", kindForbidden, "the broadcast address"),
	r("0.0.0.0/32", kindForbidden, "the unspecified address"),
	r("0.0.0.0/8", kindForbidden, `a "this network" address (0.0.0.0/8)`),
	r("10.0.0.0/8", kindPrivate, "a private address (RFC 1918)"),
	r("100.100.100.200/32", kindForbidden, "Alibaba Cloud's metadata endpoint (100.100.100.200)"),
	r("100.64.0.0/10", kindForbidden, "a carrier-grade NAT address (100.64.0.0/10)"),
	r("127.0.0.0/8", kindLoopback, "a loopback address"),
	r("169.254.169.254/32", kindForbidden, "the cloud metadata endpoint (169.254.169.254: AWS, Google Cloud, Azure and others)"),
	r("169.254.0.0/16", kindForbidden, "a link-local address (169.254.0.0/16, which holds the cloud metadata endpoint)"),
	r("168.63.129.16/32", kindForbidden, "Azure's wireserver (168.63.129.16: the platform's DNS, DHCP and VM agent endpoint)"),
	r("172.16.0.0/12", kindPrivate, "a private address (RFC 1918)"),
	r("192.0.0.192/32", kindForbidden, "Oracle Cloud's metadata endpoint (192.0.0.192)"),
	r("192.0.0.0/24", kindForbidden, "an IETF protocol assignment address (192.0.0.0/24)"),
	r("192.0.2.0/24", kindForbidden, "a documentation address (192.0.2.0/24)"),
	r("192.88.99.0/24", kindForbidden, "a 6to4 relay anycast address (192.88.99.0/24, deprecated)"),
	r("192.168.0.0/16", kindPrivate, "a private address (RFC 1918)"),
	r("198.18.0.0/15", kindForbidden, "a benchmarking address (198.18.0.0/15)"),
	r("198.51.100.0/24", kindForbidden, "a documentation address (198.51.100.0/24)"),
	r("203.0.113.0/24", kindForbidden, "a documentation address (203.0.113.0/24)"),
	r("224.0.0.0/4", kindForbidden, "a multicast address"),
	r("240.0.0.0/4", kindForbidden, "a reserved address (240.0.0.0/4)"),
}

// v6Ranges are searched in order, for addresses that embed no IPv4 address we judge.
var v6Ranges = []addrRange{
	r("::/128", kindForbidden, "the unspecified address"),
	r("::1/128", kindLoopback, "a loopback address"),
	r("::/96", kindForbidden, "an IPv4-compatible IPv6 address (::/96, deprecated)"),
	r("64:ff9b:1::/48", kindForbidden, "a local-use NAT64 address (64:ff9b:1::/48)"),
	r("100::/64", kindForbidden, "a discard-only address (100::/64)"),
	r("2001::/32", kindForbidden, "a Teredo address (2001::/32, deprecated)"),
	r("2001:db8::/32", kindForbidden, "a documentation address (2001:db8::/32)"),
	r("2001::/23", kindForbidden, "an IETF protocol assignment address (2001::/23)"),
	r("2002::/16", kindForbidden, "a 6to4 address (2002::/16, deprecated)"),
	r("3fff::/20", kindForbidden, "a documentation address (3fff::/20)"),
	r("fd00:ec2::254/128", kindForbidden, "AWS's metadata endpoint over IPv6 (fd00:ec2::254)"),
	r("fd00:ec2::/64", kindForbidden, "an address of AWS's link-local services over IPv6 (fd00:ec2::/64: metadata ::254, DNS ::253, time ::123)"),
	r("fd20:ce::254/128", kindForbidden, "Google Cloud's metadata endpoint over IPv6 (fd20:ce::254)"),
	r("fc00::/7", kindPrivate, "a unique local address (fc00::/7, private)"),
	r("fe80::/10", kindForbidden, "a link-local address (fe80::/10)"),
	r("fec0::/10", kindForbidden, "a site-local address (fec0::/10, deprecated)"),
	r("ff00::/8", kindForbidden, "a multicast address"),
}

// metadataNames are the host names of cloud metadata endpoints, lower case, without a trailing
// dot: refused whatever the settings (CheckHost).
var metadataNames = map[string]string{
	"metadata.google.internal": "Google Cloud's metadata server",
	"metadata":                 "Google Cloud's metadata server (the short name its search domain completes)",
	"instance-data":            "AWS's metadata endpoint (the name EC2's resolver gives 169.254.169.254)",
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	global6   = netip.MustParsePrefix("2000::/3")
	notGlobal = addrRange{kind: kindForbidden, what: "not a global unicast address (outside 2000::/3)"}
)

// RefusedError says why a delivery was refused: the address it would have connected to is one the
// rule forbids. No connection was made.
type RefusedError struct {
	Host string     // the url's host as written
	Addr netip.Addr // the address refused
	What string     // what the address is, "a loopback address"
	Hint string     // the setting that would allow it, if any
	Fix  string     // how to write the host instead, if that is the fix
	// Resolved is set when Addr is what the resolver answered for the name Host (a refusal at the
	// dial): the reason then says what kind of address the name resolves to, not the address. The
	// reason is the task's exceptionMessage, which every reader of the API sees, and the resolver is
	// the deliverers' (on AWS, the VPC's): its answers for internal names are internal.
	Resolved bool
}

func (e *RefusedError) Error() string { return "refused: " + e.Reason() }

// Reason is Error without its "refused: ": what the host is, and the setting that would allow it.
func (e *RefusedError) Reason() string {
	var s string
	switch {
	case e.Resolved && e.Host != "":
		s = e.Host + " resolves to "
	case !e.Addr.IsValid() && e.Host == "":
		s = "the address is "
	case !e.Addr.IsValid():
		s = e.Host + " is "
	case e.Host != "" && e.Host != e.Addr.String():
		s = fmt.Sprintf("%s is %s, ", e.Host, e.Addr)
	default:
		s = e.Addr.String() + " is "
	}
	s += e.What + ", which deliveries must not connect to"
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

// Policy is the address rule's settings (Config.AllowLoopback and AllowPrivate, the variables
// WEBHOOK_ALLOW_LOOPBACK and WEBHOOK_ALLOW_PRIVATE). A Client applies it to every address it dials
// and, before that, to a url's host (CheckHost); the API applies the same to a task's url when the
// task is created (CheckURL), so that a url no delivery could reach is refused then, not stored to
// fail. The zero Policy allows global addresses only.
type Policy struct {
	AllowLoopback bool
	AllowPrivate  bool
	// LambdaRuntimeAPI is AWS_LAMBDA_RUNTIME_API ("127.0.0.1:9001"), empty outside Lambda.
	LambdaRuntimeAPI string
	// OwnHosts are the host names of the system's own API (WEBHOOK_API_HOSTS, which the CDK stack sets to
	// the REST API's execute-api domain; the API adds the domain a request came in by): a task
	// whose url points there would POST its payload to the API, and a payload that is a task's
	// body would create a task per delivery, without end, where the API takes unsigned requests
	// (-c publicApi=true). Refused whatever the settings, by name (CheckHost), at create and before
	// every dial.
	OwnHosts []string
}

// check returns nil if the policy allows connecting to a, or the reason it does not.
func (p Policy) check(a netip.Addr) *RefusedError {
	rg, ok := classify(a)
	if ok {
		return nil
	}
	switch {
	case rg.kind == kindLoopback && p.AllowLoopback, rg.kind == kindPrivate && p.AllowPrivate:
		return nil
	}
	e := &RefusedError{Addr: a, What: rg.what}
	switch rg.kind {
	case kindLoopback:
		e.Hint = "WEBHOOK_ALLOW_LOOPBACK=true allows loopback"
	case kindPrivate:
		e.Hint = "WEBHOOK_ALLOW_PRIVATE=true allows the private ranges"
	}
	return e
}

// classify returns the range that contains a and false, or true when a is a global address that
// needs no permission. An embedded IPv4 address (mapped, NAT64) is judged by itself; the range
// then says which form it was in.
func classify(a netip.Addr) (addrRange, bool) {
	a = a.WithZone("")
	if !a.IsValid() {
		return addrRange{kind: kindForbidden, what: "not a valid address"}, false
	}
	if a.Is4In6() {
		rg, ok := classify4(a.Unmap())
		if !ok {
			rg.what = "the IPv4-mapped form of " + rg.what
		}
		return rg, ok
	}
	if a.Is4() {
		return classify4(a)
	}
	if nat64.Contains(a) {
		b := a.As16()
		rg, ok := classify4(netip.AddrFrom4([4]byte(b[12:])))
		if !ok {
			rg.what = "the NAT64 form (64:ff9b::/96) of " + rg.what
			rg.kind = kindForbidden // NAT64 is for reaching public IPv4 receivers only
		}
		return rg, ok
	}
	for _, rg := range v6Ranges {
		if rg.prefix.Contains(a) {
			return rg, false
		}
	}
	if !global6.Contains(a) {
		return notGlobal, false
	}
	return addrRange{}, true
}

// CheckHost refuses, before any resolution, a url's host (as url.URL.Hostname gives it) that is an
// IP address the policy forbids, a numeric form that resolvers disagree on ("127.1",
// "2130706433", "0x7f.1"), whatever address it would mean, a metadata endpoint's name
// (metadataNames) or one of the system's own API (OwnHosts). Another name returns nil: its addresses are checked as each is dialled, as
// they may change.
//
// A host that is not ASCII is checked as net/http dials it: mapped by IDNA (UTS #46, the profile
// net/http uses), which turns "169。254。169。254" or full-width digits into 169.254.169.254. The
// refusal names the host as written.
func (p Policy) CheckHost(host string) *RefusedError {
	if mapped, ok := idnaASCII(host); ok && mapped != host {
		if e := p.CheckHost(mapped); e != nil {
			e.Host = host
			return e
		}
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if e := p.check(a); e != nil {
			e.Host = host
			return e
		}
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if what, ok := metadataNames[name]; ok {
		return &RefusedError{Host: host, What: what}
	}
	for _, own := range p.OwnHosts {
		if own = strings.ToLower(strings.TrimSuffix(own, ".")); own != "" && name == own {
			return &RefusedError{Host: host, What: "this system's own API (WEBHOOK_API_HOSTS): a task there would make tasks of its deliveries"}
		}
	}
	a, parsed, numeric := legacyIPv4(host)
	if !numeric {
		return nil
	}
	e := &RefusedError{Host: host, What: "a numeric host in a non-standard form, which resolvers read differently",
		Fix: "write an IPv4 address in dotted decimal (a.b.c.d)"}
	if parsed {
		e.Addr = a
		if p.check(a) != nil {
			rg, _ := classify(a)
			e.What, e.Fix = "a non-standard numeric form of "+rg.what, ""
		} else {
			e.What, e.Fix = "a non-standard numeric form of an IPv4 address", "write it in dotted decimal ("+a.String()+")"
		}
	}
	return e
}

// idnaASCII maps a host that is not ASCII to the ASCII form net/http connects to (its idnaASCII:
// idna.Lookup.ToASCII); ok is false for an ASCII host, and for one IDNA refuses, which net/http
// cannot dial either.
func idnaASCII(host string) (string, bool) {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			mapped, err := idna.Lookup.ToASCII(host)
			return mapped, err == nil
		}
	}
	return host, false
}

// CheckURL checks a task's url as it is created: ValidateURL's rules, then CheckHost's on its host.
// The error names the url and says what is wrong, in words fit for a 400 answer (a refusal is a
// *RefusedError); nil if a delivery may try it (a name is checked again at every dial).
func (p Policy) CheckURL(raw string) error {
	if err := ValidateURL(raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil { // ValidateURL parsed it already
		return errors.New("url is not a valid url")
	}
	if e := p.CheckHost(u.Hostname()); e != nil {
		return e
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		n, _ := strconv.ParseUint(port, 10, 16) // ValidateURL checked it
		if e := p.checkPort(a, uint16(n)); e != nil {
			e.Host = u.Hostname()
			return e
		}
	}
	return nil
}

// checkPort refuses the Lambda Runtime API (LambdaRuntimeAPI, AWS_LAMBDA_RUNTIME_API) whatever the
// settings: the function's own control plane on loopback, where a POST reports an invocation's
// result or an initialisation's failure, and whose answers would come back in a task's
// exceptionMessage. WEBHOOK_ALLOW_LOOPBACK opens loopback, and make invoke runs its functions under
// the emulator with it set. As the API listens on a loopback port, every loopback address (any of
// 127.0.0.0/8, ::1, mapped or not) at that port is refused, other ports being left to the setting.
// An address the Runtime API's value does not parse as is refused on every loopback address at
// its port too.
func (p Policy) checkPort(a netip.Addr, port uint16) *RefusedError {
	if p.LambdaRuntimeAPI == "" {
		return nil
	}
	host, ps, err := net.SplitHostPort(p.LambdaRuntimeAPI)
	if err != nil {
		return nil
	}
	rp, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || uint16(rp) != port {
		return nil
	}
	a = a.Unmap().WithZone("")
	same := a.IsLoopback()
	if h, err := netip.ParseAddr(host); err == nil && !h.Unmap().IsLoopback() {
		same = h.Unmap().WithZone("") == a
	}
	if !same {
		return nil
	}
	return &RefusedError{Addr: a, What: fmt.Sprintf("the Lambda Runtime API's address (AWS_LAMBDA_RUNTIME_API, port %d)", port)}
}

func classify4(a netip.Addr) (addrRange, bool) {
	for _, rg := range v4Ranges {
		if rg.prefix.Contains(a) {
			return rg, false
		}
	}
	return addrRange{}, true
}

// legacyIPv4 parses the numeric host forms that C's inet_aton, and so many resolvers and browsers,
// read as an IPv4 address but Go's resolver would send to DNS as a name: fewer than four parts
// ("127.1"), a single number ("2130706433"), octal ("0177.0.0.1") or hex ("0x7f.0.0.1") parts. It
// reports ok for any host whose last label is numeric (as the WHATWG URL standard decides "ends in
// a number"), with the address when it parses as one. A DNS name never has an all-numeric top
// label, so such a host is always refused: resolvers disagree on what it means.
func legacyIPv4(host string) (netip.Addr, bool, bool) {
	host = strings.TrimSuffix(host, ".")
	parts := strings.Split(host, ".")
	last := parts[len(parts)-1]
	if !isNumber(last) {
		return netip.Addr{}, false, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, false, true
	}
	var nums []uint64
	for _, p := range parts {
		if !isNumber(p) {
			return netip.Addr{}, false, true
		}
		n, err := parseNumber(p)
		if err != nil {
			return netip.Addr{}, false, true
		}
		nums = append(nums, n)
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false, true
		}
		v |= n << (8 * (3 - i))
	}
	lastN := nums[len(nums)-1]
	if lastN >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false, true
	}
	v |= lastN
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, true
}

// isNumber reports whether s is a decimal, or 0x-prefixed hexadecimal, number.
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	digits := "0123456789"
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s, digits = s[2:], "0123456789abcdefABCDEF"
	}
	for _, c := range s {
		if !strings.ContainsRune(digits, c) {
			return false
		}
	}
	return true
}

func parseNumber(s string) (uint64, error) {
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		if len(s) == 2 {
			return 0, nil
		}
		return strconv.ParseUint(s[2:], 16, 32)
	case len(s) > 1 && s[0] == '0':
		return strconv.ParseUint(s[1:], 8, 32)
	default:
		return strconv.ParseUint(s, 10, 32)
	}
}
