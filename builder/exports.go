package builder

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/wheel"
)

// What the package stage writes beside the artifact, each an exporter of what the build
// recorded: the wheels of the Python packages a recipe asks wheels of, and the SBOM.

// WheelFile is a wheel the package stage made of a component's python/ tree.
type WheelFile struct {
	Component string `json:"component"`
	wheel.Info
}

// wheelsName is the package stage's record of its wheels (a cached package stage
// publishes them from it).
const wheelsName = "wheels.json"

// WheelDir is the directory beside the artifact that holds its wheels:
// <recipe>-<plan>.wheels (recipes of one DeepEP version would clash in one directory).
func WheelDir(p *Plan) string { return strings.TrimSuffix(ArtifactName(p), ".tar.zst") + ".wheels" }

// wantsWheel reports whether a component asks for a wheel (python-extension wheel: true).
func wantsWheel(c *PlanComponent) bool {
	for _, s := range c.Build {
		if s.PythonExtension != nil && s.PythonExtension.Wheel {
			return true
		}
	}
	return false
}

// packWheels packs the python/ tree of each component that asks for a wheel into
// dir/wheels, stamped with sde, and records them in dir/wheels.json.
func packWheels(p *Plan, res *Result, dir string, sde int64) ([]WheelFile, error) {
	var out []WheelFile
	for _, c := range res.Components {
		pc, ok := p.Component(c.Name)
		if !ok || !wantsWheel(pc) {
			continue
		}
		wd := filepath.Join(dir, "wheels")
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
		}
		info, err := wheel.Pack(filepath.Join(c.Prefix, "python"), wd, time.Unix(sde, 0))
		if err != nil {
			return nil, fmt.Errorf("package %s: the wheel of %s: %w", p.Recipe, c.Name, err)
		}
		out = append(out, WheelFile{Component: c.Name, Info: info})
	}
	if err := WriteJSON(dir, wheelsName, out); err != nil {
		return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	return out, nil
}

// publishWheels copies the stored wheels (dir/wheels) into outDir/<WheelDir>, each
// through a temporary file and checked against its recorded sha256, and returns their
// paths. A directory left from an earlier build of the same plan is brought up to date.
func publishWheels(p *Plan, dir, outDir string) ([]string, error) {
	var ws []WheelFile
	err := ReadJSON(dir, wheelsName, &ws)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	dst := filepath.Join(outDir, WheelDir(p))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, publishErr(err, dir, dst)
	}
	var paths []string
	for _, w := range ws {
		src, to := filepath.Join(dir, "wheels", w.File), filepath.Join(dst, w.File)
		paths = append(paths, to)
		if got, err := fileSHA256(to); err == nil && got == w.SHA256 {
			continue
		}
		tmp := to + ".tmp-" + strconv.Itoa(os.Getpid())
		got, err := copyHashed(src, tmp)
		if err == nil && got != w.SHA256 {
			err = fmt.Errorf("the stored wheel %s has sha256 %s, its record says %s: the cache is damaged; rebuild it with --force=package", src, got, w.SHA256)
		}
		if err == nil {
			err = os.Rename(tmp, to)
		}
		if err != nil {
			os.Remove(tmp)
			return nil, publishErr(err, src, to)
		}
	}
	return paths, nil
}
