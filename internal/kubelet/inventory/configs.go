package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// LogProblems logs what Configs found wrong with the config files: a file
// left out, or a warning about one that loaded (caller.Problem).
func LogProblems(log *slog.Logger, probs []caller.Problem) {
	for _, p := range probs {
		if p.Warning {
			log.Warn("config warning", "problem", p.Error())
			continue
		}
		log.Warn("config skipped", "file", p.File, "err", p.Err)
	}
}

// Configs loads the plugin configs under dir, grouped by resource type in
// load order, keeping only types when any are given. Each config without a
// cdi_spec arg gets one (kind <prefix>/<type> in specDir), so that every
// allocation has a CDI spec file for the runtime. Problems are the configs
// left out. Both modes load their configs with it.
func Configs(dir string, types []string, prefix, specDir string) (map[string][]caller.Config, []caller.Problem, error) {
	confs, probs := caller.Load(dir)
	byType := map[string][]caller.Config{}
	for _, c := range confs {
		if len(types) > 0 && !slices.Contains(types, c.Type) {
			continue
		}
		raw, err := withSpec(c.Raw, prefix+"/"+c.Type, specDir)
		if err != nil {
			probs = append(probs, caller.Problem{File: c.File, Err: err})
			continue
		}
		c.Raw = raw
		byType[c.Type] = append(byType[c.Type], c)
	}
	for _, t := range types {
		if len(byType[t]) == 0 {
			return nil, probs, fmt.Errorf("no usable config of type %q under %s", t, dir)
		}
	}
	if len(byType) == 0 {
		return nil, probs, fmt.Errorf("no usable config under %s", dir)
	}
	return byType, probs, nil
}

// withSpec returns the config with a cdi_spec arg of kind in dir added,
// unless it has one.
func withSpec(raw []byte, kind, dir string) ([]byte, error) {
	return protocol.EditArgs(raw, func(args map[string]json.RawMessage) (bool, error) {
		if _, ok := args["cdi_spec"]; ok {
			return false, nil
		}
		spec, err := json.Marshal(cdispec.Config{Kind: kind, Dir: dir})
		if err != nil {
			return false, err
		}
		if _, err := cdispec.Parse(spec); err != nil {
			return false, fmt.Errorf("--resource-prefix or --cdi-spec-dir: %w", err)
		}
		args["cdi_spec"] = spec
		return true, nil
	})
}

// Spec returns the cdi_spec of a config that Configs loaded (every one
// has one): the kind and directory of the spec files its plugin writes.
func Spec(conf caller.Config) (*cdispec.Config, error) {
	var c struct {
		Args json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal(conf.Raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", conf.File, err)
	}
	spec, err := cdispec.FromArgs(c.Args)
	if err == nil && spec == nil {
		err = errors.New("no cdi_spec arg")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf.File, err)
	}
	return spec, nil
}
