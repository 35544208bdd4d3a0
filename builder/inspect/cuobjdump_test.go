package inspect

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cudaTool finds a CUDA toolkit program on PATH or under $CUDA_HOME/bin.
func cudaTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if home := os.Getenv(env); home != "" {
			p := filepath.Join(home, "bin", name)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// dumpEntry is one entry as cuobjdump prints it.
type dumpEntry struct {
	arch       string // cuobjdump's name: "sm_90a" for cubins and PTX alike
	ptx        bool
	compressed bool
}

func (d dumpEntry) String() string {
	return fmt.Sprintf("%s/ptx=%v/compressed=%v", d.arch, d.ptx, d.compressed)
}

// cuobjdumpEntries parses `cuobjdump FILE`: blocks headed "Fatbin elf code:"
// or "Fatbin ptx code:", each with "arch = sm_90a" and, when compressed, a
// "compressed" line.
func cuobjdumpEntries(t *testing.T, tool, file string) []dumpEntry {
	t.Helper()
	// It exits non-zero on a file without device code, after saying so.
	out, err := exec.Command(tool, file).CombinedOutput()
	if err != nil {
		t.Logf("cuobjdump %s: %v: %s", file, err, strings.TrimSpace(string(out)))
	}
	var got []dumpEntry
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Fatbin elf code:" || line == "Fatbin ptx code:":
			got = append(got, dumpEntry{ptx: strings.Contains(line, "ptx")})
		case len(got) > 0 && strings.HasPrefix(line, "arch = "):
			got[len(got)-1].arch = strings.TrimPrefix(line, "arch = ")
		case len(got) > 0 && line == "compressed":
			got[len(got)-1].compressed = true
		}
	}
	return got
}

var listRE = regexp.MustCompile(`^(ELF|PTX) file\s+\d+: .*\.(sm_[0-9]+[af]?)\.(cubin|ptx)$`)

// cuobjdumpList parses `cuobjdump --list-elf --list-ptx FILE`.
func cuobjdumpList(t *testing.T, tool, file string) (cubins, ptx []string) {
	t.Helper()
	// It exits non-zero when a file has no PTX or no ELF; the listing is
	// still complete.
	out, _ := exec.Command(tool, "--list-elf", "--list-ptx", file).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		m := listRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		if m[1] == "ELF" {
			cubins = append(cubins, m[2])
		} else {
			ptx = append(ptx, m[2])
		}
	}
	return cubins, ptx
}

// crossCheck compares CUDAArchs with cuobjdump on one file. cuobjdump names
// PTX "sm_90" where this package says "compute_90". Its full dump names
// entries from the fat binary entry header, as this package does; its
// --list-elf names cubins from the cubin image instead (it lists an sm_100f
// cubin as sm_100, and needs sections a synthetic image lacks), so that
// listing is compared, without the "f", only when list is set.
func crossCheck(t *testing.T, tool, file string, list bool) {
	t.Helper()
	info, err := CUDAArchs(file)
	if err != nil {
		t.Fatalf("CUDAArchs(%s): %v", file, err)
	}
	var mine []dumpEntry
	var mineCubins, minePTX []string
	unknown := 0
	for _, e := range info.Entries {
		arch := "sm_" + strings.TrimPrefix(strings.TrimPrefix(e.Arch, "sm_"), "compute_")
		if e.Variant == VariantUnknown {
			unknown++
		}
		mine = append(mine, dumpEntry{arch: arch, ptx: e.Kind == KindPTX, compressed: e.Compressed})
		if e.Kind == KindPTX {
			minePTX = append(minePTX, arch)
		} else {
			mineCubins = append(mineCubins, strings.TrimSuffix(arch, "f"))
		}
	}
	theirs := cuobjdumpEntries(t, tool, file)
	if len(theirs) == 0 && len(mine) == 0 {
		t.Logf("%s: no device code", file)
		return
	}
	key := func(d []dumpEntry) []string {
		var s []string
		for _, e := range d {
			s = append(s, e.String())
		}
		slices.Sort(s)
		return s
	}
	if unknown == 0 {
		if !slices.Equal(key(mine), key(theirs)) {
			t.Errorf("%s: entries differ from cuobjdump's\n mine %v\ntheirs %v", file, key(mine), key(theirs))
		}
	} else {
		// Entries of unknown variant ("sm_90?") are compared by number only.
		strip := func(d []dumpEntry) []string {
			var s []string
			for _, e := range d {
				e.arch = strings.TrimRight(e.arch, "af?")
				s = append(s, e.String())
			}
			slices.Sort(s)
			return s
		}
		if !slices.Equal(strip(mine), strip(theirs)) {
			t.Errorf("%s: entries differ from cuobjdump's\n mine %v\ntheirs %v", file, key(mine), key(theirs))
		}
		t.Logf("%s: %d of %d entries of unknown variant", file, unknown, len(mine))
	}
	if !list {
		t.Logf("%s: %d entries agree with cuobjdump: %v", file, len(mine), info.Archs())
		return
	}
	cubins, ptx := cuobjdumpList(t, tool, file)
	slices.Sort(cubins)
	slices.Sort(ptx)
	slices.Sort(mineCubins)
	slices.Sort(minePTX)
	if unknown == 0 && (!slices.Equal(cubins, mineCubins) || !slices.Equal(ptx, minePTX)) {
		t.Errorf("%s: --list-elf/--list-ptx differ\n mine %v %v\ntheirs %v %v", file, mineCubins, minePTX, cubins, ptx)
	}
	t.Logf("%s: %d entries agree with cuobjdump: %v", file, len(mine), info.Archs())
}

// TestCuobjdumpCrossCheck runs where a CUDA toolkit is installed (the GPU
// validation machine). It checks the synthetic fat binaries of the other
// tests (so their layout is the one NVIDIA's tool reads), objects nvcc
// builds for the variants DeepEP cares about, and any real files listed in
// EPBUILD_TEST_CUDA_FILES (separated like PATH).
func TestCuobjdumpCrossCheck(t *testing.T) {
	tool := cudaTool("cuobjdump")
	if tool == "" {
		t.Skip("cuobjdump not found on PATH or under $CUDA_HOME/bin: no CUDA toolkit to cross-check against")
	}
	dir := t.TempDir()

	t.Run("synthetic", func(t *testing.T) {
		// Only entries as nvcc 13 writes them: variant bits wherever the
		// variant is not base. (cuobjdump ignores the image evidence that
		// CUDAArchs falls back on for entries without bits.)
		crossCheck(t, tool, sharedObjectWith(t, dir, "libsynth", SectionFatbin, buildFatbin(t, nvccLikeEntries()...)), false)
	})

	t.Run("nvcc", func(t *testing.T) {
		nvcc := cudaTool("nvcc")
		if nvcc == "" {
			t.Skip("nvcc not found: cannot build real fat binaries")
		}
		writeFile(t, filepath.Join(dir, "k.cu"), []byte("__global__ void kern(float *x) { x[threadIdx.x] += 1.0f; }\nextern \"C\" void launch(float *x) { kern<<<1, 32>>>(x); }\n"))
		gencode := func(pairs ...string) []string {
			var args []string
			for _, p := range pairs {
				arch, code, _ := strings.Cut(p, ":")
				args = append(args, "-gencode", "arch="+arch+",code="+code)
			}
			return args
		}
		builds := map[string][]string{
			"libbase.so":   gencode("compute_90:sm_90", "compute_100:sm_100", "compute_90:compute_90"),
			"libarch.so":   gencode("compute_90a:sm_90a", "compute_100a:sm_100a", "compute_90a:compute_90a"),
			"libfamily.so": gencode("compute_100f:sm_100f", "compute_103f:sm_103f", "compute_100f:compute_100f"),
			"libcompressed.so": append([]string{"-Xfatbin", "-compress-all"},
				gencode("compute_90:sm_90", "compute_90a:sm_90a", "compute_100f:sm_100f", "compute_90:compute_90")...),
		}
		for name, args := range builds {
			args = append([]string{"-shared", "-Xcompiler", "-fPIC", "-o", name, "k.cu"}, args...)
			run(t, dir, nvcc, args...)
			crossCheck(t, tool, filepath.Join(dir, name), true)
		}
		// A relocatable object (-rdc) keeps its code in __nv_relfatbin; an
		// archive of it is how NVSHMEM ships libnvshmem_device.a.
		run(t, dir, nvcc, append([]string{"-rdc=true", "-Xcompiler", "-fPIC", "-c", "-o", "rdc_kernels.o", "k.cu"},
			gencode("compute_90a:sm_90a", "compute_100f:sm_100f")...)...)
		run(t, dir, needTool(t, "ar"), "rcs", "librdc.a", "rdc_kernels.o")
		crossCheck(t, tool, filepath.Join(dir, "rdc_kernels.o"), true)
		crossCheck(t, tool, filepath.Join(dir, "librdc.a"), true)
		info, err := CUDAArchs(filepath.Join(dir, "libfamily.so"))
		if err != nil {
			t.Fatal(err)
		}
		if !info.Has("sm_100f") || info.Has("sm_100") || !info.Has("compute_100f") {
			t.Errorf("libfamily.so archs %v", info.Archs())
		}
	})

	t.Run("files", func(t *testing.T) {
		list := os.Getenv("EPBUILD_TEST_CUDA_FILES")
		if list == "" {
			t.Skip("EPBUILD_TEST_CUDA_FILES is unset: no real libraries named to cross-check")
		}
		for _, f := range filepath.SplitList(list) {
			crossCheck(t, tool, f, true)
		}
	})
}
