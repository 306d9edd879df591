package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/internal/chardev"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// parse runs the args through what newPlugin does with them.
func parse(argsJSON string) (config, error) {
	var a args
	if _, err := pool.Args(protocol.Config{Args: []byte(argsJSON)}, &a); err != nil {
		return config{}, skel.ArgsError(err)
	}
	return a.validate()
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name, args string
		err        string // "" for success; else the start of the details
	}{
		{"kvm shared", `{"rules":[{"paths":["/dev/kvm"],"shares":3,"permissions":"rw"}]}`, ""},
		{"serial by serial", `{"rules":[{"paths":["/dev/ttyUSB*","/dev/ttyACM*"],"usb":{"vendor":"1A86","product":"0x7523","serial":"A1"}}]}`, ""},
		{"camera per usb", `{"rules":[{"class":"video4linux","names":["video*"],"group":"usb"}],"numa_policy":"strict"}`, ""},
		{"with cdi_spec", `{"rules":[{"paths":["/dev/fuse"]}],"cdi_spec":{"kind":"example.com/fuse"}}`, ""},
		{"no args", ``, "args.rules: missing or empty"},
		{"empty rules", `{"rules":[]}`, "args.rules: missing or empty"},
		{"unknown member", `{"rules":[{"paths":["/dev/kvm"],"share":3}]}`, `args.rules[0].share: unknown field "share"; did you mean "shares"?`},
		{"case", `{"Rules":[]}`, `args.Rules: field "Rules" is not "rules"`},
		{"wrong type", `{"rules":[{"paths":"/dev/kvm"}]}`, `args.rules[0].paths: cannot decode a string`},
		{"twice", `{"rules":[{"paths":["/dev/kvm"],"paths":["/dev/fuse"]}]}`, `args.rules[0].paths: field "paths" is given twice`},
		{"neither", `{"rules":[{"shares":2}]}`, `args.rules[0]: a rule needs "paths"`},
		{"both", `{"rules":[{"paths":["/dev/x"],"class":"tty"}]}`, `args.rules[0].class: a rule selects by "paths" or by "class", not both`},
		{"names without class", `{"rules":[{"paths":["/dev/x"],"names":["x"]}]}`, `args.rules[0].names: "names" selects within a "class"`},
		{"empty paths", `{"rules":[{"paths":[]}]}`, `args.rules[0].paths: empty`},
		{"outside dev", `{"rules":[{"paths":["/etc/passwd"]}]}`, `args.rules[0].paths[0]: "/etc/passwd" is not a path under /dev`},
		{"dev itself", `{"rules":[{"paths":["/dev/"]}]}`, `args.rules[0].paths[0]: "/dev/" is not a path under /dev`},
		{"dot dot", `{"rules":[{"paths":["/dev/../etc/shadow"]}]}`, `args.rules[0].paths[0]: "/dev/../etc/shadow" is not a clean path`},
		{"bad glob", `{"rules":[{"paths":["/dev/kvm","/dev/tty[0-"]}]}`, `args.rules[0].paths[1]: "/dev/tty[0-" is not a valid glob`},
		{"bad name glob", `{"rules":[{"class":"tty","names":["tty["]}]}`, `args.rules[0].names[0]: "tty[" is not a valid glob`},
		{"name with slash", `{"rules":[{"class":"tty","names":["a/b"]}]}`, `args.rules[0].names[0]`},
		{"bad class", `{"rules":[{"class":"../block"}]}`, `args.rules[0].class: "../block" is not a sysfs class name`},
		{"bad vendor", `{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"vendor":"qinheng"}}]}`, `args.rules[0].usb.vendor: "qinheng" is not a USB id`},
		{"empty usb", `{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{}}]}`, `args.rules[0].usb: empty`},
		{"empty serial", `{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"serial":""}}]}`, `args.rules[0].usb.serial: empty`},
		{"bad group", `{"rules":[{"paths":["/dev/video*"],"group":"device"}]}`, `args.rules[0].group: "device" is not`},
		{"zero shares", `{"rules":[{"paths":["/dev/kvm"],"shares":0}]}`, `args.rules[0].shares: 0 is not from 1 to 1024 or "unlimited"`},
		{"unlimited shares", `{"rules":[{"paths":["/dev/kvm"],"shares":"unlimited"}]}`, ""},
		{"null shares", `{"rules":[{"paths":["/dev/kvm"],"shares":null}]}`, ""},
		{"most shares", `{"rules":[{"paths":["/dev/kvm"],"shares":1024}]}`, ""},
		{"too many shares", `{"rules":[{"paths":["/dev/kvm"],"shares":1025}]}`, `args.rules[0].shares: 1025 is not from 1 to 1024 or "unlimited"`},
		{"negative shares", `{"rules":[{"paths":["/dev/kvm"],"shares":-1}]}`, `args.rules[0].shares: -1 is not from 1 to 1024 or "unlimited"`},
		{"fractional shares", `{"rules":[{"paths":["/dev/kvm"],"shares":2.5}]}`, `args.rules[0].shares: 2.5 is not from 1 to 1024 or "unlimited"`},
		{"shares as a string", `{"rules":[{"paths":["/dev/kvm"],"shares":"3"}]}`, `args.rules[0].shares: "3" is not from 1 to 1024 or "unlimited"`},
		{"shares capitalised", `{"rules":[{"paths":["/dev/kvm"],"shares":"Unlimited"}]}`, `args.rules[0].shares: "Unlimited" is not from 1 to 1024 or "unlimited"`},
		{"shares a bool", `{"rules":[{"paths":["/dev/kvm"],"shares":true}]}`, `args.rules[0].shares: true is not from 1 to 1024 or "unlimited"`},
		{"shares an object", `{"rules":[{"paths":["/dev/kvm"],"shares":{"n":2}}]}`, `args.rules[0].shares: {"n":2} is not`},
		{"bad permissions", `{"rules":[{"paths":["/dev/kvm"],"permissions":"wr"}]}`, `args.rules[0].permissions: "wr" is not CDI device permissions`},
		{"same paths twice", `{"rules":[{"paths":["/dev/kvm"]},{"paths":["/dev/fuse","/dev/kvm"],"shares":2}]}`, `args.rules[1].paths[1]: selects the same devices as rules[0].paths[0]`},
		{"same class twice", `{"rules":[{"class":"hidraw"},{"class":"hidraw","group":"usb"}]}`, `args.rules[1].class: selects the same devices as rules[0].class`},
		{"numa policy", `{"rules":[{"paths":["/dev/kvm"]}],"numa_policy":"loose"}`, `args.numa_policy: "loose" is neither`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(tt.args)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *protocol.Error
			if !errors.As(err, &e) || e.Code != protocol.CodeInvalidConfig || !strings.HasPrefix(e.Details, tt.err) {
				t.Fatalf("error %v, want code 101 with details %q...", err, tt.err)
			}
		})
	}
}

func TestParseArgsNormalises(t *testing.T) {
	cfg, err := parse(`{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"vendor":"1A86","product":"0x7523"}},{"class":"video4linux"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.rules[0]
	if r.Paths[0] != "ttyUSB*" || r.USB.Vendor != "1a86" || r.USB.Product != "7523" || r.Shares != 1 || r.Group != chardev.GroupNode {
		t.Errorf("rule 0: %+v %+v", r, r.USB)
	}
	if n := cfg.rules[1].Names; len(n) != 1 || n[0] != "*" {
		t.Errorf("default names: %v", n)
	}
}

func TestParseShares(t *testing.T) {
	for args, want := range map[string]int{
		`{"rules":[{"paths":["/dev/kvm"]}]}`:                        1,
		`{"rules":[{"paths":["/dev/kvm"],"shares":null}]}`:          1,
		`{"rules":[{"paths":["/dev/kvm"],"shares":7}]}`:             7,
		`{"rules":[{"paths":["/dev/kvm"],"shares": "unlimited" }]}`: chardev.Unlimited,
	} {
		cfg, err := parse(args)
		if err != nil || cfg.rules[0].Shares != want {
			t.Errorf("%s: shares %v, %v; want %d", args, cfg.rules, err, want)
		}
	}
}

// FuzzParseArgs checks that any args either parse into rules that obey
// their limits or are refused with code 101 naming a member of the args,
// never a panic.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		`{"rules":[{"paths":["/dev/kvm"],"shares":3,"permissions":"rw"}]}`,
		`{"rules":[{"class":"video4linux","names":["video*"],"group":"usb","usb":{"vendor":"046d","serial":"x"}}]}`,
		`{"rules":[{"paths":["/dev/kvm"],"shares":"unlimited"}]}`, `{"rules":[{"paths":["/dev/kvm"],"shares":"unlimite"}]}`,
		`{"rules":[{"paths":["/dev/kvm"],"shares":1e3}]}`,
		`{"rules":[{"paths":["/dev/tty["]}]}`, `{"rules":[{}]}`, `{}`, `[]`, `{"rules":[{"paths":["/dev/a"]},{"paths":["/dev/a"]}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := parse(s)
		if err != nil {
			var e *protocol.Error
			if !errors.As(err, &e) || e.Code != protocol.CodeInvalidConfig || !strings.HasPrefix(e.Details, "args") {
				t.Fatalf("parse(%q): %v", s, err)
			}
			return
		}
		if len(cfg.rules) == 0 {
			t.Fatalf("parse(%q): no rules", s)
		}
		for _, r := range cfg.rules {
			if (r.Shares < 1 || r.Shares > maxShares) && r.Shares != chardev.Unlimited || (len(r.Paths) == 0) == (r.Class == "") {
				t.Fatalf("parse(%q): rule %+v", s, r)
			}
			for _, p := range r.Paths {
				if strings.HasPrefix(p, "/") || strings.Contains(p, "..") && devGlobHasDotDot(p) {
					t.Fatalf("parse(%q): path %q leaves /dev", s, p)
				}
			}
		}
	})
}

// devGlobHasDotDot reports a ".." path element.
func devGlobHasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}
