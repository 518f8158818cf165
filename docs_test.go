package errand_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestDocsNameOnlyExistingIdentifiers keeps the promise that the docs name
// only identifiers that exist: every exported name a doc mentions, in the
// Markdown pages (README.md, CHANGELOG.md, docs/*.md) or in the doc comments
// of any package of the workspace, must be declared by the project package it
// names.
//
// What is checked:
//
//   - a qualified name pkg.Ident or pkg.Type.Member anywhere in a page or a
//     doc comment (prose, code spans, code blocks), where pkg is the name of a
//     project package (errand, driver, memorybroker, redisbroker, ...);
//   - a doc link [Ident], [Type.Member], [pkg.Ident], [pkg.Type.Member] or
//     [import/path.Ident] in a doc comment, unqualified links resolved in the
//     comment's own package;
//   - an unqualified Type.Member anywhere in a page or a doc comment, where
//     Type is declared by a project package (Server.Queues,
//     WorkerConfig.Concurrency, Options.Logger: any package's will do);
//   - a field key in a composite literal pkg.Type{Key: ...} inside a page's
//     Go code block that parses;
//   - in a page, a test (TestX, BenchmarkX, FuzzX) or a conformance kit case
//     (Broker/..., Backend/..., Worker/..., Fault/...) named as what holds a
//     promise: the test must be declared by some _test.go file, the case
//     spelled in the kit's source.
//
// Names of other libraries (redis.NewClient, context.Context, asynq's
// Config.Queues) are not checked, and neither are a snippet's own
// lower-case variables. Records of the past name what existed then: in
// CHANGELOG.md the old side of a migration ("old → new") and a Removed
// section are not checked, and neither is a history page
// (docs/*-history.md). A member is found among a type's fields, methods and
// interface methods, and those of the types it embeds or aliases; a member
// of a type from outside the project (an embedded context.Context) is taken
// on trust.
//
// Exported identifiers are read with go/parser from every package's non-test
// source files, so the test needs nothing beyond the standard library and
// sees every module of the workspace.
func TestDocsNameOnlyExistingIdentifiers(t *testing.T) {
	t.Parallel()
	root := "."
	idx := indexPackages(t, root)
	for _, must := range []string{"errand", "driver", "memorybroker", "memorybackend", "conformance"} {
		if len(idx.byName[must]) == 0 {
			t.Fatalf("package %s not found under %s: the doc-identifier test cannot read the workspace", must, root)
		}
	}

	var refs []docRef
	var failures []string
	for _, page := range markdownPages(t, root) {
		r, f := markdownRefs(t, idx, page)
		refs, failures = append(refs, r...), append(failures, f...)
	}
	for _, p := range idx.all {
		refs = append(refs, commentRefs(idx, p)...)
	}
	if len(refs) < 100 {
		t.Fatalf("found only %d references to project identifiers in the docs; the scanner is broken", len(refs))
	}

	seen := map[string]bool{} // one failure per name and line: [driver.X] is also driver.X
	for _, r := range refs {
		key := fmt.Sprintf("%s:%d:%s", r.file, r.line, strings.Join(r.names, "."))
		for _, p := range r.pkgs {
			key += ":" + p.path
		}
		if seen[key] {
			continue
		}
		if why := idx.check(r); why != "" {
			seen[key] = true
			failures = append(failures, fmt.Sprintf("%s:%d: names %s, %s", r.file, r.line, r.text, why))
		}
	}
	sort.Strings(failures)
	for _, f := range failures {
		t.Errorf("%s (docs name only identifiers that exist)", f)
	}
	t.Logf("checked %d references to project identifiers", len(refs))
}

// A docRef is one mention of a project identifier in a doc.
type docRef struct {
	file, text string // where, and the name as written
	line       int
	pkgs       []*docPkg // candidate packages (several share a name: main)
	names      []string  // Ident, or Type and Member
}

// A docPkg is one package directory's exported surface.
type docPkg struct {
	name, dir, path string
	top             map[string]bool // exported top-level names
	types           map[string]*docType
	files           []*ast.File
	fileNames       []string
}

// A docType is one declared type's members and what it inherits them from.
type docType struct {
	members map[string]bool
	from    []typeRef // embedded types, an alias's or a definition's underlying named type
	opaque  bool      // inherits from a type outside the project: any member is taken on trust
}

type typeRef struct {
	path, name string // import path ("" = same package) and type name
}

type docIndex struct {
	byName map[string][]*docPkg
	byPath map[string]*docPkg
	byDir  map[string]*docPkg
	all    []*docPkg
	fset   *token.FileSet
	re     *regexp.Regexp  // qualifiedPattern, once the packages are known
	tests  map[string]bool // every TestX, BenchmarkX, FuzzX and ExampleX of the workspace
	cases  map[string]bool // every case name the conformance kit's source spells ("Delay/NeverEarly", "Fault/WorkerKilled")
}

// indexPackages parses every non-test Go file under root, skipping hidden
// directories and testdata, and records each package's exported names.
func indexPackages(t *testing.T, root string) *docIndex {
	t.Helper()
	fset := token.NewFileSet()
	idx := &docIndex{byName: map[string][]*docPkg{}, byPath: map[string]*docPkg{}, byDir: map[string]*docPkg{}, fset: fset, tests: map[string]bool{}, cases: map[string]bool{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range testFuncPattern.FindAllSubmatch(src, -1) {
				idx.tests[string(m[1])] = true
			}
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		p := idx.byDir[dir]
		if p == nil {
			p = &docPkg{name: f.Name.Name, dir: dir, path: importPath(t, dir), top: map[string]bool{}, types: map[string]*docType{}}
			idx.byDir[dir] = p
			idx.byPath[p.path] = p
			idx.byName[p.name] = append(idx.byName[p.name], p)
			idx.all = append(idx.all, p)
		}
		p.files = append(p.files, f)
		p.fileNames = append(p.fileNames, path)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the workspace's Go files: %v", err)
	}
	for _, p := range idx.all {
		for _, f := range p.files {
			p.collect(f)
		}
	}
	idx.re = idx.qualifiedPattern()
	for _, p := range idx.byName["conformance"] {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && caseNamePattern.MatchString(v) {
						idx.cases[v] = true
					}
				}
				return true
			})
		}
	}
	return idx
}

// importPath derives dir's import path from the nearest go.mod above it.
func importPath(t *testing.T, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for line := range strings.Lines(string(data)) {
				if mod, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					rel, _ := filepath.Rel(d, abs)
					mod = strings.Trim(strings.TrimSpace(mod), `"`)
					if rel == "." {
						return mod
					}
					return mod + "/" + filepath.ToSlash(rel)
				}
			}
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

func (p *docPkg) typ(name string) *docType {
	ty := p.types[name]
	if ty == nil {
		ty = &docType{members: map[string]bool{}}
		p.types[name] = ty
	}
	return ty
}

// collect records f's exported top-level names, methods and fields.
func (p *docPkg) collect(f *ast.File) {
	imports := fileImports(f)
	ref := func(e ast.Expr) (typeRef, bool) { return typeRefOf(e, imports) }
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				if d.Name.IsExported() {
					p.top[d.Name.Name] = true
				}
				continue
			}
			if r, ok := ref(d.Recv.List[0].Type); ok && r.path == "" {
				p.typ(r.name).members[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							p.top[n.Name] = true
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						// Unexported types still carry members that
						// exported types embedding them promote.
						p.typ(s.Name.Name)
					} else {
						p.top[s.Name.Name] = true
					}
					ty := p.typ(s.Name.Name)
					switch u := s.Type.(type) {
					case *ast.StructType:
						p.fields(ty, u.Fields, ref)
					case *ast.InterfaceType:
						p.fields(ty, u.Methods, ref)
					default:
						if r, ok := ref(s.Type); ok {
							ty.from = append(ty.from, r)
						}
					}
				}
			}
		}
	}
}

// fields records a struct's fields or an interface's methods, and what they
// embed.
func (p *docPkg) fields(ty *docType, list *ast.FieldList, ref func(ast.Expr) (typeRef, bool)) {
	for _, fld := range list.List {
		for _, n := range fld.Names {
			ty.members[n.Name] = true
		}
		if len(fld.Names) > 0 {
			continue
		}
		r, ok := ref(fld.Type)
		if !ok {
			ty.opaque = true // an embedded constraint or an odd type: trust it
			continue
		}
		ty.members[r.name] = true // an embedded type is also a field
		if r.path == "" && r.name == "error" {
			ty.members["Error"] = true
			continue
		}
		ty.from = append(ty.from, r)
	}
}

func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = path
	}
	return m
}

// typeRefOf names the named type e refers to, through pointers and type
// arguments.
func typeRefOf(e ast.Expr, imports map[string]string) (typeRef, bool) {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return typeRef{name: x.Name}, true
		case *ast.SelectorExpr:
			pkg, ok := x.X.(*ast.Ident)
			if !ok {
				return typeRef{}, false
			}
			path, ok := imports[pkg.Name]
			if !ok {
				return typeRef{}, false
			}
			return typeRef{path: path, name: x.Sel.Name}, true
		default:
			return typeRef{}, false
		}
	}
}

// hasMember reports whether type name of p has member m, or whether that
// cannot be known (a type from outside the project).
func (idx *docIndex) hasMember(p *docPkg, name, m string, depth int) bool {
	ty := p.types[name]
	if ty == nil {
		// A predeclared or unknown type, or a var/func/const: trust it.
		return true
	}
	if ty.members[m] || ty.opaque || depth > 10 {
		return true
	}
	for _, r := range ty.from {
		q := p
		if r.path != "" {
			q = idx.byPath[r.path]
			if q == nil {
				return true // outside the project
			}
		} else if _, declared := p.types[r.name]; !declared {
			return true // a predeclared type
		}
		if idx.hasMember(q, r.name, m, depth+1) {
			return true
		}
	}
	return false
}

// check returns why r names nothing, or "" if it names something.
func (idx *docIndex) check(r docRef) string {
	var why string
	var owners []string
	for _, p := range r.pkgs {
		if !p.top[r.names[0]] {
			why = fmt.Sprintf("but package %s (%s) declares no %s", p.name, p.path, r.names[0])
			continue
		}
		if len(r.names) == 1 {
			return ""
		}
		if _, isType := p.types[r.names[0]]; !isType || idx.hasMember(p, r.names[0], r.names[1], 0) {
			return ""
		}
		owners = append(owners, p.name+"."+r.names[0])
		why = fmt.Sprintf("but %s has no field or method %s", strings.Join(owners, " nor "), r.names[1])
	}
	return why
}

// markdownPages lists the pages the promise covers.
func markdownPages(t *testing.T, root string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for _, p := range all {
		if !strings.HasSuffix(p, "-history.md") {
			pages = append(pages, p)
		}
	}
	for _, name := range []string{"README.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			pages = append(pages, filepath.Join(root, name))
		}
	}
	if len(pages) < 3 {
		t.Fatalf("found only %v under %s: the doc-identifier test cannot read the pages", pages, root)
	}
	return pages
}

// qualifiedPattern matches pkg.Ident and pkg.Type.Member for every
// project package name, not preceded by a letter, digit, dot or dash (so
// go-redis.X and a.errand.X are not mistaken for them).
func (idx *docIndex) qualifiedPattern() *regexp.Regexp {
	var names []string
	for n := range idx.byName {
		if n != "main" {
			names = append(names, regexp.QuoteMeta(n))
		}
	}
	slices.Sort(names)
	return regexp.MustCompile(`(?:^|[^\w.\-])(` + strings.Join(names, "|") + `)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
}

// qualifiedRefs finds pkg.Ident and pkg.Type.Member in one line of text.
func (idx *docIndex) qualifiedRefs(file string, line int, text string) []docRef {
	var refs []docRef
	for _, m := range idx.re.FindAllStringSubmatch(text, -1) {
		r := docRef{file: file, line: line, pkgs: idx.byName[m[1]], names: []string{m[2]}, text: m[1] + "." + m[2]}
		if m[3] != "" {
			r.names = append(r.names, m[3])
			r.text += "." + m[3]
		}
		refs = append(refs, r)
	}
	return refs
}

// typeMemberPattern matches an unqualified Type.Member, not preceded by a
// letter, digit, dot or dash (a qualified name is the other pattern's).
var typeMemberPattern = regexp.MustCompile(`(?:^|[^\w.\-])([A-Z]\w*)\.([A-Z]\w*)`)

// foreignOwner matches a possessive just before a name: "asynq's `".
var foreignOwner = regexp.MustCompile("(\\w+)'s [`*_]*$")

// typeMemberRefs finds Type.Member in one line of text where Type is the
// name of a type some project package declares; the member may belong to
// any of them (Options.Logger is several drivers' field). A Type no project
// package declares (Client.Do) is another library's and is not checked, and
// neither is one after another library's possessive (asynq's Config.Queues).
func (idx *docIndex) typeMemberRefs(file string, line int, text string) []docRef {
	var refs []docRef
	for _, loc := range typeMemberPattern.FindAllStringSubmatchIndex(text, -1) {
		m := []string{text[loc[2]:loc[3]], text[loc[4]:loc[5]]}
		if owner := foreignOwner.FindStringSubmatch(text[:loc[2]]); owner != nil && owner[1] != "errand" {
			continue
		}
		var pkgs []*docPkg
		for _, p := range idx.all {
			if _, ok := p.types[m[0]]; ok && p.top[m[0]] {
				pkgs = append(pkgs, p)
			}
		}
		if len(pkgs) > 0 {
			refs = append(refs, docRef{file: file, line: line, pkgs: pkgs, names: []string{m[0], m[1]}, text: m[0] + "." + m[1]})
		}
	}
	return refs
}

var (
	testFuncPattern = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	caseNamePattern = regexp.MustCompile(`^[A-Z]\w*(/[A-Z]\w*)*$`)
	placeholderTest = regexp.MustCompile(`^(TestMain|(Test|Benchmark|Fuzz)[A-Z])$`)
	// A test named in a page: TestX, BenchmarkX or FuzzX.
	testRefPattern = regexp.MustCompile(`(?:^|[^\w.])((?:Test|Benchmark|Fuzz)[A-Z]\w*)`)
	// A conformance kit case named in a page with its group: Broker/Delay/NeverEarly.
	caseRefPattern = regexp.MustCompile(`(?:^|[^\w./-])((Broker|Backend|Worker|Fault)/([A-Z]\w*(?:/[A-Z]\w*)*))`)
)

// testAndCaseFailures checks that the tests and conformance kit cases a
// page names (as the reliability page names what holds each promise to
// it) exist: a test function somewhere in the workspace, a case whose name
// the kit's source spells (Worker/Retry/Later is the Worker group's case
// "Retry/Later"; Broker/Delay is the group of its Delay/ cases).
func (idx *docIndex) testAndCaseFailures(page string, n int, line string) []string {
	var out []string
	for _, m := range testRefPattern.FindAllStringSubmatch(line, -1) {
		if placeholderTest.MatchString(m[1]) {
			continue // TestMain is Go's; TestX a placeholder
		}
		if !idx.tests[m[1]] {
			out = append(out, fmt.Sprintf("%s:%d: names the test %s, which no _test.go file of the workspace declares", page, n, m[1]))
		}
	}
	for _, m := range caseRefPattern.FindAllStringSubmatch(line, -1) {
		if idx.cases[m[1]] || idx.cases[m[3]] {
			continue
		}
		group := false
		for c := range idx.cases {
			group = group || strings.HasPrefix(c, m[3]+"/") || strings.HasPrefix(c, m[1]+"/")
		}
		if !group {
			out = append(out, fmt.Sprintf("%s:%d: names the conformance case %s, which the kit does not have", page, n, m[1]))
		}
	}
	return out
}

// markdownRefs finds the project identifiers one page names, and the
// tests and kit cases it names that do not exist.
func markdownRefs(t *testing.T, idx *docIndex, page string) ([]docRef, []string) {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	changelog := filepath.Base(page) == "CHANGELOG.md"
	var refs []docRef
	var failures []string
	var block []string // the Go code block being read, if any
	inBlock, goBlock, blockStart, removed := false, false, 0, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if changelog {
			if !inBlock && strings.HasPrefix(line, "#") {
				removed = strings.Contains(strings.ToLower(line), "removed")
			}
			if removed {
				continue
			}
			if i := lastArrow(line); i >= 0 {
				line = line[i:] // "old → new": only the new name must exist
			}
		}
		if fence, ok := strings.CutPrefix(strings.TrimSpace(line), "```"); ok {
			if !inBlock {
				inBlock, goBlock, blockStart, block = true, fence == "go", n+1, nil
			} else {
				if goBlock {
					refs = append(refs, literalRefs(idx, page, blockStart, strings.Join(block, "\n"))...)
				}
				inBlock = false
			}
			continue
		}
		if inBlock {
			block = append(block, line)
		}
		refs = append(refs, idx.qualifiedRefs(page, n, line)...)
		refs = append(refs, idx.typeMemberRefs(page, n, line)...)
		failures = append(failures, idx.testAndCaseFailures(page, n, line)...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return refs, failures
}

// lastArrow returns where the text after a line's last migration arrow
// (→, ->, =>) begins, or -1.
func lastArrow(line string) int {
	at := -1
	for _, arrow := range []string{"→", "->", "=>"} {
		if i := strings.LastIndex(line, arrow); i >= 0 && i+len(arrow) > at {
			at = i + len(arrow)
		}
	}
	return at
}

// literalRefs finds the field keys of composite literals pkg.Type{Key: ...}
// in a Go code block, parsed as a file if it is one, or else as statements
// or declarations; a block that does not parse is left to the line scan.
func literalRefs(idx *docIndex, page string, firstLine int, src string) []docRef {
	fset := token.NewFileSet()
	var f *ast.File
	offset := 0 // lines the wrapper adds before the block
	for _, try := range []struct {
		head, tail string
		lines      int
	}{{"", "", 0}, {"package p\n", "", 1}, {"package p\nfunc _() {\n", "\n}", 2}} {
		var err error
		if f, err = parser.ParseFile(fset, "", try.head+src+try.tail, 0); err == nil {
			offset = try.lines
			break
		}
	}
	if f == nil {
		return nil
	}
	var refs []docRef
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok || len(idx.byName[pkg.Name]) == 0 || pkg.Name == "main" {
			return true
		}
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok || !key.IsExported() {
				continue
			}
			refs = append(refs, docRef{
				file:  page,
				line:  firstLine + fset.Position(key.Pos()).Line - 1 - offset,
				pkgs:  idx.byName[pkg.Name],
				names: []string{sel.Sel.Name, key.Name},
				text:  pkg.Name + "." + sel.Sel.Name + "{" + key.Name + ": ...}",
			})
		}
		return true
	})
	return refs
}

// commentRefs finds the project identifiers p's doc comments name: the
// package doc and the docs of declarations, specs, fields and interface
// methods (not the comments inside function bodies).
func commentRefs(idx *docIndex, p *docPkg) []docRef {
	var refs []docRef
	for i, f := range p.files {
		file := p.fileNames[i]
		imports := fileImports(f)
		var groups []*ast.CommentGroup
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.File:
				groups = append(groups, x.Doc)
			case *ast.FuncDecl:
				groups = append(groups, x.Doc)
				return false // a body's comments are not docs
			case *ast.GenDecl:
				groups = append(groups, x.Doc)
			case *ast.TypeSpec:
				groups = append(groups, x.Doc, x.Comment)
			case *ast.ValueSpec:
				groups = append(groups, x.Doc, x.Comment)
				return false
			case *ast.Field:
				groups = append(groups, x.Doc, x.Comment)
			}
			return true
		})
		parser := &comment.Parser{
			LookupPackage: func(name string) (string, bool) {
				if path, ok := imports[name]; ok {
					return path, true
				}
				if ps := idx.byName[name]; len(ps) == 1 && name != "main" {
					return ps[0].path, true
				}
				return "", false
			},
			// Every [Name] and [Recv.Name] is a link to check.
			LookupSym: func(recv, name string) bool { return true },
		}
		for _, g := range groups {
			if g == nil {
				continue
			}
			lines, nums := commentLines(idx.fset, g)
			for j, l := range lines {
				refs = append(refs, idx.qualifiedRefs(file, nums[j], l)...)
				refs = append(refs, idx.typeMemberRefs(file, nums[j], l)...)
			}
			refs = append(refs, linkRefs(idx, p, parser, file, lines, nums)...)
		}
	}
	return refs
}

// commentLines returns g's text lines without comment markers, as
// go/doc/comment expects them, with each line's number in the file.
func commentLines(fset *token.FileSet, g *ast.CommentGroup) (lines []string, nums []int) {
	for _, c := range g.List {
		line := fset.Position(c.Slash).Line
		if body, ok := strings.CutPrefix(c.Text, "//"); ok {
			if strings.HasPrefix(body, "go:") || strings.HasPrefix(body, "line ") {
				continue
			}
			lines = append(lines, strings.TrimPrefix(body, " "))
			nums = append(nums, line)
			continue
		}
		body := strings.TrimSuffix(strings.TrimPrefix(c.Text, "/*"), "*/")
		for k, l := range strings.Split(body, "\n") {
			lines = append(lines, l)
			nums = append(nums, line+k)
		}
	}
	return lines, nums
}

// linkRefs finds the doc links of one comment that point into the project:
// [Name] and [Recv.Name] in p itself, [pkg.Name] and [pkg.Recv.Name] in the
// package pkg names. Each is placed on the first line, from the previous
// link's on, that holds its bracketed text.
func linkRefs(idx *docIndex, p *docPkg, parser *comment.Parser, file string, lines []string, nums []int) []docRef {
	var links []*comment.DocLink
	var walk func(texts []comment.Text)
	walk = func(texts []comment.Text) {
		for _, t := range texts {
			switch x := t.(type) {
			case *comment.DocLink:
				links = append(links, x)
			case *comment.Link:
				walk(x.Text)
			case *comment.Italic, comment.Plain:
			}
		}
	}
	doc := parser.Parse(strings.Join(lines, "\n"))
	var blocks func(bs []comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch x := b.(type) {
			case *comment.Paragraph:
				walk(x.Text)
			case *comment.Heading:
				walk(x.Text)
			case *comment.List:
				for _, it := range x.Items {
					blocks(it.Content)
				}
			}
		}
	}
	blocks(doc.Content)

	var refs []docRef
	from := 0
	for _, l := range links {
		target := p
		pkgName := ""
		if l.ImportPath != "" {
			target = idx.byPath[l.ImportPath]
			if target == nil {
				continue // a link outside the project
			}
			pkgName = target.name + "."
		}
		if l.Name == "" {
			continue // a link to a package
		}
		r := docRef{file: file, pkgs: []*docPkg{target}, names: []string{l.Name}, text: "[" + pkgName + l.Name + "]"}
		written := l.Name
		if l.Recv != "" {
			r.names = []string{l.Recv, l.Name}
			r.text = "[" + pkgName + l.Recv + "." + l.Name + "]"
			written = l.Recv + "." + l.Name
		}
		r.line = nums[0]
		for k := from; k < len(lines); k++ {
			if strings.Contains(lines[k], written+"]") {
				r.line, from = nums[k], k
				break
			}
		}
		refs = append(refs, r)
	}
	return refs
}

// TestDocsDriverTables keeps the promise that the tables of errand's
// drivers say what the code does. Every table of a page (README.md,
// docs/*.md) with an "import path" column, and the table of the root
// package doc (doc.go), is a drivers table: each row names a driver of the
// workspace (a package that registers URL schemes with
// driver.RegisterBroker or driver.RegisterBackend), and every such driver
// has exactly one row. Of each row:
//
//   - the "package" column is the package's name;
//   - the "URL schemes" column (`redis://`, ...) is exactly the set of
//     schemes the package registers, read from the registration calls;
//   - the "constructor" column holds the constructors' signatures as go
//     doc prints them (`New(opts *Options) *Broker`, "func " optional),
//     each one the package declares, the package's New among them.
//
// README.md and docs/drivers.md must each have a drivers table with all
// four columns. And no driver imports the root package errand, as
// docs/drivers.md says ("errand wraps drivers"). The driver packages are
// read with go/parser from the repository's files, so no module needs
// building and no server is used.
func TestDocsDriverTables(t *testing.T) {
	t.Parallel()
	root := "."
	drivers := workspaceDrivers(t, root)
	if len(drivers) < 8 {
		t.Fatalf("found only %d driver packages registering URL schemes under %s: the drivers-table test cannot read the workspace", len(drivers), root)
	}
	var tables []driverTable
	for _, page := range markdownPages(t, root) {
		tables = append(tables, markdownDriverTables(t, page)...)
	}
	tables = append(tables, packageDocDriverTables(t, filepath.Join(root, "doc.go"))...)

	full := []string{"import path", "package", "url schemes", "constructor"}
	for _, page := range []string{"README.md", filepath.Join("docs", "drivers.md")} {
		page = filepath.Join(root, page)
		if !slices.ContainsFunc(tables, func(tb driverTable) bool {
			return tb.file == page && !slices.ContainsFunc(full, func(c string) bool { return !slices.Contains(tb.columns, c) })
		}) {
			t.Errorf("%s has no drivers table with the columns import path, package, URL schemes and constructor (docs state each driver's constructor and schemes, checked against the code)", page)
		}
	}
	for _, tb := range tables {
		for _, f := range tb.check(drivers) {
			t.Errorf("%s (a drivers table must match the code)", f)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(drivers)) {
		if d := drivers[path]; d.rootImport != "" {
			t.Errorf("%s: the driver %s imports the root package errand, but docs/drivers.md says a driver never does (errand wraps drivers)", d.rootImport, path)
		}
	}
	t.Logf("checked %d drivers tables against %d drivers", len(tables), len(drivers))
}

// A docDriver is what one driver package's source says about it.
type docDriver struct {
	path, name string
	schemes    map[string]string // registered scheme → where (file:line)
	funcs      map[string]string // exported top-level New... function → its signature, "New(opts *Options) *Broker"
	rootImport string            // where a non-test file imports the root package errand, if one does
}

// workspaceDrivers finds, under root, every package whose non-test files
// call driver.RegisterBroker or driver.RegisterBackend, and reads its
// schemes and constructors.
func workspaceDrivers(t *testing.T, root string) map[string]*docDriver {
	t.Helper()
	const rootPath = "github.com/errand-go/errand"
	const driverPath = rootPath + "/driver"
	dirs := map[string][]string{} // dir → its non-test Go files
	var registering []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		dirs[dir] = append(dirs[dir], path)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), ".RegisterBroker(") || strings.Contains(string(src), ".RegisterBackend(") {
			if !slices.Contains(registering, dir) {
				registering = append(registering, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the workspace's Go files: %v", err)
	}
	out := map[string]*docDriver{}
	for _, dir := range registering {
		fset := token.NewFileSet()
		d := &docDriver{path: importPath(t, dir), schemes: map[string]string{}, funcs: map[string]string{}}
		consts := map[string]string{} // the package's string constants, for a scheme named by one
		var calls []*ast.CallExpr
		callFile := map[*ast.CallExpr]string{}
		for _, path := range dirs[dir] {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parsing %s: %v", path, err)
			}
			d.name = f.Name.Name
			imports := fileImports(f)
			for _, im := range f.Imports {
				if ip, _ := strconv.Unquote(im.Path.Value); ip == rootPath {
					d.rootImport = fmt.Sprintf("%s:%d", filepath.ToSlash(path), fset.Position(im.Pos()).Line)
				}
			}
			for _, decl := range f.Decls {
				switch x := decl.(type) {
				case *ast.FuncDecl:
					if x.Recv == nil && x.Name.IsExported() && strings.HasPrefix(x.Name.Name, "New") {
						var b strings.Builder
						if err := printer.Fprint(&b, fset, &ast.FuncDecl{Name: x.Name, Type: x.Type}); err != nil {
							t.Fatal(err)
						}
						d.funcs[x.Name.Name] = strings.TrimPrefix(b.String(), "func ")
					}
				case *ast.GenDecl:
					if x.Tok != token.CONST {
						continue
					}
					for _, spec := range x.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, n := range vs.Names {
							if i < len(vs.Values) {
								if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
									consts[n.Name], _ = strconv.Unquote(lit.Value)
								}
							}
						}
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "RegisterBroker" && sel.Sel.Name != "RegisterBackend") {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); ok && imports[pkg.Name] == driverPath {
					calls = append(calls, call)
					callFile[call] = path
				}
				return true
			})
		}
		for _, call := range calls {
			where := fset.Position(call.Pos())
			at := fmt.Sprintf("%s:%d", filepath.ToSlash(callFile[call]), where.Line)
			var scheme string
			switch arg := call.Args[0].(type) {
			case *ast.BasicLit:
				scheme, _ = strconv.Unquote(arg.Value)
			case *ast.Ident:
				scheme = consts[arg.Name]
			}
			if scheme == "" {
				t.Fatalf("%s: registers a scheme this test cannot read (a string literal or a constant of the package): teach workspaceDrivers to read it", at)
			}
			d.schemes[scheme] = at
		}
		if len(d.schemes) > 0 {
			out[d.path] = d
		}
	}
	return out
}

// A driverTable is one drivers table of a page or package doc.
type driverTable struct {
	file    string
	line    int      // its header's
	columns []string // lower-case headers; the package doc's table has import path, package and url schemes
	rows    []driverRow
}

// A driverRow is one row of a drivers table: each column's code spans
// (the package doc's: its words).
type driverRow struct {
	line  int
	cells map[string][]string
}

// markdownDriverTables finds the tables of page whose header has an
// "import path" column.
func markdownDriverTables(t *testing.T, page string) []driverTable {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var tables []driverTable
	var cur *driverTable
	inBlock := false
	for n, line := range slices.Collect(strings.Lines(string(data))) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
		}
		if inBlock || !strings.HasPrefix(line, "|") {
			if cur != nil {
				tables = append(tables, *cur)
				cur = nil
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cur == nil:
			// A header; a table without an import path column is not ours.
			var cols []string
			for _, c := range cells {
				cols = append(cols, strings.ToLower(c))
			}
			if slices.Contains(cols, "import path") {
				cur = &driverTable{file: page, line: n + 1, columns: cols}
			} else {
				cur = &driverTable{file: page, line: -1}
			}
		case cur.line < 0 || strings.Trim(line, "|-: ") == "":
			// another table's row, or the separator
		default:
			row := driverRow{line: n + 1, cells: map[string][]string{}}
			for i, c := range cells {
				if i < len(cur.columns) {
					row.cells[cur.columns[i]] = codeSpans(c)
				}
			}
			cur.rows = append(cur.rows, row)
		}
	}
	if cur != nil {
		tables = append(tables, *cur)
	}
	return slices.DeleteFunc(tables, func(tb driverTable) bool { return tb.line < 0 })
}

var codeSpanPattern = regexp.MustCompile("`([^`]+)`")

// codeSpans returns the contents of a table cell's code spans.
func codeSpans(cell string) []string {
	var out []string
	for _, m := range codeSpanPattern.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// packageDocDriverTables finds the drivers table of the package doc in
// file: its rows are the doc's lines that begin with an import path of the
// project, then the package name, then the URL schemes.
func packageDocDriverTables(t *testing.T, file string) []driverTable {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	if f.Doc == nil {
		t.Fatalf("%s has no package doc", file)
	}
	tb := driverTable{file: file, columns: []string{"import path", "package", "url schemes"}}
	lines, nums := commentLines(fset, f.Doc)
	for i, l := range lines {
		fields := strings.Fields(l)
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "github.com/errand-go/errand/") || !strings.Contains(fields[2], "://") {
			continue
		}
		row := driverRow{line: nums[i], cells: map[string][]string{"import path": {fields[0]}, "package": {fields[1]}}}
		for _, w := range fields[2:] {
			if w = strings.TrimSuffix(w, ","); strings.HasSuffix(w, "://") {
				row.cells["url schemes"] = append(row.cells["url schemes"], w)
			}
		}
		if tb.line == 0 {
			tb.line = nums[i]
		}
		tb.rows = append(tb.rows, row)
	}
	if len(tb.rows) == 0 {
		t.Fatalf("%s: the package doc has no drivers table (lines of import path, package, URL schemes)", file)
	}
	return []driverTable{tb}
}

// check returns how tb differs from the drivers' code.
func (tb driverTable) check(drivers map[string]*docDriver) []string {
	var out []string
	listed := map[string]int{}
	for _, r := range tb.rows {
		at := fmt.Sprintf("%s:%d", filepath.ToSlash(tb.file), r.line)
		paths := r.cells["import path"]
		if len(paths) != 1 {
			out = append(out, fmt.Sprintf("%s: a row's import path column holds %q, not one import path in a code span", at, paths))
			continue
		}
		d := drivers[paths[0]]
		if d == nil {
			out = append(out, fmt.Sprintf("%s: the row %s names no driver: no package at that import path registers a URL scheme", at, paths[0]))
			continue
		}
		if prev, ok := listed[d.path]; ok {
			out = append(out, fmt.Sprintf("%s: the row %s repeats the row of line %d", at, d.path, prev))
		}
		listed[d.path] = r.line
		row := d.path + " (" + d.name + ")"
		if slices.Contains(tb.columns, "package") {
			if got := r.cells["package"]; len(got) != 1 || got[0] != d.name {
				out = append(out, fmt.Sprintf("%s: the row %s says package %q, but the package is named %s", at, d.path, got, d.name))
			}
		}
		if slices.Contains(tb.columns, "url schemes") {
			var said []string
			for _, s := range r.cells["url schemes"] {
				scheme, ok := strings.CutSuffix(s, "://")
				if !ok {
					out = append(out, fmt.Sprintf("%s: the row %s lists %q among its URL schemes, which is not written scheme://", at, row, s))
					continue
				}
				said = append(said, scheme)
			}
			registered := slices.Sorted(maps.Keys(d.schemes))
			var where []string
			for _, s := range registered {
				where = append(where, d.schemes[s])
			}
			slices.Sort(said)
			if !slices.Equal(said, registered) {
				out = append(out, fmt.Sprintf("%s: the row %s lists the URL schemes %s, but the package registers %s (%s)%s",
					at, row, schemeList(said), schemeList(registered), strings.Join(where, ", "), schemeDiff(said, registered)))
			}
		}
		if slices.Contains(tb.columns, "constructor") {
			sigs := r.cells["constructor"]
			hasNew := false
			for _, s := range sigs {
				s = strings.Join(strings.Fields(strings.TrimPrefix(s, "func ")), " ")
				name, _, _ := strings.Cut(s, "(")
				hasNew = hasNew || name == "New"
				switch code, ok := d.funcs[name]; {
				case !ok:
					out = append(out, fmt.Sprintf("%s: the row %s gives the constructor %s, but the package declares no function %s", at, row, s, name))
				case code != s:
					out = append(out, fmt.Sprintf("%s: the row %s gives the constructor %s, but the package declares %s", at, row, s, code))
				}
			}
			if code, ok := d.funcs["New"]; ok && !hasNew {
				out = append(out, fmt.Sprintf("%s: the row %s does not give the package's constructor %s (a code span in its constructor column)", at, row, code))
			}
		}
	}
	var missing []string
	for path, d := range drivers {
		if _, ok := listed[path]; !ok {
			missing = append(missing, fmt.Sprintf("%s (%s, registering %s)", path, d.name, schemeList(slices.Sorted(maps.Keys(d.schemes)))))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		out = append(out, fmt.Sprintf("%s:%d: the drivers table has no row for %s", filepath.ToSlash(tb.file), tb.line, strings.Join(missing, "; ")))
	}
	return out
}

func schemeList(schemes []string) string {
	if len(schemes) == 0 {
		return "none"
	}
	return strings.Join(schemes, "://, ") + "://"
}

// schemeDiff says which schemes a row lacks and which it has too many.
func schemeDiff(said, registered []string) string {
	var lacks, extra []string
	for _, s := range registered {
		if !slices.Contains(said, s) {
			lacks = append(lacks, s)
		}
	}
	for _, s := range said {
		if !slices.Contains(registered, s) {
			extra = append(extra, s)
		}
	}
	var parts []string
	if len(lacks) > 0 {
		parts = append(parts, "the row lacks "+schemeList(lacks))
	}
	if len(extra) > 0 {
		parts = append(parts, "no registration for "+schemeList(extra))
	}
	return ": " + strings.Join(parts, "; ")
}
