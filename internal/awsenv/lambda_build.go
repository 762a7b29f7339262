//go:build lambda.norpc

package awsenv

import (
	"context"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
)

const lambdaBuild = true

func load(context.Context) (aws.Config, error) { return Lambda(os.Getenv) }

func check() error { return CheckLambda(os.Environ()) }
