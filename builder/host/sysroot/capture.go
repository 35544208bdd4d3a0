package sysroot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// maxCaptureFile bounds one extracted file: sysfs and procfs files are at most a page or so.
const maxCaptureFile = 1 << 20

// WriteCapture writes exactly the files, directories and symlinks s has recorded to w as a
// tar.zst (names relative to the root: "sys/class/infiniband/mlx5_0"). Symlinks stay
// symlinks: the GPU↔NIC pairing reads the PCIe tree through them. Device nodes
// (/dev/gdrdrv) become empty regular files, since recreating them needs privilege. The
// same record gives the same bytes.
func (s Root) WriteCapture(w io.Writer) error {
	return writeCapture(s.record(), w)
}

func writeCapture(entries map[string]entry, w io.Writer) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return fmt.Errorf("capture host state: start zstd: %w", err)
	}
	tw := tar.NewWriter(zw)
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		e := entries[p]
		// A fixed mtime and no owner: the same host state gives the same bytes.
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch e.kind {
		case kindDir:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case kindLink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.target, 0o777
		case kindFile:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o444, int64(len(e.data))
		case kindNode:
			h.Typeflag, h.Mode = tar.TypeReg, 0o444
		case kindExec:
			h.Typeflag, h.Mode = tar.TypeReg, 0o555
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("capture host state: %s: %w", p, err)
		}
		if e.kind == kindFile {
			if _, err := tw.Write(e.data); err != nil {
				return fmt.Errorf("capture host state: %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("capture host state: finish tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("capture host state: finish zstd: %w", err)
	}
	return nil
}

// Extract unpacks a capture written by WriteCapture into dir (which must exist),
// refusing names and symlink targets that would leave it; files are written 0644 so a
// test can rewrite counters.
func Extract(r io.Reader, dir string) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("extract capture into %s: %w", dir, err)
	}
	defer zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract capture: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extract capture into %s: %w", dir, err)
		}
		if err := extractEntry(root, tr, h); err != nil {
			return fmt.Errorf("extract capture into %s: %s: %w", dir, h.Name, err)
		}
	}
}

func extractEntry(root *os.Root, tr *tar.Reader, h *tar.Header) error {
	name := path.Clean(h.Name)
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return errors.New("name leaves the capture")
	}
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg:
		if h.Size > maxCaptureFile {
			return fmt.Errorf("%d bytes: larger than any sysfs or procfs file", h.Size)
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxCaptureFile))
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			mode = 0o755 // an executable the checks look for (nvcc)
		}
		return root.WriteFile(name, data, mode)
	case tar.TypeSymlink:
		// os.Root refuses to follow a link out of the root, but does not vet the link text
		// it creates: reject absolute and escaping targets here.
		t := h.Linkname
		joined := path.Join(path.Dir(name), t)
		if path.IsAbs(t) || joined == ".." || strings.HasPrefix(joined, "../") {
			return fmt.Errorf("symlink to %q leaves the capture", t)
		}
		return root.Symlink(t, name)
	}
	return fmt.Errorf("entry type %q is not part of a capture", h.Typeflag)
}
