package dra

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/specheal"
)

// This file puts back the volatile files of the claims the records say
// are prepared: the CDI specs of their devices and the helper's spec
// that mounts each request's device metadata. The kubelet never prepares
// a running pod's claims again, so a spec directory emptied while the
// driver was away (a tmpfs cleaned by another tool, an operator, a
// changed --cdi-spec-dir) would fail every restart of those pods'
// containers ("unresolvable CDI devices") for as long as they live. The
// driver restores at start and whenever a spec directory changes
// (docs/kubernetes.md#spec-files-put-back).

// metadataSubDir is where the helper keeps each claim's metadata files
// under its plugin data directory, as k8s.io/dynamic-resource-allocation's
// kubeletplugin lays them out: dra-device-metadata/<ns>_<name>/<request>/metadata.json.
const metadataSubDir = "dra-device-metadata"

// healer watches the spec directories of the driver's claims (every
// config's cdi_spec directory, and --cdi-spec-dir for the metadata specs)
// and has the lifecycle restore what goes (specheal).
func (lc *lifecycle) healer() *specheal.Healer {
	var dirs []string
	for _, conf := range lc.confs {
		if spec, err := inventory.Spec(conf); err == nil {
			dirs = append(dirs, spec.Dir)
		}
	}
	if lc.metadata {
		dirs = append(dirs, lc.cdiDir)
	}
	slices.Sort(dirs)
	return &specheal.Healer{Driver: lc.name, Dirs: slices.Compact(dirs), Records: lc, Log: lc.log, Metrics: lc.metrics}
}

// Expected implements specheal.Records: each claim recorded as prepared,
// with the spec files of the kinds its CDI ids name and, with device
// metadata, the helper's spec of each request whose metadata file is
// there.
func (lc *lifecycle) Expected(ctx context.Context) ([]specheal.Entry, error) {
	claims, err := lc.records.Read(ctx)
	if err != nil {
		return nil, err
	}
	var out []specheal.Entry
	for _, uid := range slices.Sorted(maps.Keys(claims)) {
		rec := claims[uid]
		if !rec.Prepared {
			continue
		}
		e := specheal.Entry{ID: uid, Data: uid}
		specs, _ := lc.claimSpecs(rec)
		for _, spec := range specs {
			e.Files = append(e.Files, specheal.SpecFile(spec, uid))
		}
		for _, req := range lc.metadataRequests(rec) {
			e.Files = append(e.Files, specheal.File{Dir: lc.cdiDir, Name: lc.metadataSpecName(uid, req)})
		}
		out = append(out, e)
	}
	return out, nil
}

// Restore implements specheal.Records: the claim's missing files put back
// under its lock, after reading its record again; a claim no longer
// recorded as prepared is specheal.ErrFreed.
func (lc *lifecycle) Restore(ctx context.Context, e specheal.Entry) error {
	uid, _ := e.Data.(string)
	unlock, err := lc.records.LockClaims(ctx, []string{uid})
	if err != nil {
		return err
	}
	defer unlock()
	claims, err := lc.records.Read(ctx)
	if err != nil {
		return err
	}
	rec, ok := claims[uid]
	if !ok || !rec.Prepared {
		return fmt.Errorf("claim %s: %w", uid, specheal.ErrFreed)
	}
	if !lc.specsWritten(uid, rec) {
		if err := lc.replay(ctx, rec); err != nil {
			return err
		}
	}
	return lc.restoreMetadataSpecs(rec)
}

// replay prepares a recorded claim again, as the kubelet's prepare
// would: its ResourceClaim, got by name, must still have the recorded
// UID and devices; then the pinned ADD, which the plugin answers from its
// store, writes the spec anew, with the device nodes as they are now. A
// claim gone or allocated otherwise is left to the stale-claim collector.
func (lc *lifecycle) replay(ctx context.Context, rec claimstate.Claim) error {
	if lc.client == nil {
		return errors.New("no API client to read the claim's settings")
	}
	claim, err := lc.client.ResourceV1().ResourceClaims(rec.Namespace).Get(ctx, rec.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && string(claim.UID) != rec.UID) {
		return nil // the stale-claim collector's
	}
	if err != nil {
		return err
	}
	results, err := lc.allocated(claim)
	if err != nil {
		return nil // no longer allocated here: the collector's
	}
	keys, adminKeys := splitKeys(results)
	if sameDevices(rec, keys, adminKeys, shares(results)) != nil {
		return nil
	}
	_, err = lc.pin(ctx, claim, results)
	return err
}

// metadataRequests are the requests of a claim whose metadata file the
// helper wrote, none without device metadata.
func (lc *lifecycle) metadataRequests(rec claimstate.Claim) []string {
	if !lc.metadata {
		return nil
	}
	entries, err := os.ReadDir(lc.claimMetadataDir(rec))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(lc.claimMetadataDir(rec), e.Name(), "metadata.json")); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// claimMetadataDir is where the helper keeps a claim's metadata files.
func (lc *lifecycle) claimMetadataDir(rec claimstate.Claim) string {
	return filepath.Join(lc.metadataDir, metadataSubDir, rec.Namespace+"_"+rec.Name)
}

// metadataSpecName is the name of the helper's spec of a request's
// metadata: <driver>_metadata_<claim UID>_<request>.json.
func (lc *lifecycle) metadataSpecName(uid, request string) string {
	return fmt.Sprintf("%s_metadata_%s_%s.json", lc.name, uid, request)
}

// restoreMetadataSpecs writes the helper's metadata spec of each request
// of the claim whose metadata file is there and whose spec is not, as the
// helper writes it: a mount of the file at the path KEP-5304 gives it in
// the container.
func (lc *lifecycle) restoreMetadataSpecs(rec claimstate.Claim) error {
	for _, req := range lc.metadataRequests(rec) {
		specPath := filepath.Join(lc.cdiDir, lc.metadataSpecName(rec.UID, req))
		if _, err := os.Stat(specPath); err == nil {
			continue
		}
		file := filepath.Join(lc.claimMetadataDir(rec), req, "metadata.json")
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		// The first object of the stream names the pod's claim, for a
		// claim made from a template; every version has the field.
		var first struct {
			PodClaimName *string `json:"podClaimName"`
		}
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&first); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		container := metadata.ResourceClaimFilePath(lc.name, rec.Name, req)
		if first.PodClaimName != nil && *first.PodClaimName != "" {
			container = metadata.ResourceClaimTemplateFilePath(lc.name, *first.PodClaimName, req)
		}
		spec := cdispecs.Spec{
			Kind: lc.name + "/metadata",
			Devices: []cdispecs.Device{{
				Name: rec.UID + "_" + req,
				ContainerEdits: cdispecs.ContainerEdits{Mounts: []*cdispecs.Mount{{
					HostPath: file, ContainerPath: container, Options: []string{"ro", "bind"},
				}}},
			}},
		}
		if spec.Version, err = cdispecs.MinimumRequiredVersion(&spec); err != nil {
			return err
		}
		out, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(lc.cdiDir, 0o755); err != nil {
			return err
		}
		if err := writeMetadataFile(specPath, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}
