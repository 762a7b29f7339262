// Package archive is the archived history's bucket: one S3 object a page of the packed
// history (internal/pages' object format), written by the sweeper's move (pagestore, archive.go)
// and read by every read of an archived event, with a small in-process cache of hot pages bounded
// by bytes. It speaks to S3 through the AWS SDK's S3 client; locally, to tools/s3local (gofakes3),
// through AWS_ENDPOINT_URL_S3.
package archive

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/exactlyonce/exactlyonce"
)

// DefaultCacheBytes is the most bytes of pages a process keeps in its cache (New's cacheBytes
// when zero): a few dozen pages of small events, a few MB each at most, well inside a 256 MB
// Lambda beside its batches.
const DefaultCacheBytes = 64 << 20

// MaxObjectBytes is the largest object a read accepts: a page is ten thousand events, packed
// under pagestore's bound of a page's bytes (archiveMaxPageBytes), which is below this.
const MaxObjectBytes = 256 << 20

// ClientOptions gives an S3 client what every S3 client of the project has: path-style addressing
// when pathStyle (an endpoint override such as a local gofakes3 on 127.0.0.1 has no bucket
// subdomains; AWS does not need it).
func ClientOptions(pathStyle bool) func(*s3.Options) {
	return func(o *s3.Options) { o.UsePathStyle = pathStyle }
}

// NewClient returns the product's S3 client from the AWS configuration (region, credentials and
// AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, in which case it addresses buckets by path).
func NewClient(awsCfg aws.Config) *s3.Client {
	override := os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	return s3.NewFromConfig(awsCfg, ClientOptions(override))
}

// DefaultTimeout bounds each call a Bucket makes to S3 (Bucket.Timeout's default): the SDK's
// attempts and the reading of the object's body together. An archived read is one GET of a page
// of some hundreds of KB (32 MiB at most), tens of milliseconds in AWS; 5 s is half the API
// function's timeout (infra's apiTimeout, 10 s), so that an endpoint that stops answering is a
// 503 before the function is killed, and a sweeper's move gives up and lets its agent claim again.
const DefaultTimeout = 5 * time.Second

// Bucket is the archived history in one bucket. Safe for concurrent use once configured.
type Bucket struct {
	// Timeout bounds each call to the bucket (GetPage's read, ReadPage, PutPage), retries and body
	// included; zero: DefaultTimeout. Set it before the Bucket is used.
	Timeout time.Duration

	client func() (*s3.Client, error)
	name   string
	cache  *cache
	held   atomic.Int64 // when a listing last found a page object here (unix ns; HoldsPages)
}

// New returns the archive in bucket name, caching up to cacheBytes of pages (0: DefaultCacheBytes;
// negative: none).
func New(client *s3.Client, name string, cacheBytes int64) *Bucket {
	return OnFirstUse(func() (*s3.Client, error) { return client, nil }, name, cacheBytes)
}

// OnFirstUse is New with the S3 client that build makes at the bucket's first call to S3 (a read
// of a page the cache does not hold, or a write), once, whether it succeeds or fails: a function
// whose first invocations read no archived page (most of them) does not build it at its cold
// start. An error of build is each call's, an unavailable archive (503 for an API read).
func OnFirstUse(build func() (*s3.Client, error), name string, cacheBytes int64) *Bucket {
	if cacheBytes == 0 {
		cacheBytes = DefaultCacheBytes
	}
	return &Bucket{client: sync.OnceValues(build), name: name, cache: newCache(max(cacheBytes, 0))}
}

// s3 returns the bucket's client, built at the first call.
func (b *Bucket) s3() (*s3.Client, error) {
	c, err := b.client()
	if err != nil {
		return nil, unavailable(fmt.Errorf("archive: S3 client: %w", err))
	}
	return c, nil
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Key is the key of page's object: pages/<page>.
func Key(page int64) string { return fmt.Sprintf("pages/%d", page) }

// OwnerMeta is the S3 user metadata (x-amz-meta-archive-id) that names the archive an object was
// written by: the identity of the database whose move wrote it (history_archive.archive_id,
// migration 0038), so that a reader of a bucket another database shares tells that database's
// objects from its own (pagestore). An object without it was written before, and is read as it was.
const OwnerMeta = "archive-id"

// Object is a page's object and the identity of the archive that wrote it (OwnerMeta; "" for an
// object written without one).
type Object struct {
	Bytes []byte
	Owner string
}

// GetPage is GetObject without the object's owner (for checkers and tests).
func (b *Bucket) GetPage(ctx context.Context, page int64, fresh bool) ([]byte, bool, error) {
	obj, ok, err := b.GetObject(ctx, page, fresh)
	return obj.Bytes, ok, err
}

// GetObject returns page's object, ok false when the bucket holds none. fresh reads the bucket even
// when the cache holds the page (a page's object gains the late events of its page when it is
// archived again, so a reader that misses an event in a cached page asks again); either way the
// object read is cached, with its owner.
func (b *Bucket) GetObject(ctx context.Context, page int64, fresh bool) (Object, bool, error) {
	if !fresh {
		if obj, ok := b.cache.get(page); ok {
			return obj, true, nil
		}
	}
	obj, _, ok, err := b.get(ctx, page)
	if err != nil || !ok {
		return Object{}, false, err
	}
	b.cache.put(page, obj)
	return obj, true, nil
}

// get reads page's object from the bucket, with its owner and its version (ETag).
func (b *Bucket) get(ctx context.Context, page int64) (Object, string, bool, error) {
	client, err := b.s3()
	if err != nil {
		return Object{}, "", false, err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.name), Key: aws.String(Key(page))})
	if isNotFound(err) {
		return Object{}, "", false, nil
	}
	if err != nil {
		return Object{}, "", false, unavailable(fmt.Errorf("archive: get page %d: %w", page, err))
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength <= MaxObjectBytes {
		buf.Grow(int(*out.ContentLength))
	}
	n, err := io.Copy(&buf, io.LimitReader(out.Body, MaxObjectBytes+1))
	if err != nil {
		return Object{}, "", false, unavailable(fmt.Errorf("archive: read page %d: %w", page, err))
	}
	if n > MaxObjectBytes {
		return Object{}, "", false, fmt.Errorf("archive: page %d's object is over %d bytes", page, MaxObjectBytes)
	}
	return Object{Bytes: buf.Bytes(), Owner: owner(out.Metadata)}, aws.ToString(out.ETag), true, nil
}

// owner is the OwnerMeta of an object's metadata, whose keys S3 and the SDK may spell in any case.
func owner(meta map[string]string) string {
	for k, v := range meta {
		if strings.EqualFold(k, OwnerMeta) {
			return v
		}
	}
	return ""
}

// heldFor is how long HoldsPages trusts a listing that found a page object: a reader of a bucket that
// holds pages asks S3 at most once a minute, however many reads miss an object.
const heldFor = time.Minute

// HoldsPages says whether the bucket holds any page object at all: one listing of at most one key
// (s3:ListBucket, which every reader of the bucket has), whose positive answer is trusted for
// heldFor. A reader that misses the object of a page the move passed, in a history whose move has
// archived events, asks it: with no page object at all, the bucket is not the one the sweeper moved
// the pages to (another S3 endpoint or directory, another bucket name, a bucket emptied), and the
// miss is no proof that the event does not exist.
func (b *Bucket) HoldsPages(ctx context.Context) (bool, error) {
	if t := b.held.Load(); t != 0 && time.Since(time.Unix(0, t)) < heldFor {
		return true, nil
	}
	client, err := b.s3()
	if err != nil {
		return false, err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b.name), Prefix: aws.String("pages/"), MaxKeys: aws.Int32(1)})
	if err != nil {
		return false, unavailable(fmt.Errorf("archive: list pages: %w", err))
	}
	if len(out.Contents) == 0 {
		return false, nil
	}
	b.held.Store(time.Now().UnixNano())
	return true, nil
}

// ReadPage is ReadObject without the object's owner (for tests).
func (b *Bucket) ReadPage(ctx context.Context, page int64) (obj []byte, version string, ok bool, err error) {
	o, version, ok, err := b.ReadObject(ctx, page)
	return o.Bytes, version, ok, err
}

// ReadObject returns page's object as the bucket holds it now (never the cache), with its owner,
// and its version (its ETag), for a writer that replaces it (PutObject); ok is false when there is
// none.
func (b *Bucket) ReadObject(ctx context.Context, page int64) (obj Object, version string, ok bool, err error) {
	return b.get(ctx, page)
}

// ErrPageChanged is PutPage's error when the bucket no longer holds the version of the page it was
// told (another writer replaced or created it since it was read).
var ErrPageChanged = errors.New("archive: the page's object changed since it was read")

// PutPage writes page's object only if the bucket still holds the version of it that the caller
// read (ReadPage; "" when there was none): a conditional write (If-Match, If-None-Match), so that a
// writer working from an older state never replaces a newer object (ErrPageChanged). The object
// carries its SHA-256, which S3 checks against the bytes it receives. The caller reads it back
// before it lets go of the page's rows (pagestore's move).
func (b *Bucket) PutPage(ctx context.Context, page int64, obj []byte, version string) error {
	return b.PutObject(ctx, page, Object{Bytes: obj}, version)
}

// PutObject is PutPage of an object with its owner, which it writes as the object's user metadata
// (OwnerMeta) when it is not "".
func (b *Bucket) PutObject(ctx context.Context, page int64, o Object, version string) error {
	obj := o.Bytes
	sum := sha256.Sum256(obj)
	in := &s3.PutObjectInput{Bucket: aws.String(b.name), Key: aws.String(Key(page)),
		Body: bytes.NewReader(obj), ContentLength: aws.Int64(int64(len(obj))), ContentType: aws.String("application/octet-stream"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:]))}
	if o.Owner != "" {
		in.Metadata = map[string]string{OwnerMeta: o.Owner}
	}
	if version == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(version)
	}
	client, err := b.s3()
	if err != nil {
		return err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err = client.PutObject(ctx, in)
	b.cache.drop(page)
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "PreconditionFailed" || api.ErrorCode() == "ConditionalRequestConflict") {
		return fmt.Errorf("%w (page %d)", ErrPageChanged, page)
	}
	if err != nil {
		return unavailable(fmt.Errorf("archive: put page %d: %w", page, err))
	}
	return nil
}

// bound returns ctx bounded by the Bucket's Timeout, for one call: its attempts and, for a GET,
// the reading of the body, which the SDK reads under the request's context.
func (b *Bucket) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(b.Timeout, DefaultTimeout))
}

// Changed says whether err is PutPage's for a page whose object changed since it was read.
func (b *Bucket) Changed(err error) bool { return errors.Is(err, ErrPageChanged) }

// CachedBytes is how many bytes of pages the cache holds.
func (b *Bucket) CachedBytes() int64 { return b.cache.size() }

// unavailableError is an EUNAVAILABLE domain error (a read of the archive that failed: S3 down,
// throttled, unreachable or refused) that keeps the SDK's error for logs: the API answers 503, as it
// does when the database is down, and a caller may retry.
type unavailableError struct{ err error }

func unavailable(err error) error { return &unavailableError{err} }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the history's archive is unavailable; try again")}
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound")
}
