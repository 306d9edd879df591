package protocol

import (
	"encoding/json"
	"errors"
	"io/fs"
	"testing"
)

func TestErrors(t *testing.T) {
	e := Errorf(CodeStore, "opening: %w", fs.ErrPermission)
	if e.Msg != "Allocation store unavailable" || e.Details != "opening: permission denied" || !errors.Is(e, fs.ErrPermission) {
		t.Errorf("Errorf = %+v", e)
	}
	wrapped := AsError(errors.Join(errors.New("x"), NewError(CodeConflict, "held")))
	if wrapped.Code != CodeConflict {
		t.Errorf("AsError of a wrapped protocol error = %+v", wrapped)
	}
	if got := AsError(errors.New("disk on fire")); got.Code != CodeInternal || got.Msg != "Internal error" {
		t.Errorf("AsError of a plain error = %+v", got)
	}
	b, _ := json.Marshal(NewError(CodeUnknownRequestID, ""))
	if string(b) != `{"code":5,"msg":"Unknown request ID"}` {
		t.Errorf("JSON = %s", b)
	}
	if Message(999) != Message(CodeInternal) {
		t.Errorf("unknown code has its own message %q", Message(999))
	}
}
