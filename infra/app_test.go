package infra

import (
	"regexp"
	"testing"
)

// Tests of app.go: Build. The nag checks it adds are tested in nag_test.go.

func TestBuildRefusesMissingBootstraps(t *testing.T) {
	app := newApp(t, nil)
	cfg := variantAWS.config()
	cfg.AssetDir = t.TempDir()
	_, err := Build(app, cfg)
	if err == nil || !regexp.MustCompile(`make lambdas`).MatchString(err.Error()) {
		t.Errorf("Build with no bootstraps: %v, want an error telling to run make lambdas", err)
	}
}
