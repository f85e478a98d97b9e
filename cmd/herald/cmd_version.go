package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is what `herald version` reports, read from the binary's
// build information (runtime/debug.ReadBuildInfo).
type buildVersion struct {
	// Version is the main module's version: a tag such as v1.2.0 for a
	// binary built by `go install ...@v1.2.0`, "(devel)" for one built
	// from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, "" when the
	// build did not stamp it (-buildvcs=false, or no checkout).
	Revision string `json:"revision,omitempty"`
	// Modified is set when the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Time is the commit's time (RFC 3339), "" when not stamped.
	Time string `json:"time,omitempty"`
	// GoVersion is the Go release that built the binary.
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// readVersion reads the running binary's build information.
func readVersion() buildVersion {
	v := buildVersion{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		v.GoVersion = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			v.Time = s.Value
		}
	}
	return v
}

// versionLine is the one-line form: "herald (devel) revision 1a2b3c4d5e6f
// (modified) go1.26.8 linux/amd64".
func versionLine(v buildVersion) string {
	rev := "revision unknown"
	if v.Revision != "" {
		r := v.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		rev = "revision " + r
		if v.Modified {
			rev += " (modified)"
		}
	}
	return fmt.Sprintf("herald %s %s %s %s", v.Version, rev, v.GoVersion, v.Platform)
}

func newVersionCmd(env *cliEnv) *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version herald was built with",
		Long: `Print the version of this binary: the module version ("(devel)" for a build from a
checkout), the VCS revision and whether the tree was modified (when the build stamped
them: go build stamps them in a git checkout unless -buildvcs=false), and the Go release.
herald --version prints the same line.`,
		Example: `  herald version
  herald version -o json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := out.resolve(c)
			if err != nil {
				return err
			}
			v := readVersion()
			if f.structured() {
				return writeValue(env.stdout, f, v)
			}
			_, err = fmt.Fprintln(env.stdout, versionLine(v))
			return err
		},
	}
	addOutputFlags(c, &out, "an object with version, revision, modified, time, go_version, platform")
	return c
}

// noArgs refuses positional arguments with a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}
