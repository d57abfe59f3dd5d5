package cmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// outputFile is a file fetch writes: the results (-o), the report
// (--report), or the demo's results. Every output has one life:
//
//   - openOutput opens it for writing without changing what it holds, after
//     checkFiles has made sure that it is not an input and not another
//     output;
//   - start empties it (a regular file only: a pipe, a terminal or
//     /dev/stdout is written as it is), or leaves it to be appended to with
//     --resume, once every check of the run has passed;
//   - abandon closes it and removes it again if fetch created it, for a run
//     that never started.
type outputFile struct {
	flag    string // "--output", "--report"
	name    string
	f       *os.File
	created bool // it did not exist before openOutput
	append  bool // --resume: never emptied
}

// openOutput opens name for writing, creating it if it is missing, without
// emptying it. appendMode opens it for appending (and reading, which
// --resume needs).
func openOutput(flag, name string, appendMode bool) (*outputFile, error) {
	o := &outputFile{flag: flag, name: name, append: appendMode}
	if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		o.created = true
	}
	mode := os.O_WRONLY | os.O_CREATE
	if appendMode {
		mode = os.O_RDWR | os.O_APPEND | os.O_CREATE
	}
	f, err := os.OpenFile(name, mode, 0o666)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	o.f = f
	return o, nil
}

// start makes the output ready for the run: a regular file is emptied
// unless it is appended to.
func (o *outputFile) start() error {
	if o.append {
		return nil
	}
	fi, err := o.f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", o.flag, err)
	}
	if !fi.Mode().IsRegular() {
		return nil // a pipe or a device: nothing to empty
	}
	if err := o.f.Truncate(0); err != nil {
		return fmt.Errorf("%s: %w", o.flag, err)
	}
	return nil
}

// createOutput opens name and starts it at once, for a command that has no
// other check to make first (check, demo); on failure nothing is left.
func createOutput(flag, name string) (*outputFile, error) {
	o, err := openOutput(flag, name, false)
	if err != nil {
		return nil, err
	}
	if err := o.start(); err != nil {
		o.abandon()
		return nil, err
	}
	return o, nil
}

// abandon closes the output and removes it if openOutput created it.
func (o *outputFile) abandon() {
	o.f.Close()
	if o.created {
		os.Remove(o.name)
	}
}

// Close closes the file.
func (o *outputFile) Close() error { return o.f.Close() }

// namedFile is a file named on the command line, and the flag or role that
// named it, for messages.
type namedFile struct {
	role string // "input", "-p", "--cacert", "--output", "--report", "standard output"
	name string
	file *os.File // set instead of name for a stream already open (standard output)
}

// fileID identifies a file whatever its name: its device and inode, or, for
// a file that does not exist yet, its directory's and its base name. Where
// files have no inode (Windows), its absolute path stands for the device
// and inode: the same file under two names is then not seen as one.
type fileID struct {
	dev, ino uint64
	path     string // where there is no inode
	base     string // "" for a file that exists
}

// identify returns f's identity, and false when it has none worth
// comparing: a file that cannot be looked at, or one that is not a regular
// file (a terminal, a pipe or a device is written as it is and never
// emptied, so sharing it overwrites nothing).
func identify(f namedFile) (fileID, bool) {
	var fi os.FileInfo
	var err error
	if f.file != nil {
		fi, err = f.file.Stat()
	} else {
		fi, err = os.Stat(f.name) // follows symbolic links: a link to a file is that file
	}
	switch {
	case err == nil:
		if !fi.Mode().IsRegular() {
			return fileID{}, false
		}
		return statID(fi, f.path(), "")
	case f.file != nil:
		return fileID{}, false
	case errors.Is(err, fs.ErrNotExist):
		dir, err := os.Stat(filepath.Dir(f.name))
		if err != nil {
			return fileID{}, false
		}
		return statID(dir, filepath.Dir(f.name), filepath.Base(f.name))
	}
	return fileID{}, false
}

// pathID is the identity of the file at path, or of base in the directory
// at path, where files have no inode: the absolute path, in lower case as
// Windows compares names (so "Out.JSONL" and "./out.jsonl" are one file,
// but two hard links or a symbolic link and its target are two).
func pathID(path, base string) (fileID, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fileID{}, false
	}
	return fileID{path: strings.ToLower(abs), base: strings.ToLower(base)}, true
}

// errSameFile is wrapped by checkFiles' errors.
var errSameFile = errors.New("the same file")

// checkFiles makes sure that no output is an input or another output: the
// same file by device and inode, whatever the spelling (./name, a hard
// link, a symbolic link). Only regular files (and files still to be made)
// are compared: a terminal, a pipe or /dev/null is never emptied, so two
// outputs may share one. It opens nothing for writing.
func checkFiles(inputs, outputs []namedFile) error {
	type seen struct {
		f  namedFile
		id fileID
	}
	var outs []seen
	for _, o := range outputs {
		id, ok := identify(o)
		if !ok {
			continue
		}
		for _, prev := range outs {
			if prev.id == id {
				return fmt.Errorf("%s %s and %s %s are %w: one would overwrite the other", prev.f.role, show(prev.f), o.role, show(o), errSameFile)
			}
		}
		outs = append(outs, seen{o, id})
	}
	for _, in := range inputs {
		id, ok := identify(in)
		if !ok || id.base != "" {
			continue
		}
		for _, o := range outs {
			if o.id == id {
				return fmt.Errorf("%s %s is %w as %s %s: writing it would destroy the %s", o.f.role, show(o.f), errSameFile, in.role, show(in), in.role)
			}
		}
	}
	return nil
}

// path is f's name, or its open file's.
func (f namedFile) path() string {
	if f.file != nil {
		return f.file.Name()
	}
	return f.name
}

func show(f namedFile) string {
	if f.file != nil {
		return "(" + f.file.Name() + ")"
	}
	return f.name
}

// streamFile is a standard stream as a file, when it is one, for
// checkFiles.
func streamFile(s any) *os.File {
	f, _ := s.(*os.File)
	return f
}
