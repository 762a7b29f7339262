package infra

import (
	"strings"
	"testing"
)

// Tests of config.go: the context flags.

func TestConfigFromContext(t *testing.T) {
	cases := []struct {
		ctx     map[string]any
		wantErr string
		check   func(Config) bool
	}{
		{map[string]any{}, "", func(c Config) bool {
			return c.AssetDir == "build/lambda" && !c.LocalStack && !c.PublicAPI && c.LambdaArch == "arm64" && c.NatGateways == 1
		}},
		{map[string]any{"natGateways": "2"}, "", func(c Config) bool { return c.NatGateways == 2 }},
		{map[string]any{"natGateways": 1}, "", func(c Config) bool { return c.NatGateways == 1 }},
		{map[string]any{"natGateways": "0"}, "natGateways", nil},
		{map[string]any{"natGateways": "3"}, "natGateways", nil},
		{map[string]any{"natGateways": "one"}, "natGateways", nil},
		// No VPC in the LocalStack variant: the setting is ignored.
		{map[string]any{"localstack": "true", "natGateways": "0"}, "", func(c Config) bool { return c.LocalStack }},
		{map[string]any{"localstack": "true", "dbDsn": "a:b@tcp(x:1)/y"}, "", func(c Config) bool {
			return c.LocalStack && c.DBDSN == "a:b@tcp(x:1)/y"
		}},
		{map[string]any{"publicApi": true}, "", func(c Config) bool { return c.PublicAPI }},
		{map[string]any{"publicApi": "yes please"}, "publicApi", nil},
		{map[string]any{"lambdaArch": "sparc"}, "lambdaArch", nil},
		{map[string]any{"dbDsn": "a:b@tcp(x:1)/y"}, "dbDsn", nil},
		{map[string]any{"localstack": "true", "dbDsn": ""}, "dbDsn", nil},
	}
	for i, c := range cases {
		app := newApp(t, c.ctx)
		cfg, err := ConfigFromContext(app.Node())
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("case %d %v: error %v, want one naming %s", i, c.ctx, err, c.wantErr)
		case c.wantErr == "" && err != nil:
			t.Errorf("case %d %v: %v", i, c.ctx, err)
		case c.check != nil && !c.check(cfg):
			t.Errorf("case %d %v: config %+v", i, c.ctx, cfg)
		}
	}
}
