package client

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// quic-go warns through the std log when it cannot raise UDP buffers.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	// Frame buffers given back twice, or written to after, panic.
	frameBuffers.checked = true
	// The tests that run a real node in this process leave protoactor's
	// dead-letter throttle goroutine behind; it ends by itself within one
	// throttle interval (1 s) of the node's last dead letter.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
