// Command golayout prints, as JSON, how Go's encoding/json writes the Kubernetes core types that
// the upstream operator's worker hash marshals: for every struct type reachable from
// PodTemplateSpec and EnvVar, its fields in Go declaration order (embedded structs flattened),
// each with its JSON name, its type and its omitempty/omitzero options.
//
// `go run .` prints the layout, committed as crates/api/src/gojson/core.json; `go run . vectors`
// computes test vectors (see vectors.go). Both are run by hand when the pinned Kubernetes
// version changes; the README beside this file says how.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type field struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Opts string `json:"opts,omitempty"`
}

var (
	types   = map[string][]field{}
	pending []reflect.Type
	special = map[reflect.Type]string{
		reflect.TypeOf(resource.Quantity{}):   "quantity",
		reflect.TypeOf(intstr.IntOrString{}):  "intorstring",
		reflect.TypeOf(metav1.Time{}):         "time",
		reflect.TypeOf(metav1.MicroTime{}):    "time",
		reflect.TypeOf(metav1.FieldsV1{}):     "raw",
	}
	marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
)

func ref(t reflect.Type) string {
	if s, ok := special[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + ref(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		return "[]" + ref(t.Elem())
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("map key " + t.String())
		}
		return "map" + ref(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Struct:
		if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
			panic("unhandled json.Marshaler " + t.String())
		}
		if _, seen := types[t.Name()]; !seen {
			types[t.Name()] = nil
			pending = append(pending, t)
		}
		return "struct:" + t.Name()
	}
	panic("unhandled kind " + t.String())
}

func fields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, fields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		var o []string
		for _, opt := range strings.Split(opts, ",") {
			if opt == "omitempty" || opt == "omitzero" {
				o = append(o, opt)
			}
		}
		out = append(out, field{Name: name, Type: ref(f.Type), Opts: strings.Join(o, ",")})
	}
	return out
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "vectors" {
		vectors()
		return
	}
	roots := []string{ref(reflect.TypeOf(corev1.PodTemplateSpec{})), ref(reflect.TypeOf(corev1.EnvVar{}))}
	for len(pending) > 0 {
		t := pending[0]
		pending = pending[1:]
		if prev, ok := types[t.Name()]; ok && prev != nil {
			panic("two types named " + t.Name())
		}
		types[t.Name()] = fields(t)
	}
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Println("{")
	fmt.Printf("  \"source\": %q,\n", "k8s.io/api v0.34.3, k8s.io/apimachinery v0.34.3")
	r, _ := json.Marshal(roots)
	fmt.Printf("  \"roots\": %s,\n", r)
	fmt.Println("  \"types\": {")
	for i, n := range names {
		b, err := json.Marshal(types[n])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sep := ","
		if i == len(names)-1 {
			sep = ""
		}
		fmt.Printf("    %q: %s%s\n", n, b, sep)
	}
	fmt.Println("  }")
	fmt.Println("}")
}
