package actors

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself within one
	// throttle interval (1 s) of the last dead letter.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
