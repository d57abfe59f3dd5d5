package cmd

import (
	"runtime/debug"
)

// version is fetch's version as --version prints it after "fetch ":
// "VERSION (REVISION)", from the build information that the go command
// embeds: the module's version ("(devel)" for a build from a checkout
// without a tag, "v1.2.3" for go install ...@v1.2.3) and the VCS revision
// it was built from, with "-dirty" when the work tree had changes.
func version() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(info)
}

// versionOf is version for the build information info (nil when there is
// none).
func versionOf(info *debug.BuildInfo) string {
	ver, rev, dirty := "", "", false
	if info != nil {
		ver = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown revision"
	} else if dirty {
		rev += "-dirty"
	}
	return ver + " (" + rev + ")"
}
