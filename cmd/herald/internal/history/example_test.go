package history_test

import (
	"errors"
	"fmt"

	"github.com/heraldmq/herald/cmd/herald/internal/history"
)

// ExampleCheck records a short run, with one acked publish lost by the
// cluster and a definitely failed one written anyway, and checks it
// against the logs read back at the end.
func ExampleCheck() {
	rec := history.New()
	rec.Invoke("r1", 0)
	rec.Ack("r1", 0, 0)
	rec.Invoke("r2", 0)
	rec.Ack("r2", 0, 1)
	rec.Invoke("r3", 0)
	rec.Fail("r3", errors.New("not leader"))
	rec.Read(0, 0, []string{"r1"})

	// What reading shard 0 back from offset 0 returned after healing.
	final := history.Final{0: history.LogOf(0, "r1", "r3")}
	h := rec.History()
	for _, v := range history.Check(h, final) {
		fmt.Println(v)
	}
	fmt.Println(history.Summarize(h, final))
	// Output:
	// failed: record "r3" failed definitely (seq 6: not leader) but is in the final log at shard 0 offset 1
	// acked: record "r2" acked at shard 0 offset 1 (seq 4) is in no final log; that offset holds "r3"
	// 7 events: 3 publishes (3 attempts): 2 acked, 1 failed, 0 unknown (0 present); 0 conditional (0 won); 1 reads of 1 records; final logs 2 records; 1 lost, 0 duplicated, 0 trimmed
}
