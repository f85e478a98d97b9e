package udpproxy

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestMain fails the run if any proxy goroutine outlives the tests: every
// test closes its proxies, and Close waits for their goroutines.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := proxyGoroutines(); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "udpproxy: %d proxy goroutines left after the tests:\n\n%s\n", len(leaks), strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// proxyLoops are the functions the proxy's goroutines run, as they appear
// in a goroutine's stack.
var proxyLoops = []string{
	"udpproxy.(*Proxy).listenLoop",
	"udpproxy.(*Proxy).sessionLoop",
	"udpproxy.(*Direction).run",
}

// proxyGoroutines returns the stacks of the goroutines running one of the
// proxy's loops. A goroutine whose loop has returned is not among them, even
// while it is still finishing the WaitGroup's Done that Close waits for.
func proxyGoroutines() []string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var leaks []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, loop := range proxyLoops {
			if strings.Contains(g, loop) {
				leaks = append(leaks, g)
				break
			}
		}
	}
	return leaks
}
