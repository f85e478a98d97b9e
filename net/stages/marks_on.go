//go:build heraldstages

package stages

// Enabled is true in a build with the heraldstages tag: the marks below
// feed Default.
const Enabled = true

// Default is the process's recorder.
var Default = &Recorder{}

// Mark notes that the record carrying payload reached stage s.
func Mark(s Stage, payload []byte) { Default.Mark(s, payload) }

// MarkRecords marks stage s for the last record of a records block.
func MarkRecords(s Stage, records []byte) { Default.MarkRecords(s, records) }
