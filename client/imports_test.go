package client_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The client is for users' modules: it imports no package of this module (internal/ ones could not
// be imported from outside it, and the others would drag the service in), only the standard library
// and the AWS SDK.
func TestTheClientImportsOnlyTheStandardLibraryAndTheAWSSDK(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(strings.SplitN(path, "/", 2)[0], ".") && !strings.HasPrefix(path, "github.com/aws/aws-sdk-go-v2/") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
