//go:build tools

// Package rie pins the AWS Lambda Runtime Interface Emulator (cmd/aws-lambda-rie): `make rie`
// builds it into bin/aws-lambda-rie with `go build`, from this module's go.mod and go.sum.
package rie

import _ "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"
