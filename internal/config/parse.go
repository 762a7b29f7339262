package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How Load reads one variable: each kind of value, its bounds, and the one error line that names
// a bad one.

// parser reads variables, collecting an error for each bad one. A variable that is unset or blank
// reads as the zero value (nil for the pointers).
type parser struct {
	getenv func(string) string
	isSet  func(string) bool // nil: unknown, and blank is unset
	errs   []string
	read   map[string]bool // every variable read, for unknownNames
}

func (p *parser) fail(msg string) { p.errs = append(p.errs, msg) }

func (p *parser) str(k string) string {
	if p.read == nil {
		p.read = map[string]bool{}
	}
	p.read[k] = true
	return strings.TrimSpace(p.getenv(k))
}

// OwnedPrefixes are the prefixes of the variables only this system reads: a variable set with one
// of them that no component reads (AGENT_BATCHSIZE for AGENT_BATCH_SIZE) is refused at start, where
// it would be ignored, and its component would take its default without a word. DB_ is not among
// them: a machine may set DB_ variables of its own.
func OwnedPrefixes() []string {
	return []string{"AGENT_", "SWEEP_", "SWEEPER_", "SHARDS_", "WEBHOOK_", "VISIBILITY_", "IDEMPOTENCY_",
		"HISTORY_", "MAPPING_", "RETRY_", "WORKER_", "ALLOCATOR_", "PROCESSOR_", "ASYNC_", "COUNTER_"}
}

// unknownNames says, for each of names (the variables set in the environment) that has an owned
// prefix and that the parser did not read, that it is unknown, naming the variables of its prefix.
func (p *parser) unknownNames(names []string) {
	for _, n := range names {
		i := slices.IndexFunc(OwnedPrefixes(), func(pre string) bool { return strings.HasPrefix(n, pre) })
		if i < 0 || p.read[n] {
			continue
		}
		pre := OwnedPrefixes()[i]
		var known []string
		for k := range p.read {
			if strings.HasPrefix(k, pre) {
				known = append(known, k)
			}
		}
		slices.Sort(known)
		p.fail(fmt.Sprintf("%.64s is not a variable of this system, and would be ignored: the %s variables are %s",
			n, pre, strings.Join(known, ", ")))
	}
}

// typed reads the value of a number, duration or true/false variable: "" when unset, and when set
// but blank too after saying so, if the parser can tell (isSet).
func (p *parser) typed(k string) string {
	v := p.str(k)
	if v == "" && p.isSet != nil && p.isSet(k) {
		p.fail(fmt.Sprintf("%s is set but empty: give it a value, or unset it for its default", k))
	}
	return v
}

// given says whether k is given a value, or set to nothing where the parser can tell (which typed
// refuses): what a rule about another variable beside it judges by.
func (p *parser) given(k string) bool {
	return p.str(k) != "" || (p.isSet != nil && p.isSet(k))
}

// integer reads an integer of at least min and, if max > 0, at most max.
func (p *parser) integer(k string, min, max int) int {
	v := p.typed(k)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || (max > 0 && n > max) {
		if max > 0 {
			p.fail(fmt.Sprintf("%s must be an integer from %d to %d, got %q", k, min, max, v))
		} else {
			p.fail(fmt.Sprintf("%s must be an integer >= %d, got %q", k, min, v))
		}
		return 0
	}
	return n
}

// optionalInt reads an integer from min to max, nil when unset.
func (p *parser) optionalInt(k string, min, max int) *int {
	v := p.typed(k)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		p.fail(fmt.Sprintf("%s must be an integer from %d to %d, got %q", k, min, max, v))
		return nil
	}
	return &n
}

// intList parses a comma-separated list of distinct integers >= 0 ("2" or "0,2"); nil when unset.
func (p *parser) intList(k string) []int {
	v := p.typed(k)
	if v == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			p.fail(fmt.Sprintf("%s must be a comma-separated list of integers >= 0, got %q", k, v))
			return nil
		}
		if slices.Contains(out, n) {
			p.fail(fmt.Sprintf("%s names shard %d twice, got %q", k, n, v))
			return nil
		}
		out = append(out, n)
	}
	return out
}

// hostList parses a comma-separated list of host names ("a.example.com" or "a.example.com,b.example.com"),
// each of letters, digits, '-' and '.' only (no scheme, port or path); nil when unset.
func (p *parser) hostList(k string) []string {
	v := p.typed(k)
	if v == "" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(f), "."))
		ok := h != ""
		for _, c := range h {
			ok = ok && ('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.')
		}
		if !ok {
			p.fail(fmt.Sprintf("%s must be a comma-separated list of host names (such as abc123.execute-api.eu-west-1.amazonaws.com: no scheme, port or path), got %q", k, v))
			return nil
		}
		out = append(out, h)
	}
	return out
}

func (p *parser) boolean(k string) *bool {
	v := p.typed(k)
	if v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(fmt.Sprintf("%s must be true or false, got %q", k, v))
		return nil
	}
	return &b
}

// flag reads a boolean that is false when unset.
func (p *parser) flag(k string) bool {
	b := p.boolean(k)
	return b != nil && *b
}

// positive reads a duration greater than zero.
func (p *parser) positive(k string) time.Duration {
	v := p.typed(k)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(fmt.Sprintf("%s must be a positive duration such as 5s, got %q", k, v))
		return 0
	}
	return d
}

// positiveUpTo reads a duration greater than zero and at most max.
func (p *parser) positiveUpTo(k string, max time.Duration) time.Duration {
	v := p.typed(k)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > max {
		p.fail(fmt.Sprintf("%s must be a positive duration of at most %s, such as 5s, got %q", k, max, v))
		return 0
	}
	return d
}

// nonNegative reads a duration of zero or more, for which zero is a meaningful value: nil when
// unset. what describes a good value in the error.
func (p *parser) nonNegative(k, what string) *time.Duration {
	v := p.typed(k)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.fail(fmt.Sprintf("%s must be %s, got %q", k, what, v))
		return nil
	}
	return &d
}

// queueURL says whether s is an SQS queue's URL: http or https, a host, and a path naming the
// queue after its account (https://sqs.<region>.amazonaws.com/<account>/<name>; locally
// http://127.0.0.1:<port>/<account>/<name>).
func queueURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	return len(parts) == 2 && parts[0] != "" && parts[1] != ""
}

// queueName says whether s is a standard queue's name SQS takes with "-dlq" after it: 1 to 76
// letters, digits, '-' and '_' (SQS allows 80).
func queueName(s string) bool {
	if len(s) < 1 || len(s) > 76 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// topicARN says whether s is an SNS topic's ARN: arn:<partition>:sns:<region>:<account>:<name>.
func topicARN(s string) bool {
	parts := strings.Split(s, ":")
	return len(parts) == 6 && parts[0] == "arn" && parts[1] != "" && parts[2] == "sns" && parts[3] != "" && parts[4] != "" && parts[5] != ""
}

// bucketName says whether s follows S3's rules for a general purpose bucket's name: 3 to 63
// characters, lowercase letters, digits, '.' and '-', beginning and ending with a letter or digit,
// no two periods in a row.
func bucketName(s string) bool {
	if len(s) < 3 || len(s) > 63 || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '.' && c != '-') {
			return false
		}
	}
	return true
}

func quoted(s []string) []string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return q
}
