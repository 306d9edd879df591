package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// Del frees everything the request-id holds, in one transaction. A node
// without a store (Options.Existing: none is made) holds nothing.
func (p Pool) Del(ctx context.Context, c *skel.Call) error {
	s, err := p.begin(ctx, c, store.Options{Existing: true})
	if errors.Is(err, store.ErrNotExist) {
		// No store, so no spec file is ours.
		return protocol.NewError(protocol.CodeUnknownRequestID, "")
	}
	if err != nil {
		return err
	}
	defer s.end()
	var teardownErr error
	err = s.st.Update(func(tx *store.Tx) error {
		// Delete returns the record it removed, so it is read once; the
		// removal is committed after the teardown, as it always was.
		rec, err := tx.Delete(c.RequestID)
		if err != nil {
			return err
		}
		if rec == nil {
			return protocol.NewError(protocol.CodeUnknownRequestID, "")
		}
		teardownErr = p.teardown(s.hold, c, rec)
		return nil
	})
	var e *protocol.Error
	if err == nil || errors.As(err, &e) && e.Code == protocol.CodeUnknownRequestID {
		p.unpublish(s.st, c, c.RequestID)
	}
	if err != nil {
		return storeError(err)
	}
	return teardownErr
}

// GC frees every allocation whose request-id is not in the call's valid
// set, unless its record's owner is one the call keeps (KeepOwners). When the deadline comes first, it stops: the ids not reached are
// left for the next GC and said so in the answer's errors.
func (p Pool) GC(ctx context.Context, c *skel.Call) (*skel.GCResult, error) {
	res := &skel.GCResult{Freed: []string{}}
	s, err := p.begin(ctx, c, store.Options{Existing: true})
	if errors.Is(err, store.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.end()
	err = s.st.Update(func(tx *store.Tx) error { return p.collect(s.hold, c, tx, res) })
	if err != nil {
		return nil, storeError(err)
	}
	for _, id := range res.Freed {
		p.unpublish(s.st, c, id)
	}
	if p.Spec != nil {
		p.removeOrphans(s.st, c)
	}
	return res, nil
}

// collect is the body of GC's transaction.
func (p Pool) collect(ctx context.Context, c *skel.Call, tx *store.Tx, res *skel.GCResult) error {
	var stale []*store.Record
	err := tx.ForEach(func(r *store.Record) error {
		if !c.ValidIDs[r.ID] && !(r.Owner != "" && c.KeepOwners[r.Owner]) {
			stale = append(stale, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, rec := range stale {
		if ctx.Err() != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("out of time: %d request-ids left for the next GC", len(stale)-i))
			break
		}
		if err := p.teardown(ctx, c, rec); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", rec.ID, err))
		}
		if _, err := tx.Delete(rec.ID); err != nil {
			return fmt.Errorf("freeing %q: %w", rec.ID, err)
		}
		res.Freed = append(res.Freed, rec.ID)
	}
	return nil
}

// teardown runs the plugin's Setup.Teardown, if any, on a record about to
// be freed.
func (p Pool) teardown(ctx context.Context, c *skel.Call, rec *store.Record) error {
	if p.Setup == nil {
		return nil
	}
	return p.Setup.Teardown(ctx, c, recordView(rec))
}
