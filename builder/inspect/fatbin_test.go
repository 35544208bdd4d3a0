package inspect

import (
	"github.com/epbuild/epbuild/builder/check"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// newABI is the EI_ABIVERSION of CUDA 13 cubins; oldABI that of earlier
// pre-Blackwell cubins.
const (
	newABI = 8
	oldABI = 7
)

// syntheticFatbin mirrors what the probe on the H200 machine recorded
// (nvcc 13.0.88): a device-link container, an empty container, and a
// compile container; plus entries whose variant only the image tells.
func syntheticFatbin(t *testing.T, withLZ bool) []byte {
	t.Helper()
	containers := nvccLikeEntries()
	containers[2] = append(containers[2],
		// No variant bits: an older toolkit's image, read for evidence.
		fbEntry{sm: 80, noBits: true, variant: VariantArch, payload: cubinImage(oldABI, 0x00500550, "")},
		fbEntry{sm: 86, noBits: true, variant: VariantArch, payload: cubinImage(oldABI, 0x00560d56, "")},
		fbEntry{ptx: true, sm: 89, noBits: true, payload: ptxText("sm_89")},
		fbEntry{sm: 103, noBits: true, variant: VariantFamily, compress: "zstd", payload: cubinImage(newABI, 0x06006702, "-arch sm_103f -m 64")},
	)
	if withLZ {
		containers = append(containers, []fbEntry{
			// LZ-compressed, no bits: the variant cannot be known here.
			{sm: 120, compress: "lz", payload: []byte("opaque LZ bytes, not decoded")},
			// A cubin with the new ABI and no toolkit note: no evidence.
			{sm: 110, payload: cubinImage(newABI, 0x06006e02, "")},
		})
	}
	return buildFatbin(t, containers...)
}

// nvccLikeEntries are containers as nvcc 13.0 lays them out for a shared
// object: the device-link container, an empty one, the compile container.
func nvccLikeEntries() [][]fbEntry {
	link := []fbEntry{
		{sm: 90, variant: VariantBase, payload: cubinImage(newABI, 0x05005a04, "-arch sm_90 -m 64")},
		{sm: 90, variant: VariantArch, payload: cubinImage(newABI, 0x05005a04, "-arch sm_90a -m 64")},
		// No toolkit note: only the entry flags tell its variant.
		{sm: 100, variant: VariantArch, payload: cubinImage(newABI, 0x05006402, "")},
		{sm: 100, variant: VariantFamily, payload: cubinImage(newABI, 0x05006402, "-arch sm_100f -m 64")},
	}
	compile := []fbEntry{
		{ptx: true, sm: 90, variant: VariantBase, compress: "zstd", payload: ptxText("sm_90")},
		{sm: 90, variant: VariantArch, compress: "zstd", payload: cubinImage(newABI, 0x06005a04, "-arch sm_90a -m 64")},
		{ptx: true, sm: 100, variant: VariantFamily, compress: "zstd", payload: ptxText("sm_100f")},
	}
	return [][]fbEntry{link, {}, compile}
}

func TestCUDAArchsSharedObject(t *testing.T) {
	dir := t.TempDir()
	so := sharedObjectWith(t, dir, "libsynth", SectionFatbin, syntheticFatbin(t, true))

	info, err := CUDAArchs(so)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range info.Entries {
		got = append(got, e.Arch)
	}
	want := []string{
		"sm_90", "sm_90a", "sm_100a", "sm_100f",
		"compute_90", "sm_90a", "compute_100f", "sm_80", "sm_86a", "compute_89", "sm_103f",
		"sm_120?", "sm_110?",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("archs in file order:\n got %v\nwant %v", got, want)
	}

	from := map[string]string{}
	for _, e := range info.Entries {
		from[e.Arch] = e.VariantFrom
		if e.Section != SectionFatbin {
			t.Errorf("%s: section %q", e.Arch, e.Section)
		}
	}
	for arch, src := range map[string]string{
		"sm_90":        "cubin .note.nv.tkinfo",
		"sm_100a":      "entry flags",
		"sm_100f":      "entry flags",
		"compute_90":   "PTX .target",
		"sm_80":        "cubin e_flags",
		"sm_86a":       "cubin e_flags",
		"compute_89":   "PTX .target",
		"sm_103f":      "cubin .note.nv.tkinfo",
		"compute_100f": "entry flags",
	} {
		if from[arch] != src {
			t.Errorf("%s: variant from %q, want %q", arch, from[arch], src)
		}
	}

	byArch := map[string]CodeEntry{}
	for _, e := range info.Entries {
		byArch[e.Arch] = e
	}
	if e := byArch["compute_90"]; !e.Compressed || e.Compression != "zstd" || e.Kind != KindPTX || e.CodeVersion != "9.0" {
		t.Errorf("compute_90 entry: %+v", e)
	}
	if e := byArch["sm_100a"]; e.Compressed || e.Kind != KindCubin || e.CodeVersion != "1.8" || e.SM != 100 {
		t.Errorf("sm_100a entry: %+v", e)
	}
	if e := byArch["sm_120?"]; e.Variant != VariantUnknown || e.Compression != "nvidia-lz" || !strings.Contains(e.Note, "LZ") {
		t.Errorf("sm_120? entry: %+v", e)
	}
	if e := byArch["sm_110?"]; !strings.Contains(e.Note, "tkinfo") {
		t.Errorf("sm_110? entry note: %q", e.Note)
	}

	for arch, has := range map[string]bool{
		"sm_90a": true, "sm_90": true, "sm_100a": true, "sm_100f": true, "compute_90": true,
		"sm_100": false, "compute_90a": false, "sm_120": false, "sm_110": false,
	} {
		if info.Has(arch) != has {
			t.Errorf("Has(%q) = %v, want %v", arch, !has, has)
		}
	}
}

func TestCUDAArchsObjectAndArchive(t *testing.T) {
	gcc := needTool(t, "gcc")
	ar := needTool(t, "ar")
	dir := t.TempDir()
	fb := buildFatbin(t, []fbEntry{
		{sm: 90, variant: VariantArch, compress: "zstd", payload: cubinImage(newABI, 0x06005a04, "-arch sm_90a -m 64")},
		{sm: 100, variant: VariantFamily, compress: "zstd", payload: cubinImage(newABI, 0x06006402, "-arch sm_100f -m 64")},
	})
	writeFile(t, filepath.Join(dir, "rel.bin"), fb)
	// A member name over 15 characters goes through GNU ar's long-name table.
	member := "deep_ep_internode_kernels.o"
	writeFile(t, filepath.Join(dir, "rel.S"), []byte(asmIncbin(SectionRelFatbin, filepath.Join(dir, "rel.bin"))))
	writeFile(t, filepath.Join(dir, "host.c"), []byte("int host(void) { return 0; }\n"))
	run(t, dir, gcc, "-c", "-o", member, "rel.S")
	run(t, dir, gcc, "-c", "-o", "host.o", "host.c")
	run(t, dir, ar, "rcs", "libdev.a", "host.o", member)

	obj, err := CUDAArchs(filepath.Join(dir, member))
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.Archs(); !slices.Equal(got, []string{"sm_100f", "sm_90a"}) {
		t.Errorf("object archs %v", got)
	}
	if obj.Entries[0].Section != SectionRelFatbin {
		t.Errorf("section %q, want %s", obj.Entries[0].Section, SectionRelFatbin)
	}

	lib, err := CUDAArchs(filepath.Join(dir, "libdev.a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(lib.Entries) != 2 {
		t.Fatalf("archive: %d entries, want 2: %+v", len(lib.Entries), lib.Entries)
	}
	for _, e := range lib.Entries {
		if e.Member != member {
			t.Errorf("%s: member %q, want %q", e.Arch, e.Member, member)
		}
	}
}

func TestCUDAArchsLinkedIgnoresRelFatbin(t *testing.T) {
	// A shared object linked from -rdc objects keeps their __nv_relfatbin
	// beside the device-linked .nv_fatbin; only the latter is loaded.
	so := sharedObjectWithSections(t, t.TempDir(), "librdc", map[string][]byte{
		SectionFatbin: buildFatbin(t, []fbEntry{{sm: 90, variant: VariantArch, payload: cubinImage(newABI, 0x05005a04, "")}}),
		SectionRelFatbin: buildFatbin(t, []fbEntry{
			{sm: 80, payload: cubinImage(newABI, 0x06005004, "-arch sm_80")},
			{ptx: true, sm: 120, payload: ptxText("sm_120")},
		}),
	})
	info, err := CUDAArchs(so)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Archs(); !slices.Equal(got, []string{"sm_90a"}) {
		t.Errorf("archs %v, want only the device-linked sm_90a", got)
	}
}

func TestCUDAArchsNoDeviceCode(t *testing.T) {
	gcc := needTool(t, "gcc")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "plain.c"), []byte("int plain(void) { return 0; }\n"))
	run(t, dir, gcc, "-shared", "-fPIC", "-o", "libplain.so", "plain.c")
	info, err := CUDAArchs(filepath.Join(dir, "libplain.so"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Entries) != 0 {
		t.Fatalf("entries in a plain library: %+v", info.Entries)
	}
	r := info.Check([]string{"sm_90"}, false)
	if r.Status != check.Fail || !strings.Contains(r.Why, SectionFatbin) {
		t.Errorf("check on a library without device code: %+v", r)
	}
}

func TestCUDAArchsCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := buildFatbin(t, []fbEntry{{sm: 90, payload: cubinImage(newABI, 0x05005a04, "-arch sm_90")}})
	for name, data := range map[string][]byte{
		"badmagic":  append([]byte{1, 2, 3, 4, 5, 6, 7, 8}, good...),
		"overrun":   good[:len(good)-8],
		"truncated": append(append([]byte{}, good...), 0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0),
	} {
		so := sharedObjectWith(t, dir, name, SectionFatbin, data)
		if _, err := CUDAArchs(so); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), so) || !strings.Contains(err.Error(), SectionFatbin) {
			t.Errorf("%s: error lacks file or section: %v", name, err)
		}
	}
	if _, err := CUDAArchs(filepath.Join(dir, "missing.so")); err == nil {
		t.Error("missing file: no error")
	}
}
