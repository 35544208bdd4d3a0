package verify

import (
	"context"
	"fmt"
	"github.com/epbuild/epbuild/builder/store"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
)

// The env script an install carries (env.sh): what it exports against the plan, the paths
// it names, and what it preloads. env.sh is read back by a parser that accepts exactly
// what EnvScript writes, so a hand-edited script shows.

// envScript checks env.sh: that it says what the plan says, that the paths it names
// exist, and that an LD_PRELOAD stays inside the install.
func (v *verifier) envScript(context.Context) []CheckResult {
	script := filepath.Join(v.prefix, manifest.EnvName)
	parse := VerifyCheck{ID: "env.script", Read: script,
		Why:      "jobs get the install through env.sh: a PYTHONPATH or LD_LIBRARY_PATH that points elsewhere loads another copy",
		Expected: "PREFIX/bin in front of PATH, PYTHONPATH, LD_LIBRARY_PATH and LD_PRELOAD into the prefix in front of the user's, exports of the rest of the recipe's runtime env"}
	paths := VerifyCheck{ID: "env.paths", Read: script, Why: "a path env.sh names that does not exist makes the loader or Python fall back to another copy, silently"}
	preload := VerifyCheck{ID: "env.ld-preload", Read: script,
		Why: "LD_PRELOAD forces the NVSHMEM the install was built with; one from elsewhere (torch bundles its own) means two NVSHMEMs in one process (R9, R10)"}
	where := VerifyCheck{ID: "env.prefix", Read: script,
		Why: "a POSIX shell (sh, dash: #!/bin/sh batch scripts) cannot tell where the file it sources is: env.sh takes the prefix epbuild install wrote into it"}
	skipRest := func(why string) []CheckResult {
		where.Status, where.Found = check.Skip, why
		paths.Status, paths.Found = check.Skip, why
		preload.Status, preload.Found = check.Skip, why
		return []CheckResult{parse, where, paths, preload}
	}
	b, err := os.ReadFile(script)
	if err != nil {
		parse.Status, parse.Found, parse.Fix = check.Fail, err.Error(), v.fix()
		return skipRest("env.sh cannot be read")
	}
	vars, order, baked, err := envsh.ParseEnvScript(string(b), v.prefix)
	if err != nil {
		parse.Status, parse.Found, parse.Fix = check.Fail, err.Error(), v.fix()
		return skipRest("env.sh cannot be parsed")
	}
	parse.Found = fmt.Sprintf("%d exports: %s", len(order), strings.Join(order, ", "))
	if diffs := v.envDiffs(vars); len(diffs) > 0 {
		parse.Status, parse.Fix = check.Fail, v.fix()
		parse.Found += "; differs from the plan: " + strings.Join(diffs, "; ")
	} else {
		parse.Status = check.Pass
	}

	var named, missing []string
	for _, k := range order {
		for _, p := range envsh.SplitPaths(k, vars[k]) {
			if !within(p, v.prefix) {
				continue
			}
			if _, err := os.Stat(p); err != nil && (k != "PATH" || p != filepath.Join(v.prefix, "bin")) {
				missing = append(missing, k+": "+p)
			} else if err == nil {
				// PREFIX/bin is made by epbuild install, not carried by the artifact
				named = append(named, k+" "+p)
			}
		}
	}
	switch {
	case len(missing) > 0:
		paths.Status, paths.Found, paths.Fix = check.Fail, "missing: "+strings.Join(missing, ", "), v.fix()
	case len(named) == 0:
		paths.Status, paths.Found = check.Skip, "env.sh names no path in the prefix"
	default:
		paths.Status, paths.Found = check.Pass, fmt.Sprintf("%d paths exist: %s", len(named), strings.Join(named, ", "))
	}
	return []CheckResult{parse, v.checkBaked(where, baked), paths, v.checkPreload(preload, vars["LD_PRELOAD"])}
}

// checkBaked compares the prefix install wrote into env.sh with where the install is
// (or, for install's staging tree, will be).
func (v *verifier) checkBaked(c VerifyCheck, b envsh.EnvBaked) VerifyCheck {
	here := v.prefix
	if v.opts.Final != "" {
		here = v.opts.Final
	}
	c.Expected = "env.sh names " + here
	switch {
	case b.At == "":
		c.Status, c.Found = check.Warn, "env.sh names no prefix (not written by epbuild install): bash, zsh and ksh93 find it, sh refuses it"
		c.Fix = "install the artifact with " + manifest.InstallCommand("", here)
	case filepath.Clean(b.At) != here:
		c.Status = check.Fail
		c.Found = fmt.Sprintf("env.sh names %s (install id %s): under sh it refuses, or loads the install there if that is still this one; bash, zsh and ksh93 use %s", b.At, b.ID, here)
		c.Fix = fmt.Sprintf("%s (an install moved or copied by hand, or kept as a previous install, is not where its env.sh says)", v.fix())
	default:
		c.Status, c.Found = check.Pass, fmt.Sprintf("env.sh names %s (install id %s): sh, bash, zsh and ksh93 load this install", b.At, b.ID)
	}
	return c
}

// envDiffs compares env.sh's exports with the runtime env the plan gives this prefix.
func (v *verifier) envDiffs(vars map[string]string) []string {
	if v.envErr != nil {
		return []string{v.envErr.Error()}
	}
	want, err := envsh.RuntimeEnv(v.m.Plan, v.prefixes, nil)
	if err != nil {
		return []string{err.Error()}
	}
	wm := map[string]string{}
	for _, kv := range want {
		k, val, _ := strings.Cut(kv, "=")
		wm[k] = val
	}
	// env.sh puts PREFIX/bin on PATH, and writes LD_PRELOAD's entries ':'-separated
	wm["PATH"] = filepath.Join(v.prefix, "bin")
	var out []string
	for _, k := range slices.Sorted(maps.Keys(wm)) {
		got, ok := vars[k]
		switch {
		case !ok:
			out = append(out, k+" not exported")
		case k == "LD_PRELOAD" && slices.Equal(envsh.SplitPaths(k, got), envsh.SplitPaths(k, wm[k])):
		case got != wm[k]:
			out = append(out, fmt.Sprintf("%s=%q, the plan says %q", k, got, wm[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if _, ok := wm[k]; !ok && k != "EPBUILD_PREFIX" {
			out = append(out, k+" is not in the plan")
		}
	}
	return out
}

func (v *verifier) checkPreload(c VerifyCheck, val string) VerifyCheck {
	if val == "" {
		c.Status, c.Found = check.Skip, "env.sh sets no LD_PRELOAD"
		return c
	}
	entries := map[string]archive.Entry{}
	for _, e := range v.m.Files {
		entries[e.Path] = e
	}
	var bad, good []string
	for _, p := range envsh.SplitPaths("LD_PRELOAD", val) {
		if !within(p, v.prefix) {
			bad = append(bad, p+" is outside the prefix")
			continue
		}
		rel, _ := filepath.Rel(v.prefix, p)
		final, ok := resolveInManifest(filepath.ToSlash(rel), entries)
		switch {
		case !ok:
			bad = append(bad, p+" is not a file the artifact carries")
		case !disk.FileExists(p):
			bad = append(bad, p+" does not exist")
		default:
			good = append(good, fmt.Sprintf("%s (%s, sha256 %s)", p, final.Path, store.ShortKey(final.SHA256)))
		}
	}
	if len(bad) > 0 {
		c.Status, c.Found, c.Fix = check.Fail, strings.Join(bad, "; "), "point LD_PRELOAD at the install's libnvshmem_host (reinstall to restore env.sh)"
		return c
	}
	c.Status, c.Found = check.Pass, "preloads "+strings.Join(good, ", ")
	return c
}

// resolveInManifest follows symlinks through the manifest's entries to a regular file.
func resolveInManifest(rel string, entries map[string]archive.Entry) (archive.Entry, bool) {
	for range 40 {
		e, ok := entries[rel]
		if !ok {
			return archive.Entry{}, false
		}
		if e.Type == archive.TypeFile {
			return e, true
		}
		if e.Type != archive.TypeSymlink || path.IsAbs(e.Target) {
			return archive.Entry{}, false
		}
		rel = path.Clean(path.Join(path.Dir(rel), e.Target))
	}
	return archive.Entry{}, false
}

// withinResolved is within with symlinks resolved on both sides.
func withinResolved(p, dir string) bool {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return within(p, dir)
}

// within reports whether the absolute path p lies in dir (lexically).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, filepath.Clean(p))
	return err == nil && filepath.IsAbs(p) && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// installedEntries are the manifest's entries as epbuild install leaves them in prefix:
// an env.sh whose only change from the artifact's is the prefix and id install wrote into
// it counts as the artifact's, and what the receipt says install added (bin/, the
// epbuild it copied to bin/epbuild) is checked like the artifact's files.
func InstalledEntries(prefix string, files []archive.Entry) []archive.Entry {
	out := files
	if r, err := manifest.ReadReceipt(prefix); err == nil && len(r.Added) > 0 {
		out = append(slices.Clone(files), r.Added...)
	}
	b, err := os.ReadFile(filepath.Join(prefix, manifest.EnvName))
	if err != nil {
		return out
	}
	tmpl, baked, err := envsh.UnbakeEnv(string(b))
	if err != nil || baked == (envsh.EnvBaked{}) {
		return out
	}
	out = slices.Clone(out)
	for i, e := range out {
		if e.Path == manifest.EnvName && e.Type == archive.TypeFile && e.Size == int64(len(tmpl)) && e.SHA256 == manifest.SHA256Hex([]byte(tmpl)) {
			out[i].Size, out[i].SHA256 = int64(len(b)), manifest.SHA256Hex(b)
		}
	}
	return out
}
