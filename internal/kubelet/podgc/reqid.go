package podgc

// This file derives the request-ids of the kubelet device-plugin
// mode. The kubelet's Allocate says which devices a container gets but
// not which pod or container it is, so the id is made from what it does
// say: the resource and the set of device ids. The same set always gives
// the same id, so an Allocate that the kubelet repeats is a replay, and the
// garbage collector can recompute every live id from the kubelet's
// PodResources list.

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/pkg/caller"
)

// IDPrefix starts every id this package makes. It lies inside
// caller.ReservedPrefix, which no other caller may use; other Kubernetes
// bridges use other names under that prefix.
const IDPrefix = caller.ReservedPrefix + "dp-"

// hashLen is the number of hex digits of the device-set hash: 128 bits.
const hashLen = 32

// RequestID returns the request-id of a device-plugin allocation: the
// prefix, the resource type and a hash of the fully qualified resource
// name and the sorted device ids, for example
// "k8s-dp-tty-3f2a...". typ is a resource-type (at most 16 ASCII letters
// and digits), so the id is valid under the request-id grammar and at most
// 56 characters long.
func RequestID(resource, typ string, deviceIDs []string) string {
	ids := slices.Clone(deviceIDs)
	slices.Sort(ids)
	h := sha256.New()
	h.Write([]byte(resource))
	for _, id := range ids {
		h.Write([]byte{0})
		h.Write([]byte(id))
	}
	return IDPrefix + typ + "-" + hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// Made reports whether id has the shape of an id made by requestID for
// the resource type typ. Only such ids are ever freed by the mode.
func Made(id, typ string) bool {
	hash, ok := strings.CutPrefix(id, IDPrefix+typ+"-")
	if !ok || len(hash) != hashLen {
		return false
	}
	for i := 0; i < len(hash); i++ {
		if !(hash[i] >= '0' && hash[i] <= '9' || hash[i] >= 'a' && hash[i] <= 'f') {
			return false
		}
	}
	return true
}

// Held returns the ids among holders (the request-ids that hold devices)
// that the device-plugin mode made for the resource type typ.
func Held(holders []string, typ string) []string {
	var ids []string
	for _, id := range holders {
		if Made(id, typ) {
			ids = append(ids, id)
		}
	}
	return ids
}
