//go:build !unix

package cmd

import "os"

// statID is the identity of the file at path, or of base in the directory
// at path, for a file not made yet: see pathID. fi is not used: there is
// no inode to read.
func statID(_ os.FileInfo, path, base string) (fileID, bool) {
	return pathID(path, base)
}
