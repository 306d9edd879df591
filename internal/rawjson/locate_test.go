package rawjson

import "testing"

func TestLocate(t *testing.T) {
	doc := []byte(`{"a": 1, "args": {"rules": [{"paths": ["/dev/x", "/dev/["]}, {"class": "video4linux"}]}}`)
	tests := []struct {
		path string
		want string // the text at the offset
	}{
		{"a", "1"},
		{"args.rules[0].paths[1]", `"/dev/["`},
		{"args.rules[1].class", `"video4linux"`},
		{"args.rules[1].nope", `{"class"`},
		{"args.rules[7]", `[{"paths"`},
	}
	for _, tt := range tests {
		off := Locate(doc, tt.path)
		if off < 0 || string(doc[off:off+len(tt.want)]) != tt.want {
			t.Errorf("Locate(%q) = %d", tt.path, off)
		}
	}
	for _, bad := range []string{"zz", ""} {
		if off := Locate(doc, bad); off != -1 {
			t.Errorf("Locate(%q) = %d, want -1", bad, off)
		}
	}
	if off := Locate([]byte("{"), "a"); off != -1 {
		t.Errorf("Locate of bad JSON = %d", off)
	}
}
