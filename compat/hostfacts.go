package compat

import (
	_ "embed"
	"fmt"
	"strings"
)

//go:embed host-facts.yaml
var hostFactsYAML []byte

// HostFact is one fact a node's probe reads for the rules' host conditions: its key, the
// values a rule may compare it to (none listed: a number, a version or a name) and where
// it is read.
type HostFact struct {
	Key    string   `json:"key"`
	Values []string `json:"values,omitempty"`
	Read   string   `json:"read"`
}

// LoadHostFacts reads the host facts built into the binary.
func LoadHostFacts() ([]HostFact, error) {
	return ParseHostFacts("compat/host-facts.yaml", hostFactsYAML)
}

// ParseHostFacts decodes a host-facts file strictly: keys unique, each saying where it
// is read.
func ParseHostFacts(file string, data []byte) ([]HostFact, error) {
	var raw struct {
		Facts []HostFact `json:"facts"`
	}
	d, err := decodeStrict(file, data, &raw)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, f := range raw.Facts {
		p := fmt.Sprintf("$.facts[%d]", i)
		switch {
		case f.Key == "":
			d.at(p, "missing key:")
		case seen[f.Key]:
			d.at(p+".key", "host fact %s is listed twice", f.Key)
		}
		seen[f.Key] = true
		if strings.TrimSpace(f.Read) == "" {
			d.at(p, "host fact %s: say where it is read (read:)", f.Key)
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return raw.Facts, nil
}
