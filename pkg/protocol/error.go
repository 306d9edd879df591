package protocol

import (
	"errors"
	"fmt"
)

// Well-known error codes of the protocol (0-99) and the plugin-specific codes
// this suite uses in every plugin (100+), docs/protocol.md#error-codes.
const (
	CodeIncompatibleVersion       = 1
	CodeIncompatibleConfigVersion = 2
	CodeCommandUnsupported        = 3
	CodeSpecUnsupported           = 4
	CodeUnknownRequestID          = 5

	CodeInternal       = 100
	CodeInvalidConfig  = 101
	CodeInvalidRequest = 102
	CodeInsufficient   = 103
	CodeConflict       = 104
	CodeNUMA           = 105
	CodeStore          = 106
	CodeSetup          = 107
	CodeDelegate       = 108
)

// Message returns the fixed msg text of a code; codes without one of their
// own share the text of code 100.
func Message(code int) string {
	switch code {
	case CodeIncompatibleVersion:
		return "Incompatible CDI version"
	case CodeIncompatibleConfigVersion:
		return "Incompatible CDI config version"
	case CodeCommandUnsupported:
		return "Command unsupported"
	case CodeSpecUnsupported:
		return "resource-spec unsupported"
	case CodeUnknownRequestID:
		return "Unknown request ID"
	case CodeInvalidConfig:
		return "Invalid configuration"
	case CodeInvalidRequest:
		return "Invalid request parameter"
	case CodeInsufficient:
		return "Insufficient free resources"
	case CodeConflict:
		return "Conflicting request"
	case CodeNUMA:
		return "NUMA locality cannot be satisfied"
	case CodeStore:
		return "Allocation store unavailable"
	case CodeSetup:
		return "Device setup failed"
	case CodeDelegate:
		return "Delegate plugin failed"
	}
	return "Internal error"
}

// Error is a protocol error: a code, its fixed message and optional details.
// Plugins return it (possibly wrapped) from their commands and skel prints
// it; callers decode it from a plugin's answer.
type Error struct {
	Code    int    `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
	Err     error  `json:"-"` // the underlying cause, if any; not printed
}

func (e *Error) Error() string {
	if e.Details == "" {
		return fmt.Sprintf("code %d: %s", e.Code, e.Msg)
	}
	return fmt.Sprintf("code %d: %s: %s", e.Code, e.Msg, e.Details)
}

func (e *Error) Unwrap() error { return e.Err }

// NewError returns an Error with the standard message of code and the given
// details.
func NewError(code int, details string) *Error {
	return &Error{Code: code, Msg: Message(code), Details: details}
}

// Errorf returns an Error with the standard message of code and formatted
// details. A %w verb in format makes the wrapped error the Error's cause.
func Errorf(code int, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: Message(code), Details: err.Error(), Err: errors.Unwrap(err)}
}

// AsError converts any error into a protocol Error. Errors that are not
// protocol errors become code 100 (internal error).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Msg: Message(CodeInternal), Details: err.Error(), Err: err}
}
