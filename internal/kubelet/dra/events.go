package dra

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// The reasons of the Events a driver records on ResourceClaims.
const (
	ReasonPrepareFailed      = "PrepareFailed"      // Warning: the plugin's code and message
	ReasonClaimRecordRefused = "ClaimRecordRefused" // Warning: the claim record file is not this driver's
	ReasonStaleClaimFreed    = "StaleClaimFreed"    // Normal: the claim was gone, its devices are freed
)

// noteMax is the longest note an Event may have.
const noteMax = 1024

// claimRef is the reference to a ResourceClaim an Event is about.
func claimRef(namespace, name string, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "ResourceClaim", APIVersion: resourceapi.SchemeGroupVersion.String(),
		Namespace: namespace, Name: name, UID: uid,
	}
}

// event records an Event on the claim, when the driver records events.
// The note is made safe to show on a terminal first (printable), then cut
// to the API server's bound.
func (lc *lifecycle) event(claim *corev1.ObjectReference, eventType, reason, action, note string) {
	if lc.recorder == nil {
		return
	}
	note = printable(strings.ToValidUTF8(note, "\uFFFD"))
	if len(note) > noteMax {
		cut := noteMax - len("...")
		for cut > 0 && !utf8.RuneStart(note[cut]) {
			cut-- // whole characters only: the API server counts bytes of valid UTF-8
		}
		note = note[:cut] + "..."
	}
	lc.recorder.Eventf(claim, nil, eventType, reason, action, "%s", note)
}

// printable escapes what a terminal would act on rather than show, as Go
// escapes it in a quoted string: control characters (\x1b, \r, \n, \x00,
// \t), and the other non-printable characters such as the bidirectional
// overrides (\u202e) and other format characters. Callers quote user data
// already; this holds for every note whatever its source. Backslashes
// stay as they are.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// prepareFailed records the Event of a failed prepare: the refused claim
// records, or the plugin's protocol code and message.
func (lc *lifecycle) prepareFailed(claim *corev1.ObjectReference, err error) {
	if lc.recordRefused(claim, "Prepare", err) {
		return
	}
	note := err.Error()
	var pe *caller.PluginError
	if errors.As(err, &pe) {
		note = fmt.Sprintf("plugin %s failed with code %d: %v", pe.Config.Plugin, pe.Code(), err)
	}
	lc.event(claim, corev1.EventTypeWarning, ReasonPrepareFailed, "Prepare", note)
}

// recordRefused records the Event of a claim record file the driver
// refuses to replace, when err is that, and reports whether it was.
func (lc *lifecycle) recordRefused(claim *corev1.ObjectReference, action string, err error) bool {
	var refused *claimstate.RefusedError
	if !errors.As(err, &refused) {
		return false
	}
	lc.event(claim, corev1.EventTypeWarning, ReasonClaimRecordRefused, action, err.Error())
	return true
}
