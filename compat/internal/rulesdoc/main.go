// Command rulesdoc writes docs/rules.md from the embedded rules and host facts
// (`make docs`); compat's TestRulesDocUpToDate fails when the file is stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/epbuild/epbuild/compat"
)

func main() {
	out := flag.String("o", "docs/rules.md", "the file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "rulesdoc:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	rules, err := compat.LoadRules()
	if err != nil {
		return err
	}
	facts, err := compat.LoadHostFacts()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".rules-*.md")
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(compat.RulesMarkdown(rules, facts)); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
