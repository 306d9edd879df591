package deviceplugin

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// grpcError turns a failed pinned ADD into the gRPC status the kubelet
// reports: the plugin's protocol code and message in the text, and a gRPC
// code that says what kind of failure it was.
func grpcError(err error) error {
	var pe *caller.PluginError
	var run *invoke.RunError
	var proto *invoke.Error
	switch {
	case errors.As(err, &proto):
		return status.Error(grpcCode(proto.Code), fmt.Sprintf("%s: cdi-exec code %d: %s", pluginOf(pe, err), proto.Code, detailed(proto)))
	case errors.As(err, &run) && run.Kind == invoke.KindTimeout:
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func pluginOf(pe *caller.PluginError, err error) string {
	if errors.As(err, &pe) {
		return fmt.Sprintf("plugin %s (%s)", pe.Config.Plugin, pe.Config.File)
	}
	return "plugin"
}

func detailed(e *invoke.Error) string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + ": " + e.Details
}

// grpcCode maps a protocol code to the nearest gRPC code.
func grpcCode(code int) codes.Code {
	switch code {
	case protocol.CodeInsufficient, protocol.CodeNUMA:
		return codes.ResourceExhausted
	case protocol.CodeInvalidRequest, protocol.CodeSpecUnsupported:
		return codes.InvalidArgument
	case protocol.CodeConflict:
		return codes.AlreadyExists
	case protocol.CodeStore:
		return codes.Unavailable
	case protocol.CodeIncompatibleVersion, protocol.CodeIncompatibleConfigVersion, protocol.CodeCommandUnsupported, protocol.CodeInvalidConfig:
		return codes.FailedPrecondition
	}
	return codes.Internal
}
