// Package manifests reads the Kubernetes manifests under deploy/ as the
// typed objects of k8s.io/api, strictly: an unknown kind or field, or a
// field given twice, is an error. The manifest tests and the cluster
// end-to-end tests (which apply them) read them through it.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Object is one document of a manifest file.
type Object struct {
	File string // the file it came from
	Obj  runtime.Object
}

var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// Files returns the *.yaml files of dir, not those of its subdirectories,
// as kubectl apply -f dir takes them.
func Files(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "*.yaml"))
}

// Load decodes every document of every file.
func Load(files ...string) ([]Object, error) {
	var out []Object
	for _, f := range files {
		objs, err := load(f)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func load(file string) ([]Object, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		out = append(out, Object{File: file, Obj: obj})
	}
}

// stripComments drops the lines that are only a comment, so that a
// document of comments alone counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}
