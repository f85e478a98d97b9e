package supervisors

import (
	"runtime"
	"runtime/debug"
)

// BuildInfo is what the running binary says of its build: the main
// module's version ("(devel)" for a build from a work tree), the VCS
// revision it was built from (empty when unknown; "-dirty" when the work
// tree had changes) and the Go version.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// ReadBuildInfo returns the running binary's BuildInfo.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: "(unknown)", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.Version = v
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}
