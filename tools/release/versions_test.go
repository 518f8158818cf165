package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		file := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(data), 0o666); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestSetVersion(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"go.work": `go 1.26.0

use (
	.
	./drv
	./tool
)

// Comments stay.
replace (
	example.com/m v0.0.0 => ./
)
`,
		"go.mod": "module example.com/m\n\ngo 1.25\n",
		"drv/go.mod": `module example.com/m/drv

go 1.25

require (
	example.com/m v0.0.0
	example.com/other v1.2.3
)
`,
		"tool/go.mod": `module example.com/m/tool

go 1.25

require (
	example.com/m v0.0.0 // indirect
	example.com/m/drv v0.0.0
)
`,
	})

	changed, err := setVersion(root, "v0.4.0")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"drv/go.mod", "tool/go.mod", "go.work"}; !reflect.DeepEqual(changed, want) {
		t.Errorf("setVersion changed %q, want %q", changed, want)
	}
	if got, want := readFile(t, root, "drv/go.mod"), "\texample.com/m v0.4.0\n\texample.com/other v1.2.3\n"; !strings.Contains(got, want) {
		t.Errorf("drv/go.mod: a requirement on a workspace module must move to the release and others stay; got\n%s", got)
	}
	if got, want := readFile(t, root, "tool/go.mod"), "\texample.com/m v0.4.0 // indirect\n\texample.com/m/drv v0.4.0\n"; !strings.Contains(got, want) {
		t.Errorf("tool/go.mod: every requirement moves, comments stay; got\n%s", got)
	}
	work := readFile(t, root, "go.work")
	for _, want := range []string{
		"// Comments stay.\nreplace (\n\texample.com/m v0.4.0 => ./\n",
		"example.com/m/drv v0.4.0 => ./drv",
	} {
		if !strings.Contains(work, want) {
			t.Errorf("go.work lacks %q: the workspace must replace every required module at the released version; got\n%s", want, work)
		}
	}
	if strings.Contains(work, "v0.0.0") {
		t.Errorf("go.work still replaces the old version:\n%s", work)
	}

	changed, err = setVersion(root, "v0.4.0")
	if err != nil || len(changed) != 0 {
		t.Errorf("setting the same version again changed %q (err %v), want nothing", changed, err)
	}
}

func TestSetVersionRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, version, gomod string
	}{
		{"not canonical", "v1.0", "module example.com/m\n"},
		{"major version without path suffix", "v2.0.0", "module example.com/m\n"},
		{"replace in go.mod", "v0.4.0", "module example.com/m\n\nreplace example.com/x => ../x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeFiles(t, root, map[string]string{"go.work": "go 1.26.0\n\nuse .\n", "go.mod": tc.gomod})
			if _, err := setVersion(root, tc.version); err == nil {
				t.Errorf("setVersion(%s) succeeded, want an error", tc.version)
			}
			if got := readFile(t, root, "go.mod"); got != tc.gomod {
				t.Errorf("a refused release rewrote go.mod:\n%s", got)
			}
		})
	}
}

func TestAddToList(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "list")
	for _, v := range []string{"v0.10.0", "v0.9.0", "v0.10.0", "v0.10.0-rc.1"} {
		if err := addToList(file, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := readFile(t, filepath.Dir(file), "list"), "v0.9.0\nv0.10.0-rc.1\nv0.10.0\n"; got != want {
		t.Errorf("@v/list = %q, want %q (each version once, in semver order)", got, want)
	}
}
