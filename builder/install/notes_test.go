package install

import (
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/wheel"
)

// An install whose build packed NCCL as torch's own wheel says how to put it in place and
// how to undo it, with the wheel's path beside the artifact quoted for the shell; a DeepEP
// wheel of its own says nothing.
func TestWheelRouteNotes(t *testing.T) {
	m := &manifest.Manifest{Wheels: []manifest.WheelFile{
		{Component: "deepep", Info: wheel.Info{File: "deep_ep-2.1.0-cp312-cp312-linux_x86_64.whl"}},
		{Component: "nccl", Info: wheel.Info{File: "nvidia_nccl_cu13-2.30.7+epbuild.0123456789ab-py3-none-linux_x86_64.whl"},
			Replaces: &manifest.Replaced{Package: "nvidia-nccl-cu13", Version: "2.28.9"}},
	}}
	notes := wheelRouteNotes(m, "/out dir/deepep-v2-0123456789ab.tar.zst")
	if len(notes) != 1 {
		t.Fatalf("notes: %q", notes)
	}
	for _, want := range []string{"nccl is built to be the Python environment's nvidia-nccl-cu13",
		"pip install --no-deps --force-reinstall '/out dir/deepep-v2-0123456789ab.wheels/nvidia_nccl_cu13-2.30.7+epbuild.0123456789ab-py3-none-linux_x86_64.whl'",
		"undo: python3 -m pip install --no-deps --force-reinstall 'nvidia-nccl-cu13==2.28.9'"} {
		if !strings.Contains(notes[0], want) {
			t.Errorf("note %q lacks %q", notes[0], want)
		}
	}
}
