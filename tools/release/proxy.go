package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// tagFor returns the git tag of the module in dir at version v: the bare
// version for the root module, "<dir>/<version>" for a nested one, which is
// what the go command looks for in a multi-module repository.
func tagFor(dir, v string) string {
	if dir == "." {
		return v
	}
	return dir + "/" + v
}

// publish writes the modules in dirs (relative to root), as tagged at v,
// into proxyDir in the GOPROXY=file:// layout, and prints each module's
// go.sum hash.
func publish(root, proxyDir, v string, dirs []string, stdout io.Writer) error {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		dir := path.Clean(filepath.ToSlash(d))
		if err := publishModule(absRoot, proxyDir, dir, v, stdout); err != nil {
			return err
		}
	}
	return nil
}

func publishModule(root, proxyDir, dir, v string, stdout io.Writer) error {
	tag := tagFor(dir, v)
	commit, err := git(root, "rev-parse", "--verify", "--quiet", "refs/tags/"+tag+"^{commit}")
	if err != nil {
		return fmt.Errorf("module %s: no tag %s: %w", dir, tag, err)
	}
	commit = strings.TrimSpace(commit)
	subdir := ""
	if dir != "." {
		subdir = dir
	}
	gomod, err := git(root, "show", commit+":"+path.Join(subdir, "go.mod"))
	if err != nil {
		return fmt.Errorf("tag %s: reading go.mod: %w", tag, err)
	}
	modPath := modfile.ModulePath([]byte(gomod))
	if modPath == "" {
		return fmt.Errorf("tag %s: %s/go.mod has no module statement", tag, dir)
	}
	if err := checkVersion(v, []workspaceModule{{Dir: dir, Path: modPath}}); err != nil {
		return err
	}
	unix, err := git(root, "log", "-1", "--format=%ct", commit)
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(unix), 10, 64)
	if err != nil {
		return fmt.Errorf("tag %s: commit time %q: %w", tag, unix, err)
	}

	escPath, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escVer, err := module.EscapeVersion(v)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxyDir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o777); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVer)
	if _, err := os.Stat(base + ".zip"); err == nil {
		// A proxy never changes a published version: go.sum files
		// everywhere would disagree with it.
		return fmt.Errorf("%s@%s is already published in %s", modPath, v, proxyDir)
	}

	mv := module.Version{Path: modPath, Version: v}
	tmp, err := os.CreateTemp(vdir, escVer+".zip.tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = modzip.CreateFromVCS(tmp, mv, root, commit, subdir)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", mv, err)
	}
	if _, err := modzip.CheckZip(mv, tmp.Name()); err != nil {
		return fmt.Errorf("%s: %w", mv, err)
	}
	sum, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return err
	}

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, time.Unix(secs, 0).UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", []byte(gomod), 0o666); err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o666); err != nil {
		return err
	}
	// The zip goes last: its presence is what marks the version published.
	if err := os.Rename(tmp.Name(), base+".zip"); err != nil {
		return err
	}
	if err := addToList(filepath.Join(vdir, "list"), v); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s\n", modPath, v, sum)
	return nil
}

// addToList adds v to a proxy's @v/list file, keeping it in semver order.
func addToList(file, v string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := []string{v}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && line != v {
			versions = append(versions, line)
		}
	}
	semver.Sort(versions)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o666)
}

// git runs git in dir and returns its standard output.
func git(dir string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}
