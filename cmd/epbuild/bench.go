package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/netbench"
)

func newBenchCmd(app *App) *cobra.Command {
	var (
		prefix, plugin, mem, size, chunk string
		window, limit, iters, gpu        int
		timeout                          int
		loopback, asJSON                 bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--prefix DIR] [--plugin PATH | --loopback] [--mem host|device]",
		Short: "Move data between two ranks on this host through an NCCL net plugin; print bandwidth and chunk latency",
		Long: `Run the transfer benchmark an install carries (the netbench component of a recipe
such as gcp-a3-tcpx) between two ranks on this host: rank 1 receives, rank 0 sends, each
loading the net plugin through its ncclNet_v7 interface. The message moves in chunks
(default 512K) with a sliding window that never holds more requests than the plugin
allows (--request-limit, default 16: GPUDirect-TCPX's limit per comm); a receiver using
an UNPACK plugin gives a request back only after the kernel that unpacked it finished.
Each rank reports bandwidth, chunk latency (post to release), the most requests it held,
and whether the data arrived intact.

The plugin is --plugin, else $NCCL_NET_PLUGIN (env.sh sets it); --loopback uses the
install's loopback test plugin (TCP on 127.0.0.1). Across two hosts run
<prefix>/netbench/bin/netbench on each (see its --help).

Exit codes: 0 done; 1 the transfer failed (a plugin error, wrong data, no progress);
2 bad arguments (a window past the request limit); 3 the install has no benchmark, or
the plugin or CUDA cannot be loaded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prefix == "" {
				prefix = app.Getenv("EPBUILD_PREFIX")
			}
			if prefix == "" {
				return usageError{errors.New("bench: give --prefix DIR (or source the install's env.sh, which sets EPBUILD_PREFIX)")}
			}
			bench, lb, err := netbench.Locate(prefix)
			if err != nil {
				return &exitError{code: exitEnv, msg: err.Error()}
			}
			switch {
			case loopback && plugin != "":
				return usageError{errors.New("bench: --loopback and --plugin name two plugins; give one")}
			case loopback:
				plugin = lb
			case plugin == "":
				plugin = app.Getenv("NCCL_NET_PLUGIN")
			}
			if plugin == "" {
				return usageError{errors.New("bench: no plugin: give --plugin PATH, --loopback, or set NCCL_NET_PLUGIN")}
			}
			if mem != "host" && mem != "device" {
				return usageError{fmt.Errorf("bench: --mem %q: use host or device", mem)}
			}
			app.Log.Info("running two ranks", "bench", bench, "plugin", plugin, "mem", mem)
			res, err := netbench.Run(cmd.Context(), netbench.Options{
				Bench: bench, Plugin: plugin, Env: os.Environ(), Mem: mem, Size: size, Chunk: chunk,
				Window: window, RequestLimit: limit, Iters: iters, GPU: gpu, Timeout: timeout,
			})
			if err != nil && res == nil {
				return err
			}
			if asJSON {
				var fail error
				if err != nil {
					fail = &exitError{code: exitFailed, msg: err.Error()}
				}
				if werr := app.printJSON(fail, res); werr != nil {
					return werr
				}
			} else {
				writeBench(app, res)
			}
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "the install (default $EPBUILD_PREFIX)")
	f.StringVar(&plugin, "plugin", "", "the net plugin: a path, or a name NCCL resolves (default $NCCL_NET_PLUGIN)")
	f.BoolVar(&loopback, "loopback", false, "use the install's loopback test plugin")
	f.StringVar(&mem, "mem", "host", "where the message lives: host or device (CUDA)")
	_ = cmd.RegisterFlagCompletionFunc("mem", oneOf("host", "device"))
	f.StringVar(&size, "size", "256M", "message size per iteration (K, M, G suffixes)")
	f.StringVar(&chunk, "chunk", "512K", "bytes per request")
	f.IntVar(&window, "window", 0, "requests held at once per comm (default: the request limit)")
	f.IntVar(&limit, "request-limit", 16, "the plugin's requests per comm")
	f.IntVar(&iters, "iters", 3, "iterations")
	f.IntVar(&gpu, "gpu", 0, "CUDA device for --mem device")
	f.IntVar(&timeout, "timeout", 60, "seconds without progress before a rank gives up")
	f.BoolVar(&asJSON, "json", false, "print both ranks' reports as JSON")
	return cmd
}

func writeBench(app *App, res *netbench.Result) {
	r, s := res.Recv, res.Send
	tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "plugin\t%s (%s)\n", r.PluginPath, r.Plugin)
	fmt.Fprintf(tw, "message\t%d bytes x %d in %d chunks of %d bytes\n", r.Bytes, r.Iters, r.Chunks, r.Chunk)
	fmt.Fprintf(tw, "window\t%d of %d requests (most held: recv %d, send %d)\n", r.Window, r.RequestLimit, r.MaxHeld, s.MaxHeld)
	for _, k := range []netbench.Rank{r, s} {
		fmt.Fprintf(tw, "%s\t%-13s %8.3f GB/s  chunk latency us  p50 %.1f  p99 %.1f  max %.1f\n",
			k.Role, k.Mode, k.GBps, k.LatencyUS.P50, k.LatencyUS.P99, k.LatencyUS.Max)
	}
	data := "verified"
	if !r.Verified {
		data = "WRONG"
	}
	fmt.Fprintf(tw, "data\t%s\n", data)
	_ = tw.Flush()
}
