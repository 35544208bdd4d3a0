//go:build !linux

package patches

import (
	"errors"
	"os"
)

// canExchange says whether exchange can work here.
const canExchange = false

// exchange would swap two entries of a directory in one step; only Linux has it.
func exchange(*os.File, string, string) error {
	return errors.ErrUnsupported
}
