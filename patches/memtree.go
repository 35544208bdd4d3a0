package patches

import (
	"context"
	"fmt"
	"path"
	"sync"
)

// Tree is a source tree that is not on disk (a commit read from an object
// store), for trying a set on it in memory.
type Tree interface {
	// Entry says what the tree holds at the slash-separated path p, whose
	// parent directories the caller found to be directories. A path that is
	// not there is an Entry of kind EntryNone, not an error.
	Entry(p string) (Entry, error)
}

// EntryKind is what a path of a Tree holds.
type EntryKind uint8

// The entry kinds.
const (
	EntryNone EntryKind = iota
	EntryFile
	EntryDir
	EntrySymlink
	// EntryOther: something a patch may not touch (a submodule).
	EntryOther
)

// Entry is one path of a Tree: for a file, its bytes and whether it is executable.
type Entry struct {
	Kind EntryKind
	Data []byte
	Exec bool
}

// Check tries the prepared set on tree in memory, as Apply would on a
// checkout of it with CheckOnly: each patch's status and hunks, the first
// conflict as the error, an already applied patch as AlreadyAppliedError
// (unless opts.AllowApplied). Only the paths the patches name are read.
func (ps *PreparedSet) Check(tree Tree, opts Options) (*SetResult, error) {
	maxOffset := ps.set.MaxOffset
	if opts.MaxOffset != nil {
		maxOffset = *opts.MaxOffset
	}
	if maxOffset < 0 {
		return nil, fmt.Errorf("check set %s: max offset %d is negative", ps.set.Name, maxOffset)
	}
	opts.CheckOnly = true
	st := &state{disk: &memBase{tree: tree, nodes: map[string]*memEntry{}}, changes: map[string]*node{}}
	// A held set needs no context: every patch was fetched when it was prepared.
	res, _, err := ps.run(context.Background(), st, maxOffset, opts)
	return res, err
}

// memBase reads a Tree path by path, parents first, each once; it is safe for
// concurrent use (the engine reads the files of a message in parallel).
type memBase struct {
	tree  Tree
	mu    sync.Mutex
	nodes map[string]*memEntry
}

type memEntry struct {
	done chan struct{}
	n    *node
	err  error
}

func (m *memBase) get(p string) (*node, error) {
	m.mu.Lock()
	e, ok := m.nodes[p]
	if !ok {
		e = &memEntry{done: make(chan struct{})}
		m.nodes[p] = e
	}
	m.mu.Unlock()
	if !ok {
		e.n, e.err = m.read(p)
		close(e.done)
	}
	<-e.done
	return e.n, e.err
}

func (m *memBase) node(p string) *node {
	m.mu.Lock()
	e := m.nodes[p]
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	<-e.done
	return e.n
}

func (m *memBase) read(p string) (*node, error) {
	if dir := path.Dir(p); dir != "." {
		parent, err := m.get(dir)
		if err != nil {
			return nil, err
		}
		if parent.kind != directory {
			return absentNode(), nil
		}
	}
	e, err := m.tree.Entry(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	switch e.Kind {
	case EntryNone:
		return absentNode(), nil
	case EntryFile:
		perm := permFor(0o644)
		if e.Exec {
			perm = permFor(0o755)
		}
		return &node{kind: regular, data: string(e.Data), perm: perm}, nil
	case EntryDir:
		return &node{kind: directory}, nil
	case EntrySymlink:
		return nil, &symlinkError{at: p}
	}
	return &node{kind: special}, nil
}
