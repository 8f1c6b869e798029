package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// listLiterals writes to w, for every Go file under dirs, the string
// literals that are exactly a SQLSTATE of t, with the constant to use.
func listLiterals(w io.Writer, t *table, dirs []string) error {
	codes := t.lookup()
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != dir && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			if ast.IsGenerated(f) {
				return nil
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if c, ok := codes[s]; ok {
					fmt.Fprintf(w, "%s: %s wire.%s\n", fset.Position(lit.Pos()), lit.Value, c.name)
				}
				return true
			})
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
