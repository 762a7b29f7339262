package infra

import (
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The REST API's routes are the API's OpenAPI document's (../openapi.yaml), method for method: a
// route the document lists that API Gateway does not serve would answer 403 on AWS, and one API
// Gateway serves that the document does not list is a route no test checks. The routes are read
// from the synthesised template: every AWS::ApiGateway::Method of the API, its path rebuilt from
// its resource's PathPart up to the API's root.
func TestAPIRoutesAreTheOpenAPIDocuments(t *testing.T) {
	raw, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	operations := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var documented []string
	for path, item := range doc.Paths {
		for key := range item {
			if slices.Contains(operations, key) {
				documented = append(documented, strings.ToUpper(key)+" "+path)
			}
		}
	}

	s := synth(t, variantAWS)
	resources := s.resources()
	// pathOf rebuilds a resource's path from its PathPart and its parents'; the root's is "".
	var pathOf func(ref any) string
	pathOf = func(ref any) string {
		m, ok := ref.(map[string]any)
		if !ok {
			t.Fatalf("a resource reference that is not an object: %v", ref)
		}
		if _, ok := m["Fn::GetAtt"]; ok { // the RestApi's RootResourceId
			return ""
		}
		id, _ := m["Ref"].(string)
		r, ok := resources[id].(map[string]any)
		if !ok || r["Type"] != "AWS::ApiGateway::Resource" {
			t.Fatalf("ResourceId %v is not an API resource", ref)
		}
		props := r["Properties"].(map[string]any)
		return pathOf(props["ParentId"]) + "/" + props["PathPart"].(string)
	}
	var deployed []string
	for _, raw := range resources {
		r := raw.(map[string]any)
		if r["Type"] != "AWS::ApiGateway::Method" {
			continue
		}
		props := r["Properties"].(map[string]any)
		path := pathOf(props["ResourceId"])
		if path == "" {
			path = "/"
		}
		deployed = append(deployed, props["HttpMethod"].(string)+" "+path)
	}
	slices.Sort(documented)
	slices.Sort(deployed)
	if len(documented) == 0 || !slices.Equal(documented, deployed) {
		t.Errorf("the REST API's methods are not the OpenAPI document's:\n deployed:   %v\n documented: %v", deployed, documented)
	}
}
