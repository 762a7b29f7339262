package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPU accounting from /proc (Linux), to tell where the time of a path goes when several processes
// share the machine's cores. Where /proc is not readable the figures are simply absent.

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux configuration
// that matters (it is fixed by the kernel ABI, whatever CONFIG_HZ is).
const clockTicks = 100

// cpuSeconds returns the user+system CPU time a process has used, or -1.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // fields 14 and 15 of stat: utime, stime
		return -1
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (u + st) / clockTicks
}

// databasePID returns the pid of the database server db is connected to, where it runs on this
// machine: the process its pid file (@@pid_file) names, if that is a MariaDB or MySQL server, else
// the server process holding the socket that listens on its port (@@port). With a second server on
// the machine (the tests' MariaDB beside the benchmark's), the first one found by name was often the
// idle one, and the progress lines showed the database using no CPU. 0 when neither finds it (a
// server on another machine, or /proc unreadable): the figures then leave the database out.
func databasePID(ctx context.Context, db *sql.DB) int {
	var path string
	var port int
	if err := db.QueryRowContext(ctx, "SELECT @@pid_file, @@port").Scan(&path, &port); err != nil {
		return 0
	}
	return serverPID(path, port)
}

// serverPID is databasePID for a server whose pid file is at path and which listens on port.
func serverPID(path string, port int) int {
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isDatabaseServer(pid) {
			return pid
		}
	}
	inodes := listeningInodes(port)
	if len(inodes) == 0 {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isDatabaseServer(pid) {
			continue
		}
		if held, _ := holdsSocket(pid, inodes); held {
			return pid
		}
	}
	return 0
}

// holdsSocket says whether process pid has a descriptor on one of the sockets (listeningInodes's
// "socket:[inode]" texts); an error when its descriptors cannot be read (another user's process).
func holdsSocket(pid int, sockets map[string]bool) (bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && sockets[l] {
			return true, nil
		}
	}
	return false, nil
}

// listeningInodes returns the sockets listening on TCP port, as their descriptors' link text
// ("socket:[inode]"), from /proc/net/tcp and /proc/net/tcp6.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				out["socket:["+fs[9]+"]"] = true
			}
		}
	}
	return out
}

// databaseNames are the process names of the database servers the benchmark runs against.
var databaseNames = []string{"mariadbd", "mysqld"}

func isDatabaseServer(pid int) bool {
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return err == nil && slices.Contains(databaseNames, strings.TrimSpace(string(comm)))
}

// machineCPU returns the CPU seconds the whole machine has spent busy (every state but idle and
// iowait) and stolen by the hypervisor (steal, included in busy), from /proc/stat's first line, or
// -1s where /proc/stat is not readable.
func machineCPU() (busy, steal float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1, -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1, -1
	}
	var v [8]float64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i+1], 64); err != nil {
			return -1, -1
		}
	}
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy / clockTicks, v[7] / clockTicks
}

// cpuMeter measures the CPU time of a few processes over an interval, and what the rest of the
// machine used meanwhile: "other" (processes outside the measurement) and "steal" (time the
// hypervisor gave another guest). Both tell a window slowed by the machine from a slow path.
type cpuMeter struct {
	names []string
	pids  []int
	start []float64
	// busy0 and steal0 are the machine's counters at begin; negative where unreadable.
	busy0, steal0 float64
}

func newCPUMeter(procs map[string]int) *cpuMeter {
	m := &cpuMeter{}
	for _, name := range []string{"bench", "goaws", "database"} {
		if pid, ok := procs[name]; ok && pid > 0 && cpuSeconds(pid) >= 0 {
			m.names = append(m.names, name)
			m.pids = append(m.pids, pid)
		}
	}
	return m
}

func (m *cpuMeter) begin() {
	m.start = m.start[:0]
	for _, pid := range m.pids {
		m.start = append(m.start, cpuSeconds(pid))
	}
	m.busy0, m.steal0 = machineCPU()
}

// end returns the CPU seconds each process used since begin, and, where /proc/stat is readable,
// "other" (the machine's busy time not used by the measured processes) and "steal".
func (m *cpuMeter) end() map[string]float64 {
	out := map[string]float64{}
	ours := 0.0
	for i, pid := range m.pids {
		if c := cpuSeconds(pid); c >= 0 && i < len(m.start) {
			out[m.names[i]] = c - m.start[i]
			ours += c - m.start[i]
		}
	}
	if busy, steal := machineCPU(); busy >= 0 && m.busy0 >= 0 {
		out["steal"] = steal - m.steal0
		out["other"] = max(0, busy-m.busy0-out["steal"]-ours)
	}
	return out
}

// cpuSummary formats what end returned over a window of d as cores used, such as
// "cpu bench 1.10 goaws 0.21 database 0.62 other 0.03 steal 0.00".
func cpuSummary(used map[string]float64, d time.Duration) string {
	if len(used) == 0 || d <= 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("cores:")
	for _, k := range []string{"bench", "goaws", "database", "other", "steal"} {
		if v, ok := used[k]; ok {
			fmt.Fprintf(&b, " %s %.2f", k, v/d.Seconds())
		}
	}
	return b.String()
}
