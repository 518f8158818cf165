// Command release is the Go half of scripts/release: it does the parts of a
// release that need to understand go.mod, go.work and module zips. The script
// owns the git side (checks, commit, tags) and calls this helper.
//
// Usage:
//
//	release modules    [-C dir]                       list the workspace modules
//	release setversion [-C dir] VERSION               require VERSION everywhere
//	release publish    [-C dir] -proxy DIR VERSION MODDIR...
//
// modules prints one line per module listed in go.work, "<dir> <module path>",
// where dir is relative to the repository root ("." for the root module).
//
// setversion sets every requirement one workspace module has on another to
// VERSION in every workspace go.mod, and moves go.work's version-specific
// replace lines to VERSION (adding one for any required module that lacks
// it), so the workspace keeps building the working tree. It prints the files
// it changed, relative to the repository root.
//
// publish writes the modules in the given directories, as tagged at VERSION,
// into DIR laid out as a GOPROXY=file:// module proxy: DIR/<module>/@v/list,
// VERSION.info, VERSION.mod and VERSION.zip. Zips are built from the tags with
// golang.org/x/mod/zip, which leaves out nested modules and vendor
// directories exactly as the go command does.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  release modules    [-C dir]
  release setversion [-C dir] VERSION
  release publish    [-C dir] -proxy DIR VERSION MODDIR...`

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	root := fs.String("C", ".", "repository root (the directory holding go.work)")
	proxy := fs.String("proxy", "", "file-based module proxy directory (publish)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	args = fs.Args()

	switch cmd {
	case "modules":
		if len(args) != 0 {
			return fmt.Errorf("modules takes no arguments\n%s", usage)
		}
		mods, err := workspaceModules(*root)
		if err != nil {
			return err
		}
		for _, m := range mods {
			fmt.Fprintf(stdout, "%s %s\n", m.Dir, m.Path)
		}
		return nil
	case "setversion":
		if len(args) != 1 {
			return fmt.Errorf("setversion takes one VERSION\n%s", usage)
		}
		changed, err := setVersion(*root, args[0])
		if err != nil {
			return err
		}
		for _, f := range changed {
			fmt.Fprintln(stdout, f)
		}
		return nil
	case "publish":
		if *proxy == "" || len(args) < 2 {
			return fmt.Errorf("publish needs -proxy DIR, a VERSION and at least one module directory\n%s", usage)
		}
		return publish(*root, *proxy, args[0], args[1:], stdout)
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}
