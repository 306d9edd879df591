package manifests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
)

// PluginArgs reads the args struct of the plugin in dir/plugin (type args
// struct in its package) from its Go source: each field's JSON name and
// the JSON type its Go type decodes from ("string", "integer", "boolean",
// "array", "object", or "any"), with the cdi_spec object every pool
// plugin takes without declaring it (pool.Args). The struct is the one
// source of a plugin's args: the chart's schema and the docs are checked
// against it.
func PluginArgs(dir, plugin string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, plugin, "*.go"))
	if err != nil {
		return nil, err
	}
	var found *ast.StructType
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "args" {
				found, _ = ts.Type.(*ast.StructType)
			}
			return found == nil
		})
	}
	if found == nil {
		return nil, fmt.Errorf("plugins/%s has no type args struct", plugin)
	}
	out := map[string]string{}
	for _, f := range found.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = jsonType(f.Type)
	}
	out["cdi_spec"] = "object"
	return out, nil
}

// jsonType is the JSON type that a field of Go type e decodes from.
func jsonType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return jsonType(e.X)
	case *ast.ArrayType:
		return "array"
	case *ast.MapType:
		return "object"
	case *ast.SelectorExpr:
		if e.Sel.Name == "RawMessage" {
			return "any"
		}
	case *ast.Ident:
		switch e.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int64", "int32", "uint", "uint32", "uint64":
			return "integer"
		case "float64":
			return "number"
		}
		return "object" // a struct of the package
	}
	return "any"
}
