package toolchain

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/inspect"
)

// NCCLRuntime is the NCCL a job runs, and where that was read ("" when nothing says).
type NCCLRuntime struct {
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
	// Path is the library torch's communicator binds to, relative to the Python path entry
	// (site-packages) that holds it, else absolute ("" when not read from the process).
	Path string `json:"path,omitempty"`
	// TorchHeader is torch.cuda.nccl.version(): the nccl.h torch was compiled with, a
	// constant of torch's build that says nothing of the library loaded.
	TorchHeader string `json:"torch_header,omitempty"`
}

// ProbeNCCL finds the NCCL a job would run, in this order: the library torch's
// communicator binds to in a process with env (inspect.NCCL: its file and
// ncclGetVersion); the nvidia-nccl-* wheel's metadata (the one whose libnccl is mapped,
// or the only one installed); the header version torch was compiled with (when torch
// imports but its library cannot be read); NCCL_HOME (its nccl.h, or a libnccl.so.X.Y.Z
// file name).
func ProbeNCCL(ctx context.Context, python string, env, jobEnv []string) NCCLRuntime {
	if python == "" {
		python = "python3"
	}
	p, err := inspect.NCCL(ctx, python, env)
	if err == nil {
		if b := p.Bound; b != nil {
			path := b.Site
			if path == "" {
				path = b.Path
			}
			return NCCLRuntime{Version: b.Version, Path: path, TorchHeader: p.TorchHeader,
				Source: fmt.Sprintf("ncclGetVersion %d of %s, which libtorch_cuda's NCCL calls bind to (%s)", b.Code, b.Path, b.How)}
		}
		names := slices.Sorted(maps.Keys(p.Packages))
		for _, n := range names {
			for _, f := range p.PackageFiles[n] {
				if slices.Contains(p.Mapped, f) {
					return NCCLRuntime{Version: p.Packages[n], TorchHeader: p.TorchHeader, Source: n + " (mapped " + f + ")"}
				}
			}
		}
		if len(names) == 1 {
			return NCCLRuntime{Version: p.Packages[names[0]], TorchHeader: p.TorchHeader, Source: names[0] + " package metadata"}
		}
		if p.TorchHeader != "" {
			return NCCLRuntime{Version: p.TorchHeader, TorchHeader: p.TorchHeader,
				Source: "torch.cuda.nccl.version(), the nccl.h torch was compiled with: the library it loaded cannot be read (" + p.BoundError + ")"}
		}
	}
	home := GetenvFrom(jobEnv, "NCCL_HOME")
	if home == "" {
		home = GetenvFrom(env, "NCCL_HOME")
	}
	if home != "" {
		if v := inspect.NCCLHeaderVersion(filepath.Join(home, "include", "nccl.h")); v != "" {
			return NCCLRuntime{Version: v, Source: filepath.Join(home, "include", "nccl.h")}
		}
		if m, _ := filepath.Glob(filepath.Join(GlobEscape(home), "lib", "libnccl.so.*.*.*")); len(m) > 0 {
			slices.Sort(m)
			return NCCLRuntime{Version: strings.TrimPrefix(filepath.Base(m[len(m)-1]), "libnccl.so."), Source: m[len(m)-1]}
		}
	}
	return NCCLRuntime{}
}

func GetenvFrom(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// globEscape makes s match itself in a filepath.Glob pattern (a prefix may hold [, * or ?).
func GlobEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}
