package dra

import (
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI is client-go's fake clientset with the node, plus three things
// of the API server that the slice controller needs and the fake lacks:
// names from generateName, and ResourceSlice lists and watches filtered
// by field selector (spec.driver, spec.nodeName), so that each driver's
// controller sees only its own slices; and ResourceClaim watches whose
// events carry objects of their own.
func fakeAPI() *fake.Clientset {
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid-1"}})
	var serial atomic.Int64
	c.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && m.GetName() == "" && m.GetGenerateName() != "" {
			m.SetName(fmt.Sprintf("%s%05d", m.GetGenerateName(), serial.Add(1)))
		}
		return false, nil, nil
	})
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	c.PrependReactor("list", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		obj, err := c.Tracker().List(gvr, resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), "")
		if err != nil || sel == nil || sel.Empty() {
			return true, obj, err
		}
		l := obj.(*resourceapi.ResourceSliceList)
		var kept []resourceapi.ResourceSlice
		for _, s := range l.Items {
			if sel.Matches(sliceFields(&s)) {
				kept = append(kept, s)
			}
		}
		l.Items = kept
		return true, l, nil
	})
	c.PrependWatchReactor("resourceslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		sel := a.(k8stesting.WatchAction).GetWatchRestrictions().Fields
		w, err := c.Tracker().Watch(gvr, "")
		if err != nil || sel == nil || sel.Empty() {
			return true, w, err
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			s, ok := e.Object.(*resourceapi.ResourceSlice)
			return e, !ok || sel.Matches(sliceFields(s))
		}), nil
	})
	return c
}

// sliceFields are the fields of a slice that selectors can name.
func sliceFields(s *resourceapi.ResourceSlice) fields.Set {
	node := ""
	if s.Spec.NodeName != nil {
		node = *s.Spec.NodeName
	}
	return fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   s.Spec.Driver,
		resourceapi.ResourceSliceSelectorNodeName: node,
	}
}
