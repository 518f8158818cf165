package main

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// A workspaceModule is one module listed in go.work's use block.
type workspaceModule struct {
	Dir  string // relative to the repository root, slash-separated; "." for the root
	Path string // module path
}

// workspaceModules returns the modules go.work uses, in go.work's order.
func workspaceModules(root string) ([]workspaceModule, error) {
	wf, err := readWork(root)
	if err != nil {
		return nil, err
	}
	var mods []workspaceModule
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, fmt.Errorf("go.work uses %s, outside the repository", u.Path)
		}
		file := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		p := modfile.ModulePath(data)
		if p == "" {
			return nil, fmt.Errorf("%s: no module statement", file)
		}
		mods = append(mods, workspaceModule{Dir: dir, Path: p})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s: go.work uses no modules", root)
	}
	return mods, nil
}

func readWork(root string) (*modfile.WorkFile, error) {
	file := filepath.Join(root, "go.work")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork(file, data, nil)
}

// checkVersion reports whether v can be the version of every module in mods:
// a canonical semantic version ("v1.2.3", "v0.4.0-rc.1") whose major version
// matches the module paths (v2 and later would need a /vN path suffix).
func checkVersion(v string, mods []workspaceModule) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("version %q is not a canonical semantic version such as v0.4.0 or v1.0.0-rc.1", v)
	}
	for _, m := range mods {
		if err := module.Check(m.Path, v); err != nil {
			return err
		}
	}
	return nil
}

// setVersion makes every workspace module require the other workspace
// modules it depends on at version v, and points go.work's replace lines for
// them at v, so the workspace keeps resolving them to the working tree. It
// returns the files it rewrote, relative to root.
func setVersion(root, v string) ([]string, error) {
	mods, err := workspaceModules(root)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(v, mods); err != nil {
		return nil, err
	}
	dirOf := make(map[string]string, len(mods))
	for _, m := range mods {
		dirOf[m.Path] = m.Dir
	}

	// Every file is rewritten only once all of them are known to be good.
	type write struct {
		rel  string
		data []byte
	}
	var writes []write
	required := map[string]bool{}
	for _, m := range mods {
		rel := path.Join(m.Dir, "go.mod")
		file := filepath.Join(root, filepath.FromSlash(rel))
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			return nil, err
		}
		if len(f.Replace) > 0 {
			// A replace in a published go.mod would stop `go install m@v`
			// and is ignored by every user's build anyway.
			return nil, fmt.Errorf("%s: has a replace directive; errand's go.mod files must not (go.work replaces instead)", rel)
		}
		var bump []string
		for _, r := range f.Require {
			if _, ok := dirOf[r.Mod.Path]; ok {
				required[r.Mod.Path] = true
				if r.Mod.Version != v {
					bump = append(bump, r.Mod.Path)
				}
			}
		}
		for _, p := range bump {
			if err := f.AddRequire(p, v); err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
		}
		f.Cleanup()
		out, err := f.Format()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		if !bytes.Equal(out, data) {
			writes = append(writes, write{rel, out})
		}
	}

	file := filepath.Join(root, "go.work")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return nil, err
	}
	replaced := map[string]bool{}
	for _, r := range wf.Replace {
		if _, ok := dirOf[r.Old.Path]; !ok || r.Old.Version == "" {
			continue
		}
		if replaced[r.Old.Path] {
			return nil, fmt.Errorf("go.work: several version-specific replace lines for %s; keep one", r.Old.Path)
		}
		replaced[r.Old.Path] = true
		if r.Old.Version == v {
			continue
		}
		// Edit the version token in place, so the line keeps its place in
		// its block and its comments.
		for i, tok := range r.Syntax.Token {
			if tok == "=>" {
				break
			}
			if tok == r.Old.Version {
				r.Syntax.Token[i] = v
			}
		}
		r.Old.Version = v
	}
	var missing []string
	for p := range required {
		if !replaced[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		target := "./" + dirOf[p]
		if dirOf[p] == "." {
			target = "./"
		}
		if err := addWorkReplace(wf, p, v, target); err != nil {
			return nil, fmt.Errorf("go.work: %w", err)
		}
	}
	out := modfile.Format(wf.Syntax)
	if !bytes.Equal(out, data) {
		writes = append(writes, write{"go.work", out})
	}

	var changed []string
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(w.rel)), w.data, 0o666); err != nil {
			return changed, err
		}
		changed = append(changed, w.rel)
	}
	return changed, nil
}

// addWorkReplace adds "replace path v => dir" to go.work, into its last
// replace block if it has one (WorkFile.AddReplace would start a new
// statement at the end of the file).
func addWorkReplace(wf *modfile.WorkFile, path, v, dir string) error {
	for i := len(wf.Syntax.Stmt) - 1; i >= 0; i-- {
		block, ok := wf.Syntax.Stmt[i].(*modfile.LineBlock)
		if !ok || len(block.Token) != 1 || block.Token[0] != "replace" {
			continue
		}
		line := &modfile.Line{Token: []string{modfile.AutoQuote(path), v, "=>", modfile.AutoQuote(dir)}, InBlock: true}
		block.Line = append(block.Line, line)
		wf.Replace = append(wf.Replace, &modfile.Replace{
			Old:    module.Version{Path: path, Version: v},
			New:    module.Version{Path: dir},
			Syntax: line,
		})
		return nil
	}
	return wf.AddReplace(path, v, dir, "")
}
