package recipes

import (
	"fmt"
	"strconv"
	"strings"
)

// SetHelp lists the keys --set accepts, for the command line's help text.
const SetHelp = `COMPONENT.version=V (a catalogued release switches the pin; an uncatalogued Python package: exactly V), COMPONENT.source=git|archive (the catalogue's pin of that kind) or python (keep the Python environment's),
COMPONENT.commit=SHA, COMPONENT.ref=REF, COMPONENT.url=URL,
COMPONENT.sha256=HEX, COMPONENT.strip=N, COMPONENT.package=NAME, COMPONENT.patches=a,b (empty: none),
COMPONENT.options.KEY=V (every cmake step), COMPONENT.env.KEY=V (every build step),
env.KEY=V (runtime env; empty value removes it), toolchain.cuda|torch|python|gcc|cmake=V,
toolchain.arch=sm_90a,sm_100, toolchain.host-arch=x86_64,aarch64 (the build host's uname -m; empty: any),
runtime.buffer-bytes=N (bytes), runtime.gpus-per-node|ranks|hidden=N,
runtime.low-latency|mnnvl=true|false (runtime keys: empty value leaves the key undeclared)`

// Apply applies --set overrides in order. Each is `key=value`; see SetHelp. The
// overridden paths are remembered so that validation errors point at the flag.
func (d *Doc) Apply(sets []string) error {
	for _, s := range sets {
		if err := d.apply1(s); err != nil {
			return &Error{File: "--set " + s, Msg: err.Error()}
		}
	}
	return nil
}

func (d *Doc) apply1(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("expected KEY=VALUE, e.g. nvshmem.commit=<40-hex>; keys: %s", SetHelp)
	}
	r := &d.Recipe
	head, rest, _ := strings.Cut(key, ".")
	switch head {
	case "env":
		if !envRe.MatchString(rest) {
			return fmt.Errorf("%q is not a valid environment variable name", rest)
		}
		if r.Env == nil {
			r.Env = map[string]string{}
		}
		if val == "" {
			delete(r.Env, rest)
		} else {
			r.Env[rest] = val
		}
		d.set["$.env."+rest] = s
		return nil
	case "runtime":
		return d.setRuntime(rest, val, s)
	case "toolchain":
		t := &r.Toolchain
		switch rest {
		case "cuda":
			t.CUDA = val
		case "torch":
			t.Torch = val
		case "python":
			t.Python = val
		case "gcc":
			t.GCC = val
		case "cmake":
			t.CMake = val
		case "arch":
			t.Arch = splitList(val)
		case "host-arch":
			t.HostArch = splitList(val)
		default:
			return fmt.Errorf("unknown toolchain key %q (cuda, torch, python, gcc, cmake, arch, host-arch)", rest)
		}
		d.set["$.toolchain."+rest] = s
		return nil
	}
	idx := -1
	for i := range r.Components {
		if r.Components[i].Name == head {
			idx = i
		}
	}
	if idx < 0 {
		names := make([]string, len(r.Components))
		for i, c := range r.Components {
			names[i] = c.Name
		}
		return fmt.Errorf("recipe %s has no component %q (components: %s; or env., toolchain.)", r.Name, head, strings.Join(names, ", "))
	}
	c := &r.Components[idx]
	base := fmt.Sprintf("$.components[%d]", idx)
	field, sub, _ := strings.Cut(rest, ".")
	needGit := func() error {
		if c.Source.Git == nil {
			return fmt.Errorf("component %s has a %s source, not git; %s does not apply", c.Name, c.Source.Kind(), field)
		}
		return nil
	}
	needArchive := func() error {
		if c.Source.Archive == nil {
			return fmt.Errorf("component %s has a %s source, not an archive; %s does not apply", c.Name, c.Source.Kind(), field)
		}
		return nil
	}
	path := base
	switch field {
	case "version":
		c.Version, path = val, base+".version"
	case "commit", "ref":
		if err := needGit(); err != nil {
			return err
		}
		if field == "commit" {
			c.Source.Git.Commit = val
			// the ref named beside the old commit would now point elsewhere
			c.Source.Git.Ref = ""
		} else {
			c.Source.Git.Ref = val
		}
		path = base + ".source.git." + field
	case "url":
		switch c.Source.Kind() {
		case "git":
			c.Source.Git.URL, path = val, base+".source.git.url"
		case "archive":
			c.Source.Archive.URL, path = val, base+".source.archive.url"
		default:
			return fmt.Errorf("component %s has a python source; set %s.package instead", c.Name, c.Name)
		}
	case "sha256":
		if err := needArchive(); err != nil {
			return err
		}
		c.Source.Archive.SHA256, path = val, base+".source.archive.sha256"
	case "strip":
		if err := needArchive(); err != nil {
			return err
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("strip must be a number: %v", err)
		}
		c.Source.Archive.Strip, path = n, base+".source.archive.strip"
	case "source":
		// the switch itself needs the catalogue of releases: builder.ApplyCatalog
		switch {
		case val == "python" && c.Source.Python == nil:
			return fmt.Errorf("component %s has a %s source in recipe %s; source=python keeps a component the recipe takes from the Python environment there", c.Name, c.Source.Kind(), r.Name)
		case val == "python":
			// keeps it there, whatever version a --set names (matrix value bundled)
		case val != "git" && val != "archive":
			return fmt.Errorf("source must be git or archive (the catalogue's pin of that kind for %s's version), or python (the Python environment's, where the recipe takes it from there), not %q", c.Name, val)
		case c.Source.Python != nil:
			return fmt.Errorf("component %s comes from the Python environment; --set %s.version=V (a release of the catalogue) builds it from source where the recipe has build steps for it; or set %s.package", c.Name, c.Name, c.Name)
		}
		path = base + ".source"
	case "package":
		if c.Source.Python == nil {
			return fmt.Errorf("component %s has a %s source, not python", c.Name, c.Source.Kind())
		}
		c.Source.Python.Package, path = val, base+".source.python.package"
	case "patches":
		c.Patches, path = splitList(val), base+".patches"
	case "options":
		if sub == "" {
			return fmt.Errorf("use %s.options.KEY=VALUE", c.Name)
		}
		n := 0
		for j := range c.Build {
			if cm := c.Build[j].CMake; cm != nil {
				if cm.Options == nil {
					cm.Options = map[string]string{}
				}
				cm.Options[sub] = val
				d.set[fmt.Sprintf("%s.build[%d].cmake.options.%s", base, j, sub)] = s
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("component %s has no cmake step for options", c.Name)
		}
		return nil
	case "env":
		if sub == "" || !envRe.MatchString(sub) {
			return fmt.Errorf("use %s.env.NAME=VALUE with a valid variable name", c.Name)
		}
		if len(c.Build) == 0 {
			return fmt.Errorf("component %s has no build step to set env on", c.Name)
		}
		for j := range c.Build {
			st := &c.Build[j]
			var env *map[string]string
			switch {
			case st.CMake != nil:
				env = &st.CMake.Env
			case st.PythonExtension != nil:
				env = &st.PythonExtension.Env
			case st.Command != nil:
				env = &st.Command.Env
			}
			if *env == nil {
				*env = map[string]string{}
			}
			(*env)[sub] = val
			d.set[fmt.Sprintf("%s.build[%d].%s.env.%s", base, j, st.Kind(), sub)] = s
		}
		return nil
	default:
		return fmt.Errorf("unknown key %q for component %s; keys: %s", rest, c.Name, SetHelp)
	}
	d.set[path] = s
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// setRuntime applies --set runtime.KEY=V; an empty value leaves the key undeclared.
func (d *Doc) setRuntime(key, val, s string) error {
	rt := &d.Recipe.Runtime
	counts := map[string]**uint32{"gpus-per-node": &rt.GPUsPerNode, "ranks": &rt.Ranks, "hidden": &rt.Hidden}
	switch {
	case key == "buffer-bytes":
		rt.BufferBytes = nil
		if val != "" {
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return fmt.Errorf("runtime.buffer-bytes is a number of bytes (e.g. 2146961792), not %q", val)
			}
			rt.BufferBytes = &n
		}
	case counts[key] != nil:
		dst := counts[key]
		*dst = nil
		if val != "" {
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return fmt.Errorf("runtime.%s is a whole number (e.g. 8), not %q", key, val)
			}
			n32 := uint32(n)
			*dst = &n32
		}
	case key == "low-latency":
		rt.LowLatency = nil
		if val != "" {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return fmt.Errorf("runtime.low-latency is true or false, not %q", val)
			}
			rt.LowLatency = &b
		}
	case key == "mnnvl":
		rt.MNNVL = false
		if val != "" {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return fmt.Errorf("runtime.mnnvl is true or false, not %q", val)
			}
			rt.MNNVL = b
		}
	default:
		return fmt.Errorf("unknown runtime key %q (buffer-bytes, gpus-per-node, ranks, hidden, low-latency, mnnvl)", key)
	}
	d.set["$.runtime."+key] = s
	return nil
}
