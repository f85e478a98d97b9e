package actors

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// invocations records what a mailbox hands its invoker, in order.
type invocations struct {
	mu  sync.Mutex
	got []string
}

func (r *invocations) InvokeSystemMessage(m any) { r.add("sys:" + fmt.Sprint(m)) }
func (r *invocations) InvokeUserMessage(m any)   { r.add("user:" + fmt.Sprint(m)) }
func (r *invocations) EscalateFailure(reason, _ any) {
	r.add(fmt.Sprint("failure:", reason))
}

func (r *invocations) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *invocations) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// What is posted before Start waits, whatever the handlers' state, and
// Start hands it on in order, system messages first; after Start posts go
// straight through.
func TestGuardedMailboxHoldsUntilStart(t *testing.T) {
	mb := guardedMailboxes(actor.Unbounded())()
	mb.PostUserMessage("u1") // before any handler: protoactor's own mailbox would have no dispatcher here
	mb.PostSystemMessage("s1")
	mb.PostUserMessage("u2")
	rec := &invocations{}
	mb.RegisterHandlers(rec, actor.NewSynchronizedDispatcher(300))
	mb.PostSystemMessage("started")
	if got := rec.list(); len(got) != 0 {
		t.Fatalf("invoked before Start: %v", got)
	}
	if n := mb.UserMessageCount(); n != 2 {
		t.Errorf("UserMessageCount before Start = %d, want the 2 held", n)
	}
	mb.Start()
	mb.PostUserMessage("u3")
	want := []string{"sys:s1", "sys:started", "user:u1", "user:u2", "user:u3"}
	if got := rec.list(); !slices.Equal(got, want) {
		t.Fatalf("invoked %v, want %v", got, want)
	}
}

// protoactor's own mailbox, posted to before its handlers are set, has no
// dispatcher to schedule on: the failure the guard is for.
func TestUnguardedMailboxFailsBeforeHandlers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("posting to protoactor's mailbox before RegisterHandlers did not fail: the guard may no longer be needed")
		}
	}()
	actor.Unbounded()().PostUserMessage("early")
}
