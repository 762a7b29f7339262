package infra

import (
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// The archive of the packed history: the sweeper's maintenance writes each page of
// event_pages older than the retention window to the bucket as one object, reads it back to verify
// it, and only then deletes the page's rows; the api reads an archived event from its page's object.
// docs/deploy.md ("History: Aurora against S3") explains each choice and its cost.

// defaultHistoryRetention is HISTORY_RETENTION when the stack is not told otherwise (context
// historyRetention): how long after its newest event a packed page stays in Aurora before the
// sweeper archives it. The application's own default (internal/sweeping.DefaultRetention):
// a window of hours keeps event_pages within the size at which a read by id stays flat
// (about ten million events, one page row a partition) at a sustained thousand events a second,
// and pages older than that are read rarely enough that an S3 GET is an acceptable price.
const defaultHistoryRetention = 2 * time.Hour

// Lifecycle of the page objects (docs/deploy.md, "History: Aurora against S3"). Days count from the
// object's creation, when its events are already older than the retention window.
const (
	// historyInfrequentAfter: Standard-IA ($0.0125 a GB-month, $0.01 a GB retrieved), at the earliest
	// S3 allows it; the archive's likeliest reads (last month's events) come first.
	historyInfrequentAfter = 30 * 24 * time.Hour
	// historyInstantAfter: Glacier Instant Retrieval ($0.004 a GB-month, $0.03 a GB retrieved, read
	// in milliseconds like Standard). Never a class that needs a restore: an archived event is read
	// online, by GET /events/{id}.
	historyInstantAfter = 90 * 24 * time.Hour
	// historyMinTransitionBytes: objects up to 128 KiB stay in Standard. IA and Glacier IR bill
	// every object as at least 128 KiB, and a transition costs the same whatever the size; a page
	// is 585 KiB to 4.3 MiB (internal/pages/size_test.go), so only an almost empty page stays.
	historyMinTransitionBytes = 128 * 1024
	// historyNoncurrentKept: how long an overwritten version of a page is kept (versioning: the
	// object is the only copy of its events once the mover has deleted their rows).
	historyNoncurrentKept = 90 * 24 * time.Hour
	// historyAccessLogsKept: the bucket's server access logs (every GET and PUT of a page).
	historyAccessLogsKept = 365 * 24 * time.Hour
)

// HistoryProps configures NewHistory.
type HistoryProps struct {
	// Network is nil in the LocalStack variant (no VPC: no endpoint, no security groups).
	Network *Network
	// Writer archives pages: the sweeper. It may put, get (to verify what it wrote, and to merge
	// a page's late events into its object) and list: without s3:ListBucket, S3 answers a GET of a
	// key that does not exist with 403 AccessDenied instead of 404 NoSuchKey, and the archive's
	// reader (internal/archive) takes only NoSuchKey for "no such page"; a 403 is an error, as it
	// must be when the permission is really missing.
	Writer awslambda.Function
	// Readers read archived pages by key: the api. They may get objects, and list the bucket for
	// the reason the writer may.
	Readers []awslambda.Function
	// Retention is the sweeper's HISTORY_RETENTION; nil: defaultHistoryRetention. Zero archives
	// pages as soon as they are packed.
	Retention *time.Duration
}

// History is the bucket the packed history is archived to, its access log bucket and, in AWS, the
// S3 gateway endpoint the functions reach it through.
type History struct {
	constructs.Construct
	Bucket     awss3.Bucket
	AccessLogs awss3.Bucket
	// Endpoint is nil in the LocalStack variant.
	Endpoint awsec2.GatewayVpcEndpoint
}

// historyWriteActions are what the writer may do to page objects; historyReadActions what a
// reader may. Both may also list the bucket (HistoryProps.Writer says why). Nobody may delete.
var (
	historyWriteActions = []string{"s3:PutObject", "s3:GetObject"}
	historyReadActions  = []string{"s3:GetObject"}
)

// NewHistory creates the history bucket and wires the sweeper (writer) and the api (readers) to it:
// HISTORY_BUCKET (its name) for all of them, HISTORY_RETENTION for the writer, and IAM statements on
// this bucket only, written out rather than Grant*'s (GrantRead adds s3:List* and s3:GetBucket*,
// GrantPut tagging, retention and legal hold).
func NewHistory(scope constructs.Construct, id string, props HistoryProps) *History {
	c := constructs.NewConstruct(scope, &id)
	h := &History{Construct: c}
	// S3 server access logging writes with a bucket policy on the log bucket (logging.s3.amazonaws.com,
	// this bucket, this account) instead of the legacy LogDeliveryWrite ACL, which ACLs-disabled
	// buckets (BUCKET_OWNER_ENFORCED) cannot take.
	c.Node().SetContext(jsii.String("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"), true)
	retention := defaultHistoryRetention
	if props.Retention != nil {
		retention = *props.Retention
	}

	// Who read and wrote which page, and when: the only record of reads of archived events besides
	// the API's access log. Kept a year, then deleted; retained with the stack like the archive.
	h.AccessLogs = awss3.NewBucket(c, jsii.String("AccessLogs"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED, // what S3 server access logging can write to
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:         jsii.String("expire-access-logs"),
			Expiration: awscdk.Duration_Days(jsii.Number(historyAccessLogsKept.Hours() / 24)),
		}},
	})

	h.Bucket = awss3.NewBucket(c, jsii.String("Bucket"), &awss3.BucketProps{
		// SSE-S3: every object encrypted at rest with no key to manage and no per-request KMS
		// charge (each archived read is a GET; SSE-KMS would add a KMS call, or a bucket key, to
		// it). Who may read is decided by IAM, which grants GetObject to the api and the sweeper
		// alone; a customer managed key would add nothing to that but a second policy to keep.
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		MinimumTLSVersion: jsii.Number(1.2),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		// Versioning, because once the mover has verified a page and deleted its rows the object is
		// the only copy of ten thousand events: an overwrite (a page archived again with its late
		// events merged in, as internal/archive does; a bug; a hand-made PUT) keeps the previous
		// version for historyNoncurrentKept. It costs only what overwritten pages take, and late
		// events are rare. No object lock: nothing is granted s3:DeleteObject, and a retention
		// lock would also keep `make destroy` and an operator from ever removing the archive.
		Versioned: jsii.Bool(true),
		// The archive outlives the stack: `make destroy` leaves it (and its events) behind.
		RemovalPolicy:                      awscdk.RemovalPolicy_RETAIN,
		ServerAccessLogsBucket:             h.AccessLogs,
		ServerAccessLogsPrefix:             jsii.String("history/"),
		TransitionDefaultMinimumObjectSize: awss3.TransitionDefaultMinimumObjectSize_ALL_STORAGE_CLASSES_128_K,
		LifecycleRules: &[]*awss3.LifecycleRule{
			{
				Id:                    jsii.String("cold-pages"),
				ObjectSizeGreaterThan: jsii.Number(historyMinTransitionBytes),
				Transitions: &[]*awss3.Transition{
					{StorageClass: awss3.StorageClass_INFREQUENT_ACCESS(), TransitionAfter: days(historyInfrequentAfter)},
					{StorageClass: awss3.StorageClass_GLACIER_INSTANT_RETRIEVAL(), TransitionAfter: days(historyInstantAfter)},
				},
			},
			{
				Id:                                  jsii.String("overwritten-pages-and-uploads"),
				NoncurrentVersionExpiration:         days(historyNoncurrentKept),
				AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
			},
		},
	})

	objects := h.Bucket.ArnForObjects(jsii.String("*"))
	allow := func(fn awslambda.Function, actions []string, resource *string) {
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(actions...),
			Resources: jsii.Strings(*resource),
		}))
	}
	fns := append([]awslambda.Function{props.Writer}, props.Readers...)
	for _, fn := range fns {
		fn.AddEnvironment(jsii.String("HISTORY_BUCKET"), h.Bucket.BucketName(), nil)
	}
	allow(props.Writer, historyWriteActions, objects)
	allow(props.Writer, []string{"s3:ListBucket"}, h.Bucket.BucketArn())
	props.Writer.AddEnvironment(jsii.String("HISTORY_RETENTION"), jsii.String(retentionSetting(retention)), nil)
	for _, fn := range props.Readers {
		allow(fn, historyReadActions, objects)
		allow(fn, []string{"s3:ListBucket"}, h.Bucket.BucketArn())
	}
	// The one wildcard: the bucket's keys. A page's key is known only when the page is archived
	// (read), so the statements name every object of this bucket, and of no other.
	objectsFinding := &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::<[A-Za-z0-9]*HistoryBucket[0-9A-F]{8}\.Arn>\/\*$/`)}
	for _, fn := range fns {
		suppress(fn.Role(), true, &cdknag.NagPackSuppression{Id: jsii.String("AwsSolutions-IAM5"),
			AppliesTo: &[]any{objectsFinding},
			Reason: jsii.String("s3:GetObject (and for the sweeper s3:PutObject) on the objects of the history bucket alone: " +
				"one object a page of packed history, whose key is known only when the page is archived or read.")})
	}

	if n := props.Network; n != nil {
		// A gateway endpoint (free, unlike an interface endpoint's hourly charge per AZ, and no NAT
		// processing charge for the sweeper's pages): S3 traffic of the functions' and the delivery
		// subnets goes through it. Its policy admits this bucket alone, so that no function in the
		// VPC can copy data to another bucket through it, whatever its role allows.
		h.Endpoint = n.Vpc.AddGatewayEndpoint(jsii.String("S3Endpoint"), &awsec2.GatewayVpcEndpointOptions{
			Service: awsec2.GatewayVpcEndpointAwsService_S3(),
			Subnets: &[]*awsec2.SubnetSelection{n.FunctionSubnets(), n.DeliverySubnets()},
		})
		h.Endpoint.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
			Actions:    jsii.Strings("s3:GetObject", "s3:PutObject", "s3:ListBucket"),
			Resources:  jsii.Strings(*h.Bucket.BucketArn(), *objects),
		}))
		// The readers are in the isolated subnets, whose only routes out are the endpoints; a
		// gateway endpoint is reached at S3's public addresses (its prefix list, which a template
		// cannot name without a lookup), so their security group opens 443 to any IPv4 address, and
		// the route table, which has no route out but the endpoints, decides where it leads. The
		// writer (a delivering function) has 443 open already (webhooks.go).
		for _, fn := range props.Readers {
			fn.Connections().AllowToAnyIpv4(awsec2.Port_Tcp(jsii.Number(443)),
				jsii.String("the history bucket (S3), through the gateway endpoint: the isolated subnets have no other route out"))
		}
	}
	return h
}

// retentionSetting is HISTORY_RETENTION's value: a Go duration, without the zero minutes and
// seconds time.Duration.String adds ("720h", not "720h0m0s").
func retentionSetting(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func days(d time.Duration) awscdk.Duration { return awscdk.Duration_Days(jsii.Number(d.Hours() / 24)) }
