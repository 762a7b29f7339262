package infra

import (
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// The REST API's own domain, <api id>.execute-api.<region>.<url suffix>, is WEBHOOK_API_HOSTS of
// the api function (which refuses a task's url there at create) and of the processor and the
// sweeper (which refuse to deliver there): with -c publicApi=true, a task whose url is the API's
// POST /events/async made a task per delivery, without end. Migrate and the counter service deliver
// nothing and get none. The variable references the RestApi by id only (not its URL, which would
// make the api function wait for the stage that waits for the function): the template has no
// cycle, in the default and the public variant.
func TestTheAPIsOwnDomainIsRefusedAsATaskHost(t *testing.T) {
	for _, v := range []variant{variantAWS, variantPublic} {
		t.Run(string(v), func(t *testing.T) {
			s := synth(t, v)
			apiID := s.ref(t, s.stack.API.RestApiId())
			domain := map[string]any{"Fn::Join": []any{"", []any{refTo(apiID), ".execute-api.", refTo("AWS::Region"), ".", refTo("AWS::URLSuffix")}}}
			for name, fn := range map[string]awslambda.Function{"api": s.stack.Functions.API, "processor": s.stack.Functions.Processor,
				"sweeper": s.stack.Functions.Sweeper, "migrate": s.stack.Functions.Migrate, "counter": s.stack.Counters.Function} {
				id := s.ref(t, fn.FunctionName())
				props := s.resources()[id].(map[string]any)["Properties"].(map[string]any)
				vars, _ := props["Environment"].(map[string]any)["Variables"].(map[string]any)
				got, has := vars["WEBHOOK_API_HOSTS"]
				switch name {
				case "migrate", "counter":
					if has {
						t.Errorf("%s: WEBHOOK_API_HOSTS %v, want none", name, got)
					}
				default:
					check(t, name+": WEBHOOK_API_HOSTS is the REST API's execute-api domain", func() {
						s.only(t, id).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
							"Environment": map[string]any{"Variables": map[string]any{"WEBHOOK_API_HOSTS": domain}},
						}))
					})
					// HasResourceProperties compares a nested object whole only at the top: the value
					// itself, exactly.
					if !equalJSON(got, domain) {
						t.Errorf("%s: WEBHOOK_API_HOSTS %v, want %v", name, got, domain)
					}
				}
			}
			if c := s.cycle(); c != nil {
				t.Fatalf("the template has a dependency cycle: %s", strings.Join(c, " -> "))
			}
		})
	}
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if !equalJSON(v, y[k]) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// cycle returns a dependency cycle among the template's resources (through Ref, Fn::GetAtt and
// DependsOn), or nil: CloudFormation refuses such a template at deploy, which synthesis does not.
func (s *synthesized) cycle() []string {
	res := s.resources()
	deps := map[string][]string{}
	var refs func(v any, into map[string]bool)
	refs = func(v any, into map[string]bool) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["Ref"].(string); ok {
				into[r] = true
			}
			if g, ok := x["Fn::GetAtt"].([]any); ok && len(g) > 0 {
				if id, ok := g[0].(string); ok {
					into[id] = true
				}
			}
			for _, w := range x {
				refs(w, into)
			}
		case []any:
			for _, w := range x {
				refs(w, into)
			}
		}
	}
	for id, raw := range res {
		r := raw.(map[string]any)
		into := map[string]bool{}
		refs(r["Properties"], into)
		for _, d := range asList(r["DependsOn"]) {
			into[d.(string)] = true
		}
		for d := range into {
			if _, ok := res[d]; ok {
				deps[id] = append(deps[id], d)
			}
		}
		sort.Strings(deps[id])
	}
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(id string) []string
	visit = func(id string) []string {
		switch state[id] {
		case open:
			for i, p := range path {
				if p == id {
					return append(append([]string{}, path[i:]...), id)
				}
			}
		case done:
			return nil
		}
		state[id] = open
		path = append(path, id)
		for _, d := range deps[id] {
			if c := visit(d); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[id] = done
		return nil
	}
	ids := make([]string, 0, len(res))
	for id := range res {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if c := visit(id); c != nil {
			return c
		}
	}
	return nil
}
