// Package openapitest checks HTTP traffic against the API's OpenAPI document (openapi.yaml at the
// module's root, exactlyonce.OpenAPI), so that the document cannot drift from the API: every test
// that talks to the API does it through Handler (a server's side) or Transport (a client's side),
// and an answer the document does not describe fails the test. Tests only: no product code imports
// it.
//
// An exchange (a request and its answer) passes when:
//   - its path is one of the document's (matched as the API's router matches: the decoded path,
//     segment by segment, a literal segment before a wildcard) and its method is one of the path's:
//     then its answer's status must be documented for the operation, and its headers and body must
//     be the documented ones (every answer's schema is closed: a field not in it is refused). A
//     request the document refuses (a bad parameter, header or body) must be answered with a 4xx;
//   - its path is the document's with another method: the answer is a 405 with an Allow header
//     naming the path's methods in the document, and the error's JSON;
//   - its path is none of the document's: the answer is a 404 with the error's JSON. Anything else
//     is a route the document does not list.
//
// The one path the API routes that the document cannot spell is /events/, GET /events/{id} with
// an empty id (a 400): it is checked as /events/{id}.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// Validator checks exchanges against one OpenAPI document.
type Validator struct {
	doc    *openapi3.T
	routes []route
	errorS *openapi3.Schema // the Error schema: every unrouted answer's body
}

// route is one path of the document, split into segments ("{id}" is a wildcard).
type route struct {
	path string
	segs []string
	item *openapi3.PathItem
}

// New loads and validates an OpenAPI document (the loader's and the document's own Validate: the
// lint), and returns a Validator for it.
func New(data []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapitest: load the document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapitest: the document is not valid OpenAPI: %w", err)
	}
	v := &Validator{doc: doc}
	for _, p := range doc.Paths.InMatchingOrder() {
		v.routes = append(v.routes, route{path: p, segs: strings.Split(strings.TrimPrefix(p, "/"), "/"), item: doc.Paths.Value(p)})
	}
	ref := doc.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		return nil, errors.New("openapitest: the document has no Error schema")
	}
	v.errorS = ref.Value
	return v, nil
}

// Doc is the document the Validator checks against.
func (v *Validator) Doc() *openapi3.T { return v.doc }

var api = sync.OnceValues(func() (*Validator, error) { return New(exactlyonce.OpenAPI) })

// API returns the Validator of the API's document, loaded once.
func API(t testing.TB) *Validator {
	t.Helper()
	v, err := api()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Exchange is one request and its answer.
type Exchange struct {
	Method string
	Path   string // decoded, as URL.Path
	Query  string // raw
	Header http.Header
	// Body is the request's body; BodyKnown tells whether all of it is known (a server's handler
	// may answer before reading it: a body declared too large is refused unread).
	Body      []byte
	BodyKnown bool

	Status         int
	ResponseHeader http.Header
	ResponseBody   []byte
}

func (x Exchange) String() string {
	s := x.Method + " " + x.Path
	if x.Query != "" {
		s += "?" + x.Query
	}
	return fmt.Sprintf("%s answered %d %s", s, x.Status, bytes.TrimSpace(truncate(x.ResponseBody, 300)))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return append(b[:n:n], "..."...)
	}
	return b
}

// match finds the document's route of a decoded path, as the API's router does: segment by
// segment, a literal segment preferred to a wildcard at the first place two routes differ.
func (v *Validator) match(path string) (*route, map[string]string) {
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "//") {
		return nil, nil
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if path == "/events/" { // the API's one empty wildcard: GET /events/{id} with an empty id, a 400
		segs = []string{"events", "\x00"}
	}
	var best *route
	var bestParams map[string]string
	for i := range v.routes {
		r := &v.routes[i]
		params, ok := r.matches(segs)
		if !ok {
			continue
		}
		if best == nil || r.moreLiteral(best) {
			best, bestParams = r, params
		}
	}
	return best, bestParams
}

func wildcard(seg string) (string, bool) {
	if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

func (r *route) matches(segs []string) (map[string]string, bool) {
	if len(segs) != len(r.segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, s := range r.segs {
		if name, ok := wildcard(s); ok {
			if segs[i] == "" {
				return nil, false
			}
			params[name] = segs[i]
			continue
		}
		if s != segs[i] {
			return nil, false
		}
	}
	return params, true
}

func (r *route) moreLiteral(other *route) bool {
	for i := range r.segs {
		_, w1 := wildcard(r.segs[i])
		_, w2 := wildcard(other.segs[i])
		if w1 != w2 {
			return !w1
		}
	}
	return false
}

// methods are the path's methods in the document, as an Allow header lists them.
func (r *route) methods() string {
	return strings.Join(slices.Sorted(maps.Keys(r.item.Operations())), ", ")
}

// Check checks one exchange; the error names every way it departs from the document.
func (v *Validator) Check(x Exchange) error {
	r, params := v.match(x.Path)
	if r == nil {
		if x.Status != http.StatusNotFound {
			return fmt.Errorf("a route the document does not list: %s (want 404)", x)
		}
		return v.checkError(x)
	}
	op := r.item.GetOperation(x.Method)
	if op == nil {
		if x.Status != http.StatusMethodNotAllowed {
			return fmt.Errorf("a method the document does not list for %s: %s (want 405)", r.path, x)
		}
		if got, want := x.ResponseHeader.Get("Allow"), r.methods(); got != want {
			return fmt.Errorf("%s: Allow is %q; the document lists %q", x, got, want)
		}
		return v.checkError(x)
	}

	ctx := context.Background()
	req, err := x.request()
	if err != nil {
		return fmt.Errorf("%s: %w", x, err)
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
		ExcludeRequestBody:    !x.BodyKnown,
		SkipSettingDefaults:   true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Options: opts,
		Route: &routers.Route{Spec: v.doc, Path: r.path, PathItem: r.item, Method: x.Method, Operation: op}}
	var errs []error
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && (x.Status < 400 || x.Status > 499) {
		errs = append(errs, fmt.Errorf("a request the document refuses was answered %d: %w", x.Status, reqErr))
	}
	err = openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{RequestValidationInput: in,
		Status: x.Status, Header: x.ResponseHeader, Body: io.NopCloser(bytes.NewReader(x.ResponseBody)), Options: opts})
	if err != nil {
		errs = append(errs, fmt.Errorf("the answer is not the document's: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s (operation %s): %w", x, op.OperationID, errors.Join(errs...))
	}
	return nil
}

// checkError checks that an answer is the API's error: JSON {"error": "..."}.
func (v *Validator) checkError(x Exchange) error {
	if ct := x.ResponseHeader.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("%s: Content-Type %q, want application/json", x, ct)
	}
	var body any
	if err := json.Unmarshal(x.ResponseBody, &body); err != nil {
		return fmt.Errorf("%s: %w", x, err)
	}
	if err := v.errorS.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("%s: not the Error schema: %w", x, err)
	}
	return nil
}

// jsonSpace is the whitespace JSON allows around a value: a body of only these is no body, to the
// API (docs/api.md, "Request bodies").
const jsonSpace = " \t\r\n"

// request is the exchange's request as the validator reads it. The API reads every body as JSON
// whatever its Content-Type (the document says application/json): a body sent without one is
// validated as JSON, whatever it says.
func (x Exchange) request() (*http.Request, error) {
	u := &url.URL{Scheme: "http", Host: "api", Path: x.Path, RawQuery: x.Query}
	body := x.Body
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		body = nil
	}
	req, err := http.NewRequest(x.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = x.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	if body == nil {
		req.Body = http.NoBody
		req.ContentLength = 0
		req.Header.Del("Content-Type")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}
