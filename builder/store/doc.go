// Package store owns the stage store under the cache directory: outputs kept by stage and
// key (Produce, Has, Path, Forget), the locks that let concurrent runs share them, the run
// records that tell cache gc what a run in progress uses, the names of its temporaries,
// and Key, the content key of a stage's inputs.
//
// It knows nothing of what a stage does (the runner decides that) nor of plans and
// artifacts; it may import builder/cache and builder/disk, no other package of builder.
package store
