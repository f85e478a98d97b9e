package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// Every command that prints takes --output table|json|yaml (-o), and --json
// as a short form of --output json (it predates --output; scripts use it).
//
//   - table: what a person reads. Commands that print a bounded result
//     (stream list, stream describe, group describe, context ls) print
//     tables without borders, kubectl-style; commands that print an
//     unbounded stream of records (sub, read, pub, group poll,
//     group dead-letters) print one line per record, space-separated, as
//     they always have.
//   - json: one JSON value for a bounded result (an array for lists), one
//     JSON line per record for a stream of records.
//   - yaml: the JSON form as YAML, with the same keys; a stream of records
//     is a stream of YAML documents ("---" between them).

// outputFormat is the value of --output.
type outputFormat string

// The output formats.
const (
	outputTable outputFormat = "table"
	outputJSON  outputFormat = "json"
	outputYAML  outputFormat = "yaml"
)

// outputFlags are --output and --json as registered on one command.
type outputFlags struct {
	// format is --output's value.
	format string
	// json is --json.
	json bool
}

// addOutputFlags registers --output (-o) and --json on c. what says what
// --output json prints, for the help text.
func addOutputFlags(c *cobra.Command, o *outputFlags, what string) {
	c.Flags().StringVarP(&o.format, "output", "o", string(outputTable), "output `format`: table, json or yaml ("+what+")")
	c.Flags().BoolVar(&o.json, "json", false, "short for --output json")
	_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// resolve returns the format asked for, or a usage error.
func (o *outputFlags) resolve(c *cobra.Command) (outputFormat, error) {
	f := outputFormat(o.format)
	switch f {
	case outputTable, outputJSON, outputYAML:
	default:
		return "", usageErrorf("--output %q: want table, json or yaml", o.format)
	}
	if o.json {
		if c.Flags().Changed("output") && f != outputJSON {
			return "", usageErrorf("--json is short for --output json: it does not go with --output %s", f)
		}
		f = outputJSON
	}
	return f, nil
}

// structured reports whether f is a machine-readable format.
func (f outputFormat) structured() bool { return f == outputJSON || f == outputYAML }

// writeValue prints v, one bounded result, as one JSON value (indented) or
// one YAML document. Call it only for json and yaml.
func writeValue(w io.Writer, f outputFormat, v any) error {
	if f == outputYAML {
		return writeYAMLDoc(w, v, false)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// recordWriter prints a stream of records as JSON lines or YAML documents.
type recordWriter struct {
	// format is json or yaml.
	format outputFormat
	// w is where the records go.
	w *bufio.Writer
	// n counts the records written (the YAML separator goes before all but
	// the first).
	n int
}

// write prints one record.
func (r *recordWriter) write(v any) error {
	r.n++
	if r.format == outputYAML {
		return writeYAMLDoc(r.w, v, r.n > 1)
	}
	return writeJSONLine(r.w, v)
}

// writeJSONLine prints v as one JSON line.
func writeJSONLine(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	w.Write(b)
	return w.WriteByte('\n')
}

// writeYAMLDoc prints v as a YAML document with the keys and order of its
// JSON form (v's json tags are the one schema of both), preceded by "---"
// when separate is set.
func writeYAMLDoc(w io.Writer, v any, separate bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	// JSON is YAML: decoding it into a node keeps the keys in order.
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("encode %T as YAML: %w", v, err)
	}
	blockStyle(&doc)
	if separate {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("encode %T as YAML: %w", v, err)
	}
	return enc.Close()
}

// blockStyle resets the flow and quoting styles a JSON document decodes
// with, so the encoder writes block YAML and quotes only where needed.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// newTable returns a table in the style of kubectl and rpk: no borders,
// upper-case headers as given, columns left-aligned and two spaces apart,
// no trailing spaces. Cells are strings, so numbers align left too.
func newTable(header ...string) table.Writer {
	t := table.NewWriter()
	st := table.StyleDefault
	st.Options = table.Options{}
	st.Box.PaddingLeft = ""
	st.Box.PaddingRight = "  "
	st.Box.MiddleVertical = ""
	st.Format.Header = text.FormatDefault
	t.SetStyle(st)
	t.SuppressTrailingSpaces()
	if len(header) > 0 {
		row := make(table.Row, len(header))
		for i, h := range header {
			row[i] = h
		}
		t.AppendHeader(row)
	}
	return t
}

// appendRow adds a row of string cells.
func appendRow(t table.Writer, cells ...string) {
	row := make(table.Row, len(cells))
	for i, c := range cells {
		row[i] = c
	}
	t.AppendRow(row)
}

// writeTable prints t followed by a newline.
func writeTable(w io.Writer, t table.Writer) error {
	s := t.Render()
	if s == "" {
		return nil
	}
	_, err := io.WriteString(w, strings.TrimRight(s, "\n")+"\n")
	return err
}
