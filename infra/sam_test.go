package infra

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// samInvoke is one `sam local invoke <function> -e <event>` of the documentation.
var samInvoke = regexp.MustCompile(`sam local invoke (\S+)(?: -e (\S+))?`)

// The SAM instructions (localstack/README.md, samconfig.toml, docs/deploy.md) work against the
// synthesised template: every function they name is a Lambda function of the template, under the
// name `sam local invoke` resolves (samResourceID: its construct id, from the aws:cdk:path
// metadata), whose code is the asset staged from build/lambda/<function>; every event file they
// name is in events/; and they name all five functions and `sam local start-api`. SAM CLI and
// Docker are not needed: the test reads the template and the cloud assembly.
func TestSAMInstructionsMatchTheTemplate(t *testing.T) {
	// Synthesised as `make synth-localstack` does (the variant the SAM instructions use): the CDK CLI
	// turns on the path and asset metadata SAM reads.
	app := newApp(t, map[string]any{"aws:cdk:enable-path-metadata": true, "aws:cdk:enable-asset-metadata": true})
	if _, err := Build(app, variantLocalStack.config()); err != nil {
		t.Fatal(err)
	}
	outdir := *app.Synth(nil).Directory()
	raw, err := os.ReadFile(filepath.Join(outdir, StackName+".template.json"))
	if err != nil {
		t.Fatal(err)
	}
	var template struct {
		Resources map[string]struct {
			Type     string
			Metadata map[string]any
		}
	}
	if err := json.Unmarshal(raw, &template); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..")
	// The application's functions (their assets are the test's fake bootstraps), by the name SAM
	// resolves (samResourceID).
	byName := map[string]map[string]any{}
	for logicalID, res := range template.Resources {
		if res.Type != "AWS::Lambda::Function" {
			continue
		}
		meta := res.Metadata
		asset, _ := meta["aws:asset:path"].(string)
		if b, err := os.ReadFile(filepath.Join(outdir, asset, "bootstrap")); asset == "" || err != nil || !strings.Contains(string(b), "# fake ") {
			continue // one of CDK's own functions (the trigger's provider, log retention, ...)
		}
		byName[samResourceID(logicalID, meta)] = meta
	}
	var named []string
	startAPI := false
	for _, doc := range []string{"localstack/README.md", "samconfig.toml", "docs/deploy.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		startAPI = startAPI || strings.Contains(string(b), "sam local start-api")
		for _, m := range samInvoke.FindAllStringSubmatch(string(b), -1) {
			fn, event := m[1], m[2]
			meta, ok := byName[fn]
			if !ok {
				t.Errorf("%s: sam local invoke %s: no such function in the template (functions: %v)", doc, fn, keys(byName))
				continue
			}
			named = append(named, fn)
			// Its code is the bootstrap of build/lambda/<function>: the staged asset holds it (the
			// test's fake bootstraps say which function they are).
			asset, _ := meta["aws:asset:path"].(string)
			if asset == "" || meta["aws:asset:property"] != "Code" {
				t.Errorf("%s: %s has no code asset SAM can find: %v", doc, fn, meta)
				continue
			}
			code, err := os.ReadFile(filepath.Join(outdir, asset, "bootstrap"))
			if err != nil {
				t.Errorf("%s: %s: the asset %s has no bootstrap: %v", doc, fn, asset, err)
			} else if want := "# fake " + strings.ToLower(strings.TrimSuffix(fn, "Function")); !strings.Contains(string(code), want) {
				t.Errorf("%s: %s runs the wrong bootstrap: %q", doc, fn, code)
			}
			if event != "" {
				if _, err := os.Stat(filepath.Join(root, event)); err != nil {
					t.Errorf("%s: sam local invoke %s -e %s: %v", doc, fn, event, err)
				}
			}
		}
	}
	for name := range byName {
		if !slices.Contains(named, name) {
			t.Errorf("the SAM instructions never invoke %s", name)
		}
	}
	if !startAPI {
		t.Error("the SAM instructions do not show sam local start-api")
	}
}

// samResourceID is the name `sam local invoke` takes for a resource of a CDK template, as the SAM
// CLI derives it (samcli/lib/samlib/resource_metadata_normalizer.py, get_resource_id): the
// SamResourceId metadata if set; else, from the aws:cdk:path metadata, the construct's own id (the
// path's last part, or the one before a last "Resource"); else the logical ID.
func samResourceID(logicalID string, meta map[string]any) string {
	if id, _ := meta["SamResourceId"].(string); id != "" {
		return id
	}
	path, _ := meta["aws:cdk:path"].(string)
	parts := strings.Split(path, "/")
	switch {
	case path == "" || len(parts) < 2:
		return logicalID
	case parts[len(parts)-1] == "Resource":
		return parts[len(parts)-2]
	}
	return parts[len(parts)-1]
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
