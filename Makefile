# epbuild — the README's two commands are `make demo` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/epbuild

.PHONY: all build deps test lint vet bench schema docs demo clean fuzz rules-check

DEMO_PREFIX ?= out/demo-install

all: build

# A python3 on PATH that only wraps an interpreter (a pyenv shim runs about thirty shell
# processes a call: 0.44 s against 0.09 s) is passed over by the tests and benchmarks: the
# directory of the interpreter it runs goes first on PATH, so they run the same Python,
# directly (a shim doubled the tests' time, and charged each side of a comparison by its
# number of python3 calls).
PYTHON_DIRECT = py=$$(python3 -c 'import os, sys; print("" if os.path.samefile(sys.argv[1], sys.executable) else os.path.dirname(sys.executable))' "$$(command -v python3)" 2>/dev/null); \
	if [ -n "$$py" ]; then echo "python3 on PATH wraps $$py/python3: run that directly" >&2; PATH="$$py:$$PATH"; export PATH; fi;

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/epbuild

# What the tests need (git, gcc, cmake, ninja, python3 with venv/pip/headers, Lmod, tclsh,
# the shells, a registry server), installed where missing with apt-get; it says what it installs.
deps:
	.ci/deps

# The test command: the tools, then every test (fuzz seed corpora included), with the race
# detector on every package but cmd/epbuild, which runs beside them without it: its tests
# drive the whole pipeline in process (installs, verifies, hostile archives) through code
# whose own packages' tests run under -race, and under -race they alone took 330 of CI's
# 600 seconds. The longest race package is named first, so both cores stay busy to the end.
# go vet is make lint's (CI runs both): vetting twice costs CI a minute.
test: deps
	@$(PYTHON_DIRECT) \
	log=$$(mktemp); \
	$(GO) test -count=1 -timeout 12m ./cmd/epbuild >$$log 2>&1 & cmd=$$!; \
	$(GO) test -race -count=1 -timeout 12m ./builder ./builder/verify $$($(GO) list ./... | grep -v -e '/cmd/epbuild$$' -e '/builder$$' -e '/builder/verify$$'); race=$$?; \
	wait $$cmd; c=$$?; cat $$log; rm -f $$log; \
	test $$race = 0 && test $$c = 0

vet:
	$(GO) vet ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-clean:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Measurements: comparison tests that print `BENCH <name> ratio=<x>` (epbuild's time over the
# tool it replaces, run alternately on the same bytes with the same threads; median and min),
# then Go benchmarks. -p 1: one test binary at a time, so no comparison runs beside another.
# EPBUILD_BENCH_MIRROR=DIR adds runs on real upstream data from a mirror (README: what it must hold).
bench:
	@$(PYTHON_DIRECT) \
	EPBUILD_BENCH=1 $(GO) test -p 1 -count=1 -timeout 60m -run '^TestCompare' -v ./... | grep -E '^(BENCH|--- FAIL|FAIL|ok )' && \
	$(GO) test -p 1 -count=1 -timeout 30m -run '^$$' -bench . -benchmem ./...

# The main job, offline, on any machine with gcc, cmake and python3: build epbuild, run the
# demo recipe through every stage, install the artifact and verify the install.
demo: build
	$(BIN) recipe demo --out out
	$(BIN) install "$$(ls -t out/demo-*.tar.zst | head -1)" --prefix $(DEMO_PREFIX)
	$(BIN) verify-install --prefix $(DEMO_PREFIX)

schema:
	$(GO) run ./cmd/epbuild schema -o recipes/schema.json

# docs/rules.md from compat/rules.yaml and compat/host-facts.yaml (a test fails when stale).
docs:
	$(GO) run ./compat/internal/rulesdoc -o docs/rules.md

# Every upstream file:line the rules cite (cites: in compat/rules.yaml), read again from a
# mirror of bare repositories, EPBUILD_RULES_MIRROR=DIR/github.com/OWNER/REPO.git: fails when
# the cited lines no longer say what the rule quotes. Without a mirror it says so and passes.
# Not part of make test (it needs the mirror).
rules-check:
	$(GO) run ./compat/internal/rulescheck

# Each fuzzer under a memory limit (ulimit -v, KiB): an input that makes a loader or an
# extractor allocate beyond it crashes the worker, and the fuzzer reports the input.
FUZZMEM ?= 4194304
FUZZTIME ?= 30s
FUZZ    := ulimit -v $(FUZZMEM) && $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s -fuzz
fuzz:
	$(FUZZ) FuzzLoad ./recipes/
	$(FUZZ) FuzzDecode ./recipes/strictyaml/
	$(FUZZ) FuzzLoadSet ./patches/
	$(FUZZ) FuzzVersionOrder ./compat/
	$(FUZZ) FuzzExtract ./builder/archive/
	$(FUZZ) FuzzInstallExtract ./builder/install/
	$(FUZZ) FuzzExpandHostlist ./builder/host/
	$(FUZZ) FuzzLoadReport ./builder/fleet/
	$(FUZZ) FuzzOCIManifest ./builder/oci/

clean:
	rm -rf bin
