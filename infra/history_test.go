package infra

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"
)

// Tests of history.go: the bucket the packed history is archived to, its access logs, who may do
// what with it, the functions' settings, and the gateway endpoint the functions reach it through.

// TestHistoryBucket: encrypted, never public, TLS 1.2 or later only, versioned, retained with the
// stack, logged, and its lifecycle (Standard-IA at 30 days, Glacier Instant Retrieval at 90, objects
// over 128 KiB only; overwritten versions kept 90 days).
func TestHistoryBucket(t *testing.T) {
	for _, v := range []variant{variantAWS, variantLocalStack} {
		t.Run(string(v), func(t *testing.T) {
			s := synth(t, v)
			h := s.stack.History
			bucketID, logsID := s.ref(t, h.Bucket.BucketName()), s.ref(t, h.AccessLogs.BucketName())
			bucket := jsii.String("AWS::S3::Bucket")
			check(t, "two buckets: the archive and its access logs", func() { s.template.ResourceCountIs(bucket, jsii.Number(2)) })
			encrypted := map[string]any{"ServerSideEncryptionConfiguration": []any{
				map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}}}}
			private := map[string]any{"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true}
			check(t, "history bucket", func() {
				s.only(t, bucketID).HasResourceProperties(bucket, obj(map[string]any{
					"BucketEncryption":               encrypted,
					"PublicAccessBlockConfiguration": private,
					"VersioningConfiguration":        map[string]any{"Status": "Enabled"},
					"OwnershipControls":              map[string]any{"Rules": []any{map[string]any{"ObjectOwnership": "BucketOwnerEnforced"}}},
					"LoggingConfiguration":           map[string]any{"DestinationBucketName": refTo(logsID), "LogFilePrefix": "history/"},
					"ObjectLockEnabled":              assertions.Match_Absent(),
					"LifecycleConfiguration": map[string]any{
						"TransitionDefaultMinimumObjectSize": "all_storage_classes_128K",
						"Rules": []any{
							map[string]any{"Id": "cold-pages", "Status": "Enabled", "ObjectSizeGreaterThan": 128 * 1024,
								"Transitions": []any{
									map[string]any{"StorageClass": "STANDARD_IA", "TransitionInDays": 30},
									map[string]any{"StorageClass": "GLACIER_IR", "TransitionInDays": 90},
								}},
							map[string]any{"Id": "overwritten-pages-and-uploads", "Status": "Enabled",
								"NoncurrentVersionExpiration":    map[string]any{"NoncurrentDays": 90},
								"AbortIncompleteMultipartUpload": map[string]any{"DaysAfterInitiation": 1}},
						},
					},
				}))
			})
			check(t, "access log bucket", func() {
				s.only(t, logsID).HasResourceProperties(bucket, obj(map[string]any{
					"BucketEncryption":               encrypted,
					"PublicAccessBlockConfiguration": private,
					"LifecycleConfiguration": map[string]any{"Rules": []any{
						map[string]any{"Id": "expire-access-logs", "Status": "Enabled", "ExpirationInDays": 365}}},
				}))
			})
			// Neither bucket is deleted with the stack: the archive is the only copy of old events.
			for name, id := range map[string]string{"history": bucketID, "access logs": logsID} {
				check(t, name+" bucket retained", func() {
					s.only(t, id).HasResource(bucket, obj(map[string]any{"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}))
				})
			}

			// The bucket policy refuses plain HTTP and TLS before 1.2, to every principal.
			policy := jsii.String("AWS::S3::BucketPolicy")
			for name, cond := range map[string]any{
				"TLS only": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				"TLS 1.2":  map[string]any{"NumericLessThan": map[string]any{"s3:TlsVersion": 1.2}},
			} {
				check(t, "history bucket policy: "+name, func() {
					s.template.HasResourceProperties(policy, obj(map[string]any{
						"Bucket": refTo(bucketID),
						"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
							"Statement": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
								"Effect": "Deny", "Action": "s3:*", "Principal": map[string]any{"AWS": "*"}, "Condition": cond,
							})))),
						})),
					}))
				})
			}
			// S3 delivers the access logs by the log bucket's policy, for this bucket alone.
			check(t, "log delivery allowed from the history bucket only", func() {
				s.template.HasResourceProperties(policy, obj(map[string]any{
					"Bucket": refTo(logsID),
					"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
						"Statement": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
							"Effect":    "Allow",
							"Action":    "s3:PutObject",
							"Principal": map[string]any{"Service": "logging.s3.amazonaws.com"},
							"Condition": assertions.Match_ObjectLike(obj(map[string]any{
								"ArnLike": map[string]any{"aws:SourceArn": getAtt(bucketID, "Arn")},
							})),
						})))),
					})),
				}))
			})
		})
	}
}

// TestHistoryGrants: the sweeper puts, gets and lists; the api gets and lists (a missing page is
// then 404 NoSuchKey, not 403, history.go); no other role of the stack
// may do anything with S3 at all. Every statement of every role that names an S3 action or either
// bucket is listed, Action and Resource normalised (so "s3:*" or a Resource of "*" cannot hide).
func TestHistoryGrants(t *testing.T) {
	for _, v := range []variant{variantAWS, variantLocalStack} {
		t.Run(string(v), func(t *testing.T) {
			s := synth(t, v)
			h := s.stack.History
			bucketID, logsID := s.ref(t, h.Bucket.BucketName()), s.ref(t, h.AccessLogs.BucketName())
			arn := mustJSON(getAtt(bucketID, "Arn"))
			objects := mustJSON(map[string]any{"Fn::Join": []any{"", []any{getAtt(bucketID, "Arn"), "/*"}}})
			want := map[string][]string{
				"sweeper": {"s3:GetObject " + objects, "s3:ListBucket " + arn, "s3:PutObject " + objects},
				"api":     {"s3:GetObject " + objects, "s3:ListBucket " + arn},
			}
			roles := map[string]string{}
			for name, fn := range s.functionsByName() {
				roles[s.ref(t, fn.Role().RoleName())] = name
			}
			seen := 0
			for id, raw := range s.resources() {
				if raw.(map[string]any)["Type"] != "AWS::IAM::Role" {
					continue
				}
				seen++
				var got []string
				for _, st := range s.policiesOfRole(t, id) {
					for _, a := range st.Actions {
						for _, r := range st.Resources {
							rs := mustJSON(r)
							if strings.HasPrefix(a, "s3:") || a == "*" || strings.Contains(rs, bucketID) || strings.Contains(rs, logsID) {
								got = append(got, st.Effect+" "+a+" "+rs)
							}
						}
					}
				}
				slices.Sort(got)
				var expect []string
				for _, g := range want[roles[id]] {
					expect = append(expect, "Allow "+g)
				}
				if mustJSON(got) != mustJSON(expect) {
					t.Errorf("role %s (%s) may do %v with S3, want %v", id, cmpName(roles[id]), got, expect)
				}
			}
			if seen < len(roles) {
				t.Errorf("%d roles seen, want at least the %d functions'", seen, len(roles))
			}
		})
	}
}

func cmpName(fn string) string {
	if fn == "" {
		return "not a function of the application"
	}
	return "the " + fn + " function"
}

// TestHistorySettings: HISTORY_BUCKET (the bucket's name) for the sweeper and the api alone,
// HISTORY_RETENTION for the sweeper alone, the stack's setting or 2h (the application's default).
func TestHistorySettings(t *testing.T) {
	s := synth(t, variantAWS)
	bucketID := s.ref(t, s.stack.History.Bucket.BucketName())
	for name, fn := range s.functionsByName() {
		env := map[string]any{"HISTORY_BUCKET": assertions.Match_Absent(), "HISTORY_RETENTION": assertions.Match_Absent()}
		switch name {
		case "sweeper":
			env = map[string]any{"HISTORY_BUCKET": refTo(bucketID), "HISTORY_RETENTION": "2h"}
		case "api":
			env["HISTORY_BUCKET"] = refTo(bucketID)
		}
		check(t, name+"'s history settings", func() {
			s.only(t, s.ref(t, fn.FunctionName())).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
				"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&env)},
			}))
		})
	}

	// The stack passes the setting through.
	cfg := variantAWS.config()
	d := 48 * time.Hour
	cfg.HistoryRetention = &d
	app := newApp(t, nil)
	stack, err := Build(app, cfg)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "the sweeper's HISTORY_RETENTION from the stack's setting", func() {
		assertions.Template_FromStack(stack.Stack, nil).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(obj(map[string]any{"HISTORY_RETENTION": "48h"}))},
		}))
	})

	// The setting: a Go duration, 0 or more.
	for _, c := range []struct {
		value, want, wantErr string
	}{{"48h", "48h", ""}, {"90m", "1h30m", ""}, {"720h", "720h", ""}, {"30m", "30m", ""}, {"0", "0s", ""},
		{"a month", "", "Go duration"}, {"-1h", "", "0 or more"}} {
		app := newApp(t, map[string]any{ctxHistoryRetention: c.value})
		cfg, err := ConfigFromContext(app.Node())
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), ctxHistoryRetention) {
				t.Errorf("historyRetention=%q: error %v, want one naming the setting and %q", c.value, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("historyRetention=%q: %v", c.value, err)
			continue
		}
		if cfg.HistoryRetention == nil {
			t.Errorf("historyRetention=%q: not read", c.value)
			continue
		}
		if got := retentionSetting(*cfg.HistoryRetention); got != c.want {
			t.Errorf("historyRetention=%q: HISTORY_RETENTION %q, want %q", c.value, got, c.want)
		}
	}
}

// TestHistoryEndpoint: in AWS, the functions' and the delivery subnets reach S3 through a gateway
// endpoint whose policy admits the history bucket alone; the api (isolated subnets) may send to
// port 443 (checked with its egress in functions_test.go). LocalStack: no VPC, no endpoint.
func TestHistoryEndpoint(t *testing.T) {
	s := synth(t, variantAWS)
	h := s.stack.History
	bucketID := s.ref(t, h.Bucket.BucketName())
	tables := append(routeTables(s, t, s.stack.Network.FunctionSubnets()), routeTables(s, t, s.stack.Network.DeliverySubnets())...)
	check(t, "S3 gateway endpoint on the functions' and the delivery subnets' route tables, this bucket only", func() {
		s.template.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
			"VpcEndpointType": "Gateway",
			"ServiceName":     map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr(".s3"))}},
			"RouteTableIds":   assertions.Match_ArrayEquals(&tables),
			"PolicyDocument": map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
				"Effect":    "Allow",
				"Principal": map[string]any{"AWS": "*"},
				"Action":    []any{"s3:GetObject", "s3:PutObject", "s3:ListBucket"},
				"Resource": []any{getAtt(bucketID, "Arn"),
					map[string]any{"Fn::Join": []any{"", []any{getAtt(bucketID, "Arn"), "/*"}}}},
			}}},
		}))
	})
	if l := synth(t, variantLocalStack).stack.History; l.Endpoint != nil {
		t.Errorf("LocalStack variant: a VPC endpoint without a VPC")
	}
}

// routeTables are {"Ref": id} of the route tables of a subnet group, in the VPC's order.
func routeTables(s *synthesized, t *testing.T, sel *awsec2.SubnetSelection) []any {
	t.Helper()
	var out []any
	for _, sub := range *s.stack.Network.Vpc.SelectSubnets(sel).Subnets {
		out = append(out, refTo(s.ref(t, sub.RouteTable().RouteTableId())))
	}
	return out
}
