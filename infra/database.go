package main

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Database is an Aurora MySQL 3 (MySQL 8.0 compatible) Serverless v2 cluster with one writer,
// reachable only through an RDS Proxy that requires IAM authentication and TLS.
type Database struct {
	constructs.Construct
	Cluster awsrds.DatabaseCluster
	Proxy   awsrds.DatabaseProxy
}

// auroraEngineVersion is pinned: a new engine version is a deliberate change, not a side effect of a
// CDK upgrade. Aurora MySQL 3.x is MySQL 8.0 compatible; 3.10.1 is the newest CDK 2.220 names.
func auroraEngineVersion() awsrds.AuroraMysqlEngineVersion {
	return awsrds.AuroraMysqlEngineVersion_VER_3_10_1()
}

// NewDatabase creates the cluster, its parameter group and the proxy in the network's database subnets.
func NewDatabase(scope constructs.Construct, id string, network *Network) *Database {
	c := constructs.NewConstruct(scope, &id)
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
		ServerlessV2MinCapacity: jsii.Number(minACU),
		ServerlessV2MaxCapacity: jsii.Number(maxACU),
		Vpc:                     network.Vpc,
		VpcSubnets:              network.DatabaseSubnets(),
		Port:                    jsii.Number(databasePort),
		StorageEncrypted:        jsii.Bool(true),
		Backup:                  &awsrds.BackupProps{Retention: awscdk.Duration_Days(jsii.Number(backupRetentionDays))},
		CloudwatchLogsExports:   jsii.Strings("error", "slowquery"),
		CloudwatchLogsRetention: logRetention,
		// `make destroy` must work; the final snapshot keeps the data.
		DeletionProtection: jsii.Bool(false),
		RemovalPolicy:      awscdk.RemovalPolicy_SNAPSHOT,
	})

	proxy := cluster.AddProxy(jsii.String("Proxy"), &awsrds.DatabaseProxyOptions{
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
	// Only the proxy may open connections to the cluster.
	cluster.Connections().AllowDefaultPortFrom(proxy, jsii.String("RDS Proxy to Aurora"))

	return &Database{Construct: c, Cluster: cluster, Proxy: proxy}
}
