package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/compat"
)

// freeMemoryQuery is nvidia-smi's documented CSV query of each GPU's free memory: one
// line per GPU, "<index>, <MiB>" ("[N/A]" where the driver cannot say, as under MIG).
var freeMemoryQuery = []string{"nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"}

// smiQuery is nvidia-smi's full report; the checks read each GPU's Fabric section.
var smiQuery = []string{"nvidia-smi", "-q"}

// gpuFree is one line of the free-memory query.
type gpuFree struct {
	index string
	mib   uint64
	ok    bool   // mib was a number
	raw   string // what nvidia-smi printed for it
}

func parseFreeMemory(b []byte) ([]gpuFree, error) {
	var out []gpuFree
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		idx, v, ok := strings.Cut(line, ",")
		if !ok {
			return nil, fmt.Errorf("nvidia-smi free memory: %q is not \"<index>, <MiB>\"", line)
		}
		g := gpuFree{index: strings.TrimSpace(idx), raw: strings.TrimSpace(v)}
		if n, err := strconv.ParseUint(g.raw, 10, 64); err == nil {
			g.mib, g.ok = n, true
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, errors.New("nvidia-smi free memory: no GPU listed")
	}
	return out, sc.Err()
}

// checkFreeMemory compares each GPU's free memory with what a job of the recipe takes
// from it at once: DeepEP's buffer (runtime.buffer-bytes), or with CUDA VMM off the whole
// symmetric heap NVSHMEM reserves when it starts (R32).
func (r *Node) checkFreeMemory(ctx context.Context) check.Result {
	c := check.Result{ID: "host.gpu.free-memory", Why: "DeepEP's buffer comes out of NVSHMEM's symmetric heap on each GPU, and with CUDA VMM " +
		"off NVSHMEM reserves the whole heap (NVSHMEM_SYMMETRIC_SIZE) when it starts (R32); a GPU without that much free " +
		"memory fails the job's start. The free memory is what nvidia-smi says now: other processes may hold more later"}
	need, what := r.cfg.BufferBytes, "runtime.buffer-bytes"
	if r.cfg.FixedHeapBytes > need {
		need, what = r.cfg.FixedHeapBytes, "the fixed symmetric heap (CUDA VMM off, NVSHMEM_SYMMETRIC_SIZE)"
	}
	if need == 0 {
		return skip(c, "the recipe declares no runtime.buffer-bytes, and with CUDA VMM on NVSHMEM's heap grows as DeepEP allocates")
	}
	needText := fmt.Sprintf("need %s bytes on each GPU: %s", compat.FormatSize(need), what)
	out, err := r.sys.Output(ctx, freeMemoryQuery...)
	if err != nil {
		fix := "run on the GPU node with the NVIDIA driver's nvidia-smi on PATH"
		if errors.Is(err, exec.ErrNotFound) {
			fix = "install the NVIDIA driver's utilities (nvidia-smi), or run on the GPU node"
		}
		return warn(c, err.Error()+"; "+needText, fix)
	}
	gpus, err := parseFreeMemory(out)
	if err != nil {
		return warn(c, err.Error()+"; "+needText, "")
	}
	var short, unread, free []string
	for _, g := range gpus {
		if !g.ok {
			unread = append(unread, fmt.Sprintf("GPU %s: %s", g.index, g.raw))
			continue
		}
		have := g.mib << 20
		desc := fmt.Sprintf("GPU %s %s", g.index, compat.FormatSize(have))
		free = append(free, desc)
		if have < need {
			short = append(short, desc)
		}
	}
	read := fmt.Sprintf("%s: %s free; %s", strings.Join(freeMemoryQuery, " "), strings.Join(free, ", "), needText)
	switch {
	case len(short) > 0:
		return fail(c, read, "free memory on "+strings.Join(short, ", ")+" (nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory "+
			"--format=csv names the processes that hold it), or make the buffer (runtime.buffer-bytes) and NVSHMEM_SYMMETRIC_SIZE smaller")
	case len(unread) > 0:
		return warn(c, read+"; not a number: "+strings.Join(unread, ", "), "")
	}
	return pass(c, read)
}

// gpuHeader starts a GPU's part of nvidia-smi -q: "GPU 00000000:18:00.0".
var gpuHeader = regexp.MustCompile(`^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$`)

// fabricPart is what a line of nvidia-smi -q is to the fabric fact.
type fabricPart int

const (
	fabricOther   fabricPart = iota
	fabricGPU                // a GPU's header
	fabricHeading            // "Fabric", opening the section
	fabricInside             // a line of a Fabric section (blank ones too)
)

// walkFabric calls f on each line of nvidia-smi -q with what it is: a Fabric section
// runs from its heading to the first non-blank line indented no deeper than it.
func walkFabric(b []byte, f func(line, trimmed string, part fabricPart)) {
	in, depth := false, 0
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case gpuHeader.MatchString(line):
			in = false
			f(line, trimmed, fabricGPU)
		case trimmed == "Fabric":
			in, depth = true, indent
			f(line, trimmed, fabricHeading)
		case in && trimmed != "" && indent <= depth:
			in = false
			f(line, trimmed, fabricOther)
		case in:
			f(line, trimmed, fabricInside)
		default:
			f(line, trimmed, fabricOther)
		}
	}
}

// fabricSections reads each GPU's Fabric section of nvidia-smi -q (its direct "Key : Value"
// lines: State, Status, CliqueId, ClusterUUID), in the order the GPUs are listed; a GPU
// whose report has none gets an empty map.
func fabricSections(b []byte) []map[string]string {
	var out []map[string]string
	walkFabric(b, func(_, trimmed string, part fabricPart) {
		switch {
		case part == fabricGPU:
			out = append(out, map[string]string{})
		case part == fabricInside && len(out) > 0:
			if k, v, ok := strings.Cut(trimmed, ":"); ok && strings.TrimSpace(v) != "" {
				if _, seen := out[len(out)-1][strings.TrimSpace(k)]; !seen {
					out[len(out)-1][strings.TrimSpace(k)] = strings.TrimSpace(v)
				}
			}
		}
	})
	return out
}

// fabricLines keeps of nvidia-smi -q what the fabric fact reads: the GPU headers and
// their Fabric sections, so a capture holds no serial numbers.
func fabricLines(b []byte) []byte {
	var keep []string
	walkFabric(b, func(line, _ string, part fabricPart) {
		if part != fabricOther {
			keep = append(keep, line)
		}
	})
	return []byte(strings.Join(keep, "\n") + "\n")
}

var zeroUUID = regexp.MustCompile(`^[0-]+$`)

// fabric says whether the GPUs are in a multi-node NVLink domain: every GPU's fabric
// probe completed with success and names a cluster. H100 nodes without one may report
// Completed with an all-zero ClusterUUID, or N/A.
func (r *Node) fabric(ctx context.Context) string {
	out, err := r.sys.OutputKeeping(ctx, fabricLines, smiQuery...)
	if err != nil {
		return ""
	}
	gpus := fabricSections(out)
	if len(gpus) == 0 {
		return "no"
	}
	for _, g := range gpus {
		u := g["ClusterUUID"]
		if g["State"] != "Completed" || g["Status"] != "Success" || u == "" || u == "N/A" || zeroUUID.MatchString(u) {
			return "no"
		}
	}
	return "yes"
}
