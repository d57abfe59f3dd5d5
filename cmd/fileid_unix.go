//go:build unix

package cmd

import (
	"os"
	"syscall"
)

// statID is the identity of fi, the file at path (which a system with
// inodes does not need), or of base in fi, a directory, for a file not
// made yet.
func statID(fi os.FileInfo, _, base string) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, base: base}, true
}
