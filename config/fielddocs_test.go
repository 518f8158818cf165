package errandconfig

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestFieldsDocumentDefaults: every field of Settings and Worker says its
// default in its doc comment (style: config fields documented with their
// default), so a reader never has to look in errand's code for it.
func TestFieldsDocumentDefaults(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || (ts.Name.Name != "Settings" && ts.Name.Name != "Worker") {
			return true
		}
		seen++
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			if doc := fl.Doc.Text(); !strings.Contains(doc, "Default") {
				t.Errorf("%s.%s: doc comment %q names no default", ts.Name.Name, fl.Names[0].Name, doc)
			}
		}
		return false
	})
	if seen != 2 {
		t.Fatalf("found %d of the types Settings and Worker in config.go", seen)
	}
}
