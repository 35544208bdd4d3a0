package recipes

import "strings"

// ApplyPreloads adds to the runtime env's LD_PRELOAD, after what the recipe preloads
// itself, {{C.prefix}}/FILE for each preload: file of a component built here. It runs once
// the sources are final (after the catalogue switched any): a component taken from the
// Python environment preloads nothing, so torch's own NCCL stays torch's choice.
func (d *Doc) ApplyPreloads() {
	r := &d.Recipe
	var add []string
	for _, c := range r.Components {
		// a python-wheel component is the library torch loads once its wheel is installed:
		// a preload beside it would map a second copy
		if c.Source.Python != nil || len(c.Build) == 0 || c.PythonWheel != nil {
			continue
		}
		for _, f := range c.Preload {
			add = append(add, "{{"+c.Name+".prefix}}/"+strings.TrimPrefix(f, "/"))
		}
	}
	if len(add) == 0 {
		return
	}
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	// ld.so splits LD_PRELOAD at ':' and blanks; ':' keeps a prefix with a blank whole
	if old := r.Env["LD_PRELOAD"]; old != "" {
		add = append([]string{old}, add...)
	}
	r.Env["LD_PRELOAD"] = strings.Join(add, ":")
}

// NameWheelPackages gives each python-wheel without a package the package the
// component's python source names: the one a build from source replaces. It runs after
// the --set overrides (C.package) and before the catalogue switches the source.
func (d *Doc) NameWheelPackages() {
	for i := range d.Recipe.Components {
		c := &d.Recipe.Components[i]
		if w := c.PythonWheel; w != nil && w.Package == "" && c.Source.Python != nil {
			w.Package = c.Source.Python.Package
		}
	}
}
