package errand_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLayoutNamesEveryRootFile keeps docs/concepts.md's Layout section
// true: it names every source file of the root package and every package
// under internal/ it mentions exists, and no root file is named for how it
// was made rather than what it holds (fast*, *carry*, ops.go; issue 32).
func TestLayoutNamesEveryRootFile(t *testing.T) {
	page, err := os.ReadFile("docs/concepts.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	start := strings.Index(text, "\n## Layout\n")
	if start < 0 {
		t.Fatal("docs/concepts.md has no \"## Layout\" section: a reader of the source has no map of the root package")
	}
	section := text[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_]+\\.go)`").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			sources = append(sources, f)
		}
	}
	for _, f := range sources {
		if !named[f] {
			t.Errorf("root file %s is not named in docs/concepts.md's Layout section: say which layer it holds", f)
		}
		if strings.HasPrefix(f, "fast") || strings.Contains(f, "carry") || f == "ops.go" {
			t.Errorf("root file %s is named for how it was made, not for what it holds", f)
		}
	}
	for f := range named {
		if !slices.Contains(sources, f) {
			t.Errorf("docs/concepts.md's Layout section names %s, which is no source file of the root package", f)
		}
	}
	for _, m := range regexp.MustCompile("`(internal/[a-z0-9_]+)`").FindAllStringSubmatch(section, -1) {
		if st, err := os.Stat(m[1]); err != nil || !st.IsDir() {
			t.Errorf("docs/concepts.md's Layout section names %s, which is no package of the root module", m[1])
		}
	}
}
