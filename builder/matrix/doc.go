// Package matrix is the matrix run: what the GitHub workflow's GPU job does per cell,
// here, one cell after another, for a site with a GPU box or a Slurm allocation and no
// runners. Each allowed cell is built (through the one stage store: what cells share is
// built once), installed into a prefix of its own (install verifies the tree before it
// is put in place), and its test command run with the install's env and the cell's; a
// cell that fails does not stop the ones after it.
//
// It is turned around like mirror: it does not make the matrix nor build a cell itself;
// the pipeline gives it both (Options.Matrix, Options.Build; builder.RunMatrix), and a
// rule that stops a cell comes back as a *RefusedError. It owns the cell's steps and
// their outcomes, the test's templates and the metrics read from its output; it may
// import stage (a cell's Result), install, verify, envsh and the leaves, never the
// pipeline.
package matrix
