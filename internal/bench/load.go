package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The load generator: closed-loop clients, each on its own keep-alive connection, each sending its
// next request when the previous one is answered, for a fixed time.

// loadResult is what one load window saw.
type loadResult struct {
	ok, failed int64
	took       time.Duration
	latencies  []time.Duration // of the successful requests
	statuses   map[int]int64
}

func (l loadResult) rps() float64 { return float64(l.ok) / l.took.Seconds() }

// percentile returns the p-th percentile (0 < p <= 100) of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// httpClient returns a client that keeps up to conns connections to one host.
func httpClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
			DisableCompression: true, IdleConnTimeout: time.Minute,
		},
	}
}

// request is one call: it returns the status, and the body for the caller to decode if it wants.
type request func(ctx context.Context, c *http.Client, worker int) (status int, body []byte, err error)

// call makes a request and reads the whole body, so that the connection is reused.
func call(ctx context.Context, c *http.Client, method, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// load runs conns clients for d. A request counts as successful when its status is 2xx; on success,
// onOK (optional) sees the worker, the time the request was sent and the body.
func load(ctx context.Context, client *http.Client, conns int, d time.Duration, req request,
	onOK func(worker int, sent time.Time, body []byte)) loadResult {
	var (
		mu  sync.Mutex
		res = loadResult{statuses: map[int]int64{}}
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var ok, failed int64
			statuses := map[int]int64{}
			for time.Now().Before(end) && ctx.Err() == nil {
				sent := time.Now()
				status, body, err := req(ctx, client, w)
				took := time.Since(sent)
				statuses[status]++
				if err != nil || status < 200 || status > 299 {
					failed++
					continue
				}
				ok++
				lat = append(lat, took)
				if onOK != nil {
					onOK(w, sent, body)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.ok += ok
			res.failed += failed
			res.latencies = append(res.latencies, lat...)
			for k, v := range statuses {
				res.statuses[k] += v
			}
		}()
	}
	wg.Wait()
	res.took = time.Since(start)
	slices.Sort(res.latencies)
	return res
}

// decodeID reads {"id": N} from a response body.
func decodeID(body []byte) (int64, error) {
	var m struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.ID <= 0 {
		return 0, fmt.Errorf("response has no id: %.100s", body)
	}
	return m.ID, nil
}

// side is one side of a side-by-side load: its request, and what its windows added up to.
type side struct {
	name, label string
	req         request
	res         loadResult
}

// alternate loads the sides in turns of window each, in an order that rotates every round, for
// rounds, adding each window's results to its side: the sides share the machine's noise.
func alternate(ctx context.Context, client *http.Client, conns, rounds int, window time.Duration, sides []*side) {
	for round := range rounds {
		for i := range sides {
			s := sides[(round+i)%len(sides)]
			res := load(ctx, client, conns, window, s.req, nil)
			s.res.ok += res.ok
			s.res.failed += res.failed
			s.res.took += res.took
			s.res.latencies = append(s.res.latencies, res.latencies...)
		}
	}
}
