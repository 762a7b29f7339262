package infra

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Database is an Aurora MySQL 3 (MySQL 8.0 compatible) Serverless v2 cluster with one writer,
// reachable only through an RDS Proxy that requires IAM authentication and TLS.
//
// Two kinds of database user sign in through the proxy: the admin (the cluster's master user,
// whose password the proxy reads from its Secrets Manager secret; only migrate connects as it),
// and the functions' own users, which have no password at all. For those the proxy uses
// end-to-end IAM (DefaultAuthScheme IAM_AUTH): a client signs in to the proxy with an IAM token,
// and the proxy signs in to the cluster as the same user with a token of its own role's
// (AllowIAMUser). See docs/deploy.md, "Database users".
// DatabaseSettings are the Aurora cluster's settings a user of the construct may change
// (ExactlyOnceProps.Database); a zero field is the default of tuning.go.
type DatabaseSettings struct {
	// MinCapacity and MaxCapacity are the Serverless v2 capacity range in ACU (defaults 0.5 and 4:
	// max_connections follows the maximum; 0 ACU auto-pause cannot work with RDS Proxy).
	MinCapacity, MaxCapacity float64
	// BackupRetentionDays is how long automated backups are kept (default 7).
	BackupRetentionDays int
	// DeletionProtection refuses to delete the cluster (default off: the stack is destroyed with a
	// final snapshot).
	DeletionProtection bool
}

func (d DatabaseSettings) withDefaults() DatabaseSettings {
	if d.MinCapacity == 0 {
		d.MinCapacity = minACU
	}
	if d.MaxCapacity == 0 {
		d.MaxCapacity = maxACU
	}
	if d.BackupRetentionDays == 0 {
		d.BackupRetentionDays = backupRetentionDays
	}
	return d
}

type Database struct {
	constructs.Construct
	Cluster   awsrds.DatabaseCluster
	Proxy     awsrds.DatabaseProxy
	ProxyRole awsiam.Role
}

// AllowIAMUser lets grantee connect through the proxy as the database user `user`, which signs in
// with IAM (created WITH AWSAuthenticationPlugin by the migrate step): grantee may rds-db:connect
// to the proxy as that user, and the proxy's role to the cluster as that user. Nothing else.
func (d *Database) AllowIAMUser(grantee awsiam.IGrantable, user string) {
	d.Proxy.GrantConnect(grantee, jsii.String(user))
	// arn:<partition>:rds-db:<region>:<account>:dbuser:<cluster resource ID>/<user>
	d.ProxyRole.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings("rds-db:connect"),
		Resources: jsii.Strings(*awscdk.Stack_Of(d.Cluster).FormatArn(&awscdk.ArnComponents{
			Service:      jsii.String("rds-db"),
			Resource:     jsii.String("dbuser"),
			ResourceName: jsii.String(*d.Cluster.ClusterResourceIdentifier() + "/" + user),
			ArnFormat:    awscdk.ArnFormat_COLON_RESOURCE_NAME,
		})),
	}))
}

// auroraEngineVersion is pinned: a new engine version is a deliberate change, not a side effect of a
// CDK upgrade. Aurora MySQL 3.x is MySQL 8.0 compatible; 3.10.1 is the newest CDK 2.220 names.
func auroraEngineVersion() awsrds.AuroraMysqlEngineVersion {
	return awsrds.AuroraMysqlEngineVersion_VER_3_10_1()
}

// NewDatabase creates the cluster, its parameter group and the proxy in the network's database subnets.
func NewDatabase(scope constructs.Construct, id string, network *Network, settings DatabaseSettings) *Database {
	c := constructs.NewConstruct(scope, &id)
	settings = settings.withDefaults()
	engine := awsrds.DatabaseClusterEngine_AuroraMysql(&awsrds.AuroraMysqlClusterEngineProps{
		Version: auroraEngineVersion(),
	})

	// Cluster parameter group: the defaults every session gets.
	params := awsrds.NewParameterGroup(c, jsii.String("ClusterParameters"), &awsrds.ParameterGroupProps{
		Engine:      engine,
		Description: jsii.String("exactlyonce: READ-COMMITTED, short lock waits, slow query log"),
		Parameters: &map[string]*string{
			// Locks, not indexes, serialise the work: READ-COMMITTED takes no gap locks, so only the
			// rows a statement actually locks (SELECT ... FOR UPDATE [SKIP LOCKED]) block others.
			"transaction_isolation": jsii.String("READ-COMMITTED"),
			// Fail fast instead of the default 50 s: a waiter gives up well inside the api's 10 s
			// timeout and the retry helper (or SQS redelivery) tries again.
			"innodb_lock_wait_timeout": jsii.String(fmt.Sprint(lockWaitTimeoutSecs)),
			"slow_query_log":           jsii.String("1"),
			"long_query_time":          jsii.String("1"),
		},
	})

	cluster := awsrds.NewDatabaseCluster(c, jsii.String("Cluster"), &awsrds.DatabaseClusterProps{
		Engine:              engine,
		ParameterGroup:      params,
		Credentials:         awsrds.Credentials_FromGeneratedSecret(jsii.String(databaseAdminUsername), nil),
		DefaultDatabaseName: jsii.String(databaseName),
		Writer: awsrds.ClusterInstance_ServerlessV2(jsii.String("Writer"), &awsrds.ServerlessV2ClusterInstanceProps{
			PubliclyAccessible:      jsii.Bool(false),
			AutoMinorVersionUpgrade: jsii.Bool(true),
		}),
		// The functions' users sign in with IAM tokens (AWSAuthenticationPlugin), presented by the
		// proxy; the cluster accepts them only with IAM database authentication on.
		IamAuthentication:       jsii.Bool(true),
		ServerlessV2MinCapacity: jsii.Number(settings.MinCapacity),
		ServerlessV2MaxCapacity: jsii.Number(settings.MaxCapacity),
		Vpc:                     network.Vpc,
		VpcSubnets:              network.DatabaseSubnets(),
		Port:                    jsii.Number(databasePort),
		StorageEncrypted:        jsii.Bool(true),
		Backup:                  &awsrds.BackupProps{Retention: awscdk.Duration_Days(jsii.Number(settings.BackupRetentionDays))},
		CloudwatchLogsExports:   jsii.Strings("error", "slowquery"),
		CloudwatchLogsRetention: logRetention,
		// `make destroy` must work; the final snapshot keeps the data.
		DeletionProtection: jsii.Bool(settings.DeletionProtection),
		RemovalPolicy:      awscdk.RemovalPolicy_SNAPSHOT,
	})

	// The proxy's role: it reads the admin secret (granted by AddProxy) and signs in to the cluster
	// as the functions' users (AllowIAMUser).
	proxyRole := awsiam.NewRole(c, jsii.String("ProxyRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("rds.amazonaws.com"), nil),
		Description: jsii.String("exactlyonce RDS Proxy: the admin secret, and IAM sign-in as the functions' database users"),
	})
	proxy := cluster.AddProxy(jsii.String("Proxy"), &awsrds.DatabaseProxyOptions{
		Role: proxyRole,
		// Proxy names are unique per account and region; without a name CDK would use the construct ID.
		DbProxyName:           jsii.String(strings.ToLower(*awscdk.Stack_Of(c).StackName()) + "-proxy"),
		Secrets:               &[]awssecretsmanager.ISecret{cluster.Secret()},
		Vpc:                   network.Vpc,
		VpcSubnets:            network.DatabaseSubnets(),
		IamAuth:               jsii.Bool(true),
		RequireTLS:            jsii.Bool(true),
		MaxConnectionsPercent: jsii.Number(proxyMaxConnsPercent),
		BorrowTimeout:         awscdk.Duration_Seconds(jsii.Number(proxyBorrowTimeout.Seconds())),
		DebugLogging:          jsii.Bool(false),
	})
	// End-to-end IAM for every user without a secret of its own (the functions' users); the admin
	// keeps its secret. CDK 2.220's DatabaseProxy has no defaultAuthScheme yet (2.235 adds it), so
	// it is set on the CloudFormation resource.
	proxy.Node().DefaultChild().(awsrds.CfnDBProxy).SetDefaultAuthScheme(jsii.String("IAM_AUTH"))
	// Only the proxy may open connections to the cluster.
	cluster.Connections().AllowDefaultPortFrom(proxy, jsii.String("RDS Proxy to Aurora"))

	return &Database{Construct: c, Cluster: cluster, Proxy: proxy, ProxyRole: proxyRole}
}
