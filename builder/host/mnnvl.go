package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/quote"
)

// What a node of a GB200/GB300 NVL72 rack must have for a job that shares GPU memory
// across the nodes of its NVLink domain (the recipe's runtime.mnnvl), read from files so
// that a capture holds it:
//   - an IMEX channel, /dev/nvidia-caps-imex-channels/channel<N>: a character device whose
//     major the driver registers in /proc/devices as nvidia-caps-imex-channels; the
//     administrator creates it with mknod and it does not survive a reboot; without one
//     the CUDA calls for fabric handles fail with an insufficient-permission error (NVIDIA
//     IMEX guide, "IMEX Channels", docs.nvidia.com/multi-node-nvlink-systems/imex-guide/
//     imexchannels.html);
//   - GPUs registered with the NVLink fabric: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
//     is a CUDA query, not a file; what files say is each GPU's fabric probe, which
//     nvidia-smi -q prints in its Fabric section (NVML's nvmlGpuFabricInfo_t: State, Status
//     "checked only if state returns complete", CliqueId, ClusterUUID). A GPU whose probe
//     did not complete with success, or names no cluster, cannot share memory with the
//     other nodes of the domain.

// procDevices lists the character and block devices' majors: "%3d %s" per driver
// (fs/proc/devices.c).
const procDevices = "/proc/devices"

// imexChannels are the channel<N> entries of imexDir, and the fact's state: present,
// absent, or "" when the directory cannot be read.
func (r *Node) imexChannels() ([]string, string) {
	names, err := r.sys.Names(imexDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "absent"
	case err != nil:
		return nil, ""
	}
	var out []string
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, "channel"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			if _, err := r.sys.Stat(imexDir + "/" + n); err == nil {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, "absent"
	}
	slices.SortFunc(out, func(a, b string) int {
		if natLess(a, b) {
			return -1
		}
		return 1
	})
	return out, "present"
}

// imexMajor is the major number the driver registered for IMEX channels ("" when the
// driver registered none, or /proc/devices cannot be read).
func (r *Node) imexMajor() string {
	b, err := r.sys.ReadFile(procDevices)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "nvidia-caps-imex-channels" {
			if _, err := strconv.Atoi(f[0]); err == nil {
				return f[0]
			}
		}
	}
	return ""
}

// checkIMEXChannel: a job of a recipe with runtime.mnnvl needs an IMEX channel on the node.
func (r *Node) checkIMEXChannel() check.Result {
	c := check.Result{ID: "host.mnnvl.imex", Why: "GPU memory shared across the nodes of an NVLink domain (fabric handles) needs an IMEX channel " +
		"in the job: without one the CUDA calls that create or import fabric handles fail with an insufficient-permission error, " +
		"or the component falls back to handles within the node (Hybrid-EP: CUDA IPC) and the job's NVLink domain is one node"}
	if !r.cfg.MNNVL {
		return skip(c, "the recipe does not share GPU memory across nodes (no runtime.mnnvl)")
	}
	names, state := r.imexChannels()
	switch state {
	case "present":
		return pass(c, imexDir+": "+strings.Join(names, ", "))
	case "":
		return warn(c, imexDir+": cannot be read", "make "+imexDir+" readable to the job, then check again")
	}
	major := r.imexMajor()
	mknod := "mknod " + imexDir + "/channel0 c " + major + " 0"
	read := imexDir + ": no channel<N>"
	if major == "" {
		mknod = "mknod " + imexDir + "/channel0 c <major of nvidia-caps-imex-channels in " + procDevices + "> 0"
		read += "; " + procDevices + " names no nvidia-caps-imex-channels (a driver without IMEX channels, or not read)"
	} else {
		read += "; " + procDevices + ": nvidia-caps-imex-channels is major " + major
	}
	return fail(c, read, "run the nvidia-imex service on every node of the NVLink domain and create the default channel: mkdir -p "+imexDir+"; "+
		mknod+" (after every reboot); in a container, start it with NVIDIA_IMEX_CHANNELS=0; under Slurm or Kubernetes, ask for the channel "+
		"through their IMEX support")
}

// checkMNNVLFabric: a job of a recipe with runtime.mnnvl needs every GPU of the node
// registered with the NVLink fabric, all in one cluster.
func (r *Node) checkMNNVLFabric(ctx context.Context) check.Result {
	c := check.Result{ID: "host.mnnvl.fabric", Why: "fabric handles across nodes need each GPU registered with the rack's NVLink fabric " +
		"(Hybrid-EP takes them only when every GPU has CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED and a test allocation succeeds, " +
		"else CUDA IPC handles within the node); read from nvidia-smi -q's Fabric section, the registration the CUDA attribute rests on"}
	if !r.cfg.MNNVL {
		return skip(c, "the recipe does not share GPU memory across nodes (no runtime.mnnvl)")
	}
	out, err := r.sys.OutputKeeping(ctx, fabricLines, smiQuery...)
	if err != nil {
		return warn(c, "nvidia-smi -q: "+err.Error(), "run on the node with nvidia-smi on PATH, or pass --sysroot with a capture that holds it")
	}
	gpus := fabricSections(out)
	if len(gpus) == 0 {
		return fail(c, "nvidia-smi -q lists no GPU", "run on a GPU node of the NVL72 rack")
	}
	var bad, clusters []string
	for i, g := range gpus {
		state, status, u := g["State"], g["Status"], g["ClusterUUID"]
		if state != "Completed" || status != "Success" || u == "" || u == "N/A" || zeroUUID.MatchString(u) {
			bad = append(bad, fmt.Sprintf("GPU %d: State %s, Status %s, ClusterUUID %s", i, quote.Term(orUnset(state)), quote.Term(orUnset(status)), quote.Term(orUnset(u))))
			continue
		}
		if !slices.Contains(clusters, u) {
			clusters = append(clusters, u)
		}
	}
	switch {
	case len(bad) > 0:
		return fail(c, "nvidia-smi -q, Fabric: "+strings.Join(bad, "; "),
			"run on a node of a GB200/GB300 NVL72 rack whose GPUs have registered with the NVLink fabric (Fabric: State Completed, Status Success, "+
				"a ClusterUUID): check the rack's NVLink fabric management and the driver's log; on a node outside such a rack, the job cannot span nodes over NVLink")
	case len(clusters) > 1:
		return fail(c, "nvidia-smi -q, Fabric: the GPUs name "+strconv.Itoa(len(clusters))+" clusters: "+quote.Term(strings.Join(clusters, ", ")),
			"check the rack's NVLink fabric management: one node's GPUs belong to one NVLink domain")
	}
	return pass(c, fmt.Sprintf("%d GPUs registered with the NVLink fabric, cluster %s, clique %s", len(gpus), quote.Term(clusters[0]), quote.Term(orUnset(gpus[0]["CliqueId"]))))
}

func orUnset(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// checkGPUsPerNode compares the GPUs a job sees on this node with the recipe's
// runtime.gpus-per-node: the job starts that many ranks on each node, one per GPU.
func (r *Node) checkGPUsPerNode() check.Result {
	c := check.Result{ID: "host.gpus.per-node", Why: "the job starts runtime.gpus-per-node ranks on each node, one per GPU " +
		"(a GB200/GB300 node has 4); fewer GPUs cannot hold them, more are left idle"}
	want := int(r.cfg.GPUsPerNode)
	if want == 0 {
		return skip(c, "the recipe declares no runtime.gpus-per-node")
	}
	if r.gpuErr != nil {
		return skip(c, "no GPU list: "+r.gpuErr.Error())
	}
	n := len(r.gpus)
	read := fmt.Sprintf("%d GPUs in %s", n, pciDevicesDir)
	if v, ok := r.cfg.Env["CUDA_VISIBLE_DEVICES"]; ok {
		visible := 0
		for _, f := range strings.Split(v, ",") {
			if strings.TrimSpace(f) != "" {
				visible++
			}
		}
		if visible < n {
			n = visible
			read += fmt.Sprintf(", %d of them visible (CUDA_VISIBLE_DEVICES=%s)", n, quote.Term(v))
		}
	}
	read += fmt.Sprintf("; runtime.gpus-per-node %d", want)
	switch {
	case n < want:
		return fail(c, read, fmt.Sprintf("run on nodes with %d GPUs (make them all visible to the job), or build for this shape: --set runtime.gpus-per-node=%d", want, n))
	case n > want:
		return warn(c, read, fmt.Sprintf("the job uses %d of the %d GPUs: give it %d (CUDA_VISIBLE_DEVICES), or build for this node: --set runtime.gpus-per-node=%d", want, n, want, n))
	}
	return pass(c, read)
}
