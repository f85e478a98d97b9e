//go:build !heraldstages

package stages

// Enabled is false without the heraldstages tag: the marks do nothing.
const Enabled = false

// Default is the process's recorder; without the tag nothing feeds it.
var Default = &Recorder{}

// Mark does nothing without the heraldstages tag.
func Mark(Stage, []byte) {}

// MarkRecords does nothing without the heraldstages tag.
func MarkRecords(Stage, []byte) {}
