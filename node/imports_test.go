package node_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The core stays free of middleware: of goroslib it may use the message
// structs as plain values, and it never imports a transport. node/tf, the
// transform tree, is plain data with no middleware.
func TestCoreImportsNoMiddleware(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			goroslib := strings.HasPrefix(path, "github.com/bluenviron/goroslib/")
			if goroslib && !strings.HasPrefix(path, "github.com/bluenviron/goroslib/v2/pkg/msgs/") ||
				strings.HasPrefix(path, "github.com/lingbotmap/lingbotmap/node/") && path != "github.com/lingbotmap/lingbotmap/node/tf" {
				t.Errorf("%s imports %s", f, path)
			}
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d source files found", checked)
	}
}
