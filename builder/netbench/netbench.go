// Package netbench runs the transfer benchmark that recipes with an NCCL net plugin ship
// (the embedded tools/netbench repository): two ranks on this host, a receiver and a
// sender, each loading the plugin through its ncclNet_v7 interface, and it reads back
// what each rank measured. The benchmark itself enforces the plugin's request window;
// this package only starts it, waits for both ranks and reports.
package netbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Component is the recipe component that installs the benchmark.
const Component = "netbench"

// Options say what to run. Zero values take the benchmark's own defaults.
type Options struct {
	// Bench is the netbench executable.
	Bench string
	// Plugin is the net plugin (a path, or a name NCCL would resolve).
	Plugin string
	// Env is the environment of both ranks (the plugin's settings, LD_LIBRARY_PATH).
	Env []string
	// Mem is "host" or "device".
	Mem          string
	Size         string // bytes per iteration, with K/M/G suffixes
	Chunk        string
	Window       int
	RequestLimit int
	Iters        int
	GPU          int
	// Timeout bounds each rank's wait for progress, in seconds.
	Timeout int
}

// Rank is what one rank printed (its --json line).
type Rank struct {
	Version      string  `json:"netbench"`
	Rank         int     `json:"rank"`
	Role         string  `json:"role"`
	Plugin       string  `json:"plugin"`
	PluginPath   string  `json:"plugin_path"`
	Mode         string  `json:"mode"`
	Bytes        int64   `json:"bytes"`
	Iters        int     `json:"iters"`
	Chunk        int64   `json:"chunk"`
	Chunks       int64   `json:"chunks"`
	Window       int     `json:"window"`
	RequestLimit int     `json:"request_limit"`
	MaxHeld      int     `json:"max_held"`
	Seconds      float64 `json:"seconds"`
	GBps         float64 `json:"gbps"`
	LatencyUS    struct {
		Min float64 `json:"min"`
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
		Max float64 `json:"max"`
	} `json:"lat_us"`
	Verified bool `json:"verified"`
}

// Result is both ranks' reports.
type Result struct {
	Recv Rank `json:"recv"`
	Send Rank `json:"send"`
}

// RankError is a rank that failed: its exit status and the end of what it said.
type RankError struct {
	Rank   int
	Status string
	Stderr string
}

func (e *RankError) Error() string {
	role := map[int]string{0: "sender", 1: "receiver"}[e.Rank]
	return fmt.Sprintf("netbench rank %d (%s) %s:\n%s", e.Rank, role, e.Status, strings.TrimRight(e.Stderr, "\n"))
}

// ExitCode: a failed transfer is a failed job; the benchmark's own code 2 and 3 (bad
// arguments, a plugin or CUDA that cannot be loaded) keep their meaning.
func (e *RankError) ExitCode() int {
	if strings.HasSuffix(e.Status, "exit status 2") {
		return 2
	}
	if strings.HasSuffix(e.Status, "exit status 3") {
		return 3
	}
	return 1
}

// Locate returns the benchmark and the loopback test plugin of an install prefix (the
// netbench component's bin/ and lib/).
func Locate(prefix string) (bench, loopback string, err error) {
	bench = filepath.Join(prefix, Component, "bin", "netbench")
	loopback = filepath.Join(prefix, Component, "lib", "libnccl-net-loopback.so")
	if _, err := os.Stat(bench); err != nil {
		return "", "", fmt.Errorf("find the transfer benchmark in %s: %w (install an artifact of a recipe with a %s component)", prefix, err, Component)
	}
	return bench, loopback, nil
}

// Run starts the receiver, then the sender, waits for both and returns their reports.
// A rank that fails ends the other.
func Run(ctx context.Context, o Options) (*Result, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a port for the ranks' handshake: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type out struct {
		rank   int
		stdout bytes.Buffer
		stderr bytes.Buffer
		err    error
	}
	done := make(chan *out, 2)
	start := func(rank int) error {
		o2 := &out{rank: rank}
		cmd := exec.CommandContext(ctx, o.Bench, o.args(rank, "127.0.0.1:"+strconv.Itoa(port))...)
		cmd.Env = o.Env
		cmd.Stdout, cmd.Stderr = &o2.stdout, &o2.stderr
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start netbench rank %d: %w", rank, err)
		}
		go func() {
			o2.err = cmd.Wait()
			done <- o2
		}()
		return nil
	}
	if err := start(1); err != nil {
		return nil, err
	}
	if err := start(0); err != nil {
		cancel()
		<-done
		return nil, err
	}
	res := &Result{}
	var first error
	for range 2 {
		r := <-done
		if r.err != nil {
			if first == nil {
				first = &RankError{Rank: r.rank, Status: r.err.Error(), Stderr: tail(r.stderr.String(), 20)}
			}
			cancel() // the other rank waits for a peer that is gone
			continue
		}
		var rk Rank
		if err := json.Unmarshal(lastLine(r.stdout.Bytes()), &rk); err != nil {
			if first == nil {
				first = fmt.Errorf("netbench rank %d printed no report: %w\n%s", r.rank, err, tail(r.stdout.String()+r.stderr.String(), 20))
			}
			continue
		}
		if r.rank == 1 {
			res.Recv = rk
		} else {
			res.Send = rk
		}
	}
	if first != nil {
		return nil, first
	}
	if !res.Recv.Verified {
		return res, errors.New("netbench: the receiver found wrong data")
	}
	return res, nil
}

func (o Options) args(rank int, oob string) []string {
	a := []string{"--rank", strconv.Itoa(rank), "--oob", oob, "--json"}
	add := func(flag, v string) {
		if v != "" {
			a = append(a, flag, v)
		}
	}
	num := func(flag string, v int) {
		if v != 0 {
			a = append(a, flag, strconv.Itoa(v))
		}
	}
	add("--plugin", o.Plugin)
	add("--mem", o.Mem)
	add("--size", o.Size)
	add("--chunk", o.Chunk)
	num("--window", o.Window)
	num("--request-limit", o.RequestLimit)
	num("--iters", o.Iters)
	num("--timeout", o.Timeout)
	if o.Mem == "device" {
		a = append(a, "--gpu", strconv.Itoa(o.GPU))
	}
	return a
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
