package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// directCalls reach the device outside the batch (graph.go): a host copy,
// a memset or a wait on the default stream, a free, an event. Queued work
// must be submitted first, or the device would run them before work the ops
// asked for earlier.
var directCalls = map[string]bool{
	"cu.MemcpyHtoD": true, "cu.MemcpyDtoH": true, "cu.MemcpyDtoDAsync": true, "cu.MemsetD32": true,
	"cu.Synchronize": true, "cu.MemFree": true, "C.lbm_fetch_word": true, "Record": true,
}

// afterFlush are the functions that make direct calls without flushing
// themselves, each with why nothing queued can be pending.
var afterFlush = map[string]string{
	"batch.forget":       "called by flush and close",
	"pool.release":       "calls beforeFree (batch.flush) first",
	"hostWord.fetch":     "called by writeKVFP8 inside WriteKV's batch.direct",
	"kvStore.ExportKV":   "its copies run in onPages' callback, after its flush",
	"kvStore.ImportKV":   "its copies run in onPages' callback, after its flush",
	"kvStore.exportFP8":  "runs in onPages' callback, after its flush",
	"kvStore.importFP8":  "runs in onPages' callback, after its flush",
	"kvStore.hostScales": "called by exportFP8 and importFP8",
	"vmSpace.ensure":     "zeroes a page just mapped, which no queued op can use",
	"gpu.Close":          "batch.close flushes first",
	"cublasLt.tune":      "matmul flushes before tuning",
	"profile.wrap":       "profiling turns the batch off",
}

// TestDirectCallsFlushFirst: every function of the backend that reaches the
// device outside the batch either submits the queued work before (a call to
// flush or direct earlier in the function) or is listed in afterFlush with
// the reason nothing can be queued then. A new host copy without a flush
// would give wrong results only with CUDA graphs on, and only in the
// frames where work is queued, which no GPU test might hit.
func TestDirectCallsFlushFirst(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	used := map[string]bool{}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			id := funcID(fn)
			flushAt := token.NoPos
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				callee := calleeName(call.Fun)
				if (callee == "flush" || callee == "direct") && (flushAt == token.NoPos || call.Pos() < flushAt) {
					flushAt = call.Pos()
				}
				return true
			})
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !directCalls[qualified(call.Fun)] {
					return true
				}
				checked++
				if _, ok := afterFlush[id]; ok {
					used[id] = true
					return true
				}
				if flushAt == token.NoPos || flushAt > call.Pos() {
					t.Errorf("%s: %s calls %s without flushing the batch first (call g.flush() before it, or list %s in afterFlush with the reason nothing is queued)",
						fset.Position(call.Pos()), id, qualified(call.Fun), id)
				}
				return true
			})
		}
	}
	if checked == 0 {
		t.Fatal("no direct device calls found: the scan is broken")
	}
	var stale []string
	for id := range afterFlush {
		if !used[id] {
			stale = append(stale, id)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("afterFlush lists functions that make no direct call (remove them): %v", stale)
	}
}

// funcID is Type.method or func.
func funcID(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// qualified is "pkg.Func" for a package function and "Method" for a method
// value (x.Record → "Record").
func qualified(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "cu" || pkg.Name == "C") {
		return pkg.Name + "." + sel.Sel.Name
	}
	return sel.Sel.Name
}

func calleeName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}
