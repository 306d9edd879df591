package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// plugins is the repository's plugins directory: one plugin per folder.
const plugins = "../../plugins"

// schema is the chart's values.schema.json, decoded.
func schema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// at walks a decoded JSON document along keys.
func at(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("schema: no object at %q", k)
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("schema: no %q", strings.Join(keys, "."))
		}
	}
	return v
}

// pluginNames lists the plugins of the repository.
func pluginNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(plugins)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// argFields is PluginArgs, failing the test on an error.
func argFields(t *testing.T, plugin string) map[string]string {
	t.Helper()
	args, err := PluginArgs(plugins, plugin)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// schemaType is the JSON type a member's schema allows, following a $ref
// into the definitions; "any" when it does not say. null, which leaves an
// arg at its default, is left out.
func schemaType(t *testing.T, s map[string]any, member any) string {
	t.Helper()
	m, _ := member.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		return schemaType(t, s, at(t, s, "definitions", strings.TrimPrefix(ref, "#/definitions/")))
	}
	switch ty := m["type"].(type) {
	case string:
		return ty
	case []any:
		var types []string
		for _, x := range ty {
			if x != "null" {
				types = append(types, x.(string))
			}
		}
		return strings.Join(types, ",")
	}
	if alts, ok := m["anyOf"].([]any); ok && len(alts) > 0 {
		// One type for every alternative, or any.
		ty := schemaType(t, s, alts[0])
		for _, a := range alts[1:] {
			if schemaType(t, s, a) != ty {
				return "any"
			}
		}
		return ty
	}
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		if _, ok := enum[0].(string); ok {
			return "string"
		}
	}
	return "any"
}

// The chart's schema knows exactly the repository's plugins, and checks
// each one's args against the members of that plugin's args struct:
// a plugin added without its schema, or an arg added, renamed or retyped
// in one place only, fails here.
func TestSchemaMatchesPluginArgs(t *testing.T) {
	s := schema(t)
	names := pluginNames(t)
	var enum []string
	for _, p := range at(t, s, "definitions", "config", "properties", "plugin", "enum").([]any) {
		enum = append(enum, p.(string))
	}
	if !slices.Equal(enum, names) {
		t.Errorf("the schema's plugins are %q, the repository's %q", enum, names)
	}
	for _, p := range names {
		t.Run(p, func(t *testing.T) {
			want := argFields(t, p)
			def := at(t, s, "definitions", "args-"+p).(map[string]any)
			if def["additionalProperties"] != false {
				t.Errorf("args-%s allows unknown args", p)
			}
			props := def["properties"].(map[string]any)
			got := map[string]string{}
			for name, member := range props {
				got[name] = schemaType(t, s, member)
			}
			for name, ty := range want {
				switch g, ok := got[name]; {
				case !ok:
					t.Errorf("args-%s lacks %s (%s)", p, name, ty)
				case ty != "any" && g != ty:
					t.Errorf("args-%s: %s is %s in the schema, %s in the plugin", p, name, g, ty)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("args-%s has %s, which the plugin does not take", p, name)
				}
			}
		})
	}
}

// pluginBin is where the plugin binaries under test are: CDI_TEST_BIN_DIR
// (make test), or a fresh build.
func pluginBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CDI_TEST_BIN_DIR"); dir != "" {
		return dir
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", plugins+"/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the plugins: %v\n%s", err, out)
	}
	return dir
}

// pluginAccepts runs the plugin binary's INFO with the config on an empty
// host, and reports whether it took the config: any answer but code 101
// (an invalid config).
func pluginAccepts(t *testing.T, bin string, config []byte) (bool, string) {
	t.Helper()
	var c struct{ Plugin string }
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"sys/class", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(bin, c.Plugin))
	cmd.Env = []string{"CDI_COMMAND=INFO", "CDI_HOST_ROOT=" + root, "CDI_STATE_DIR=" + filepath.Join(root, "state"), "CDI_PATH=" + bin}
	cmd.Stdin = strings.NewReader(string(config))
	out, _ := cmd.Output()
	var answer struct{ Code int }
	_ = json.Unmarshal(out, &answer)
	return answer.Code != 101, string(out)
}

// The chart refuses a type's config exactly when its plugin would: each
// config goes both to helm template and to the plugin binary's INFO.
func TestChartJudgesArgsAsThePlugin(t *testing.T) {
	if os.Getenv("CDI_TEST_HELM") == "" {
		t.Skip("CDI_TEST_HELM is not set: make test builds helm (test/k8s/build-tools.sh helm) and sets it")
	}
	bin := pluginBin(t)
	tty := func(args string) string {
		return `{"cdiVersion":"0.0.2","name":"t","type":"probe","plugin":"generic-tty","args":` + args + `}`
	}
	gpu := func(args string) string {
		return `{"cdiVersion":"0.0.2","name":"g","type":"probe","plugin":"drm","args":` + args + `}`
	}
	vf := func(args string) string {
		return `{"cdiVersion":"0.0.2","name":"v","type":"probe","plugin":"sriov","args":` + args + `}`
	}
	kvm := func(shares string) string {
		return `{"cdiVersion":"0.0.2","name":"k","type":"probe","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":` + shares + `}]}}`
	}
	for _, tc := range []struct {
		config string
		ok     bool
	}{
		{tty(`{"num_system_reserved":12}`), true},
		{tty(`{"num_system_reserve":12}`), false},
		{tty(`{"num_system_reserved":-1}`), false},
		{tty(`{"num_system_reserved":"12"}`), false},
		{tty(`{"pattern":"ttyS*","numa_policy":"strict"}`), true},
		{tty(`{"pattern":"tty/S"}`), false},
		{tty(`{"numa_policy":"loose"}`), false},
		{tty(`{"cdi_spec":{"kind":"example.com/tty"}}`), true},
		{tty(`{"cdi_spec":{"kind":"tty"}}`), false},
		{tty(`{"cdi_spec":{"kind":"example.com/tty","dir":"run/cdi"}}`), false},
		{tty(`null`), true},
		{gpu(`{"want_device_nodes":["primary","render"],"vendorid_whitelist":["0x10de"],"pci_addresses":["0000:03:00.0"]}`), true},
		{gpu(`{"want_device_nodes":["primary","primary"]}`), false},
		{gpu(`{"want_device_nodes":[]}`), true},
		{gpu(`{"want_device_nodes":[],"companion_nodes":"none"}`), false},
		{gpu(`{"want_device_nodes":["vfio"]}`), true},
		{gpu(`{"want_device_nodes":["iommufd"],"companion_nodes":"none"}`), true},
		{gpu(`{"want_device_nodes":["vfio","render"]}`), false},
		{gpu(`{"want_device_nodes":["display"]}`), false},
		{gpu(`{"mode":"drm"}`), true},
		{gpu(`{"mode":"drm","want_device_nodes":["render"]}`), true},
		{gpu(`{"mode":"drm","want_device_nodes":[]}`), false},
		{gpu(`{"mode":"drm","want_device_nodes":["vfio"]}`), false},
		{gpu(`{"mode":"nvidia-compute"}`), true},
		{gpu(`{"mode":"nvidia-compute","want_device_nodes":[]}`), true},
		{gpu(`{"mode":"nvidia-compute","want_device_nodes":["render"]}`), false},
		{gpu(`{"mode":"nvidia-compute","companion_nodes":"none"}`), false},
		{gpu(`{"mode":"","want_device_nodes":[],"companion_nodes":"none"}`), false},
		{gpu(`{"mode":"vfio"}`), true},
		{gpu(`{"mode":"vfio","want_device_nodes":["vfio"]}`), true},
		{gpu(`{"mode":"vfio","want_device_nodes":["iommufd"]}`), false},
		{gpu(`{"mode":"vfio","want_device_nodes":[]}`), false},
		{gpu(`{"mode":"iommufd","companion_nodes":"none"}`), true},
		{gpu(`{"mode":"iommufd","want_device_nodes":["primary"]}`), false},
		{gpu(`{"mode":"compute"}`), false},
		{gpu(`{"vendorid_whitelist":["10de"]}`), false},
		{gpu(`{"pci_addresses":["03:00.0"]}`), false},
		{gpu(`{"companion_nodes":"none"}`), true},
		{gpu(`{"companion_nodes":"all"}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"],"num_vfs":4,"delegate":{"plugin":"drm","args":{"want_device_nodes":["render"]}},"setup_timeout":"30s"}`), true},
		{vf(`{"pf_pci_addresses":["0000:3b:00.0"],"num_vfs":2,"setup_timeout":"15"}`), true},
		{vf(`{"num_vfs":4}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"]}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"],"num_vfs":0}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"],"num_vfs":1,"setup_timeout":"soon"}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"],"num_vfs":1,"delegate":{"plugin":"../drm"}}`), false},
		{vf(`{"pf_vendorid_whitelist":["0x8086"],"num_vfs":1,"vf_driver":"a/b"}`), false},
		{kvm(`8`), true},
		{kvm(`1024`), true},
		{kvm(`"unlimited"`), true},
		{kvm(`0`), false},
		{kvm(`1025`), false},
		{kvm(`"8"`), false},
		{kvm(`"Unlimited"`), false},
		{kvm(`true`), false},
	} {
		plugin, perr := pluginAccepts(t, bin, []byte(tc.config))
		// A type of its own: the defaults' args would merge into a
		// default type's.
		out, err := template(t, "--set-json=types.probe.config="+tc.config)
		chartOK := err == nil
		if plugin != tc.ok || chartOK != tc.ok {
			t.Errorf("%s: the plugin says %v (%s), the chart %v (%v), want %v\n%.300s", tc.config, plugin, strings.TrimSpace(perr), chartOK, err, tc.ok, out)
		}
	}
}

// What cannot work is refused before it reaches a node: a misspelt arg,
// an unknown plugin, an unsupported cdiVersion, a type key that is no
// lower-case DNS label (and resource type); and a default type is removed
// by setting it to null.
func TestChartRefusesWhatCannotWork(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{[]string{"types.tty.config.args.num_system_reserve=12"}, "num_system_reserve"},
		{[]string{"types.tty.config.plugin=generic_tty"}, "/types/tty/config/plugin"},
		{[]string{"types.tty.config.cdiVersion=0.0.3"}, "/types/tty/config/cdiVersion"},
		{[]string{`--set-json=types.GPU={"config":{"cdiVersion":"0.0.2","name":"g","type":"GPU","plugin":"drm"}}`}, "GPU"},
		{[]string{`--set-json=types.my-gpu={"config":{"cdiVersion":"0.0.2","name":"g","type":"my-gpu","plugin":"drm"}}`}, "my-gpu"},
		{[]string{`--set-json=types.gpu2x={"config":{"cdiVersion":"0.0.2","type":"gpu2x","plugin":"drm"}}`}, "name"},
		{[]string{"types.gpu.config.args.want_device_nodes={}"}, "want_device_nodes"},
	} {
		out, err := template(t, tt.values...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s\n%.300s", tt.values, err, tt.want, out)
		}
		lint := []string{"lint", "--strict", chart}
		for _, v := range tt.values {
			if strings.HasPrefix(v, "--") {
				lint = append(lint, v)
			} else {
				lint = append(lint, "--set", v)
			}
		}
		if _, err := helm(t, lint...); err == nil {
			t.Errorf("%v: helm lint passes", tt.values)
		}
	}

	// types.gpu=null removes the default gpu type: its config and its
	// DeviceClass are gone, the tty's stay.
	objs := rendering(t, "types.gpu=null")
	var classes []string
	for _, o := range objs {
		switch o := o.Obj.(type) {
		case *resourceapi.DeviceClass:
			classes = append(classes, o.Name)
		case *corev1.ConfigMap:
			if _, ok := o.Data["gpu.conf"]; ok {
				t.Errorf("types.gpu=null left the gpu config: %v", o.Data)
			}
			if _, ok := o.Data["tty.conf"]; !ok {
				t.Errorf("types.gpu=null took the tty config too: %v", o.Data)
			}
		}
	}
	if want := []string{"tty.cdi-exec.io"}; !slices.Equal(classes, want) {
		t.Errorf("DeviceClasses with types.gpu=null: %q, want %q", classes, want)
	}
	// A default arg goes the same way.
	objs = rendering(t, "types.tty.config.args.num_system_reserved=null", "types.tty.config.args.pattern=ttyS")
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok && (strings.Contains(cm.Data["tty.conf"], "num_system_reserved") || !strings.Contains(cm.Data["tty.conf"], `"pattern": "ttyS"`)) {
			t.Errorf("num_system_reserved=null: %s", cm.Data["tty.conf"])
		}
	}
	if _, err := template(t, "types.gpu=null", "types.tty=null"); err == nil {
		t.Error("no type at all renders")
	}
}

// The chart's default tty config is the one conf/ installs on a node.
func TestChartDefaultsAgreeWithConf(t *testing.T) {
	objs := rendering(t)
	for _, o := range objs {
		cm, ok := o.Obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		for _, typ := range []string{"tty", "gpu"} {
			files, err := filepath.Glob(filepath.Join("../../conf", typ+".d", "*.conf"))
			if err != nil || len(files) != 1 {
				t.Fatalf("conf/%s.d: %v %v", typ, files, err)
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var want, got struct {
				CDIVersion, Name, Type, Plugin string
				Args                           map[string]any
			}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(cm.Data[typ+".conf"]), &got); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.Args) != fmt.Sprint(want.Args) || got.Plugin != want.Plugin || got.Type != want.Type {
				t.Errorf("the chart's %s config %+v is not conf/'s %+v", typ, got, want)
			}
		}
	}
}
