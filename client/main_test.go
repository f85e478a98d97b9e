package client

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// quic-go warns through the std log when it cannot raise UDP buffers.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(m)
}
