package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/heraldmq/herald/supervisors"
)

// A node's configuration comes from four sources, in rising precedence:
// supervisors.DefaultConfig, the YAML file named by --config, HERALD_<KEY>
// environment variables and the flags the user set. Every source goes
// through one reflect walk of supervisors.Config (configSchema), so the yaml
// tags are the single list of keys: a new field is configurable from the
// file and the environment as soon as it has a tag, and
// docs/configuration.md must list it (config_doc_test.go checks).

// Errors wrapped by the *configError values loadNodeConfig returns.
var (
	// errUnknownKey means the config file names a key Config does not have.
	errUnknownKey = errors.New("unknown key")
	// errDuplicateKey means the config file sets a key twice.
	errDuplicateKey = errors.New("duplicate key")
	// errBadValue means a value cannot be parsed for its key's type, or the
	// YAML has the wrong shape for it (a list where a number belongs).
	errBadValue = errors.New("invalid value")
	// errMultipleDocuments means the config file holds more than one YAML
	// document.
	errMultipleDocuments = errors.New("more than one YAML document")
	// errUnsupportedType means a Config field has a Go type this loader
	// cannot set; it is a programming error, caught by the tests.
	errUnsupportedType = errors.New("unsupported field type")
)

// errInvalidConfig wraps the error of supervisors.Config.Validate: every
// value parsed, but the combination is not acceptable.
var errInvalidConfig = errors.New("invalid configuration")

// sourceKind says which configuration source a value came from.
type sourceKind int

const (
	sourceFile sourceKind = iota + 1 // the --config YAML file
	sourceEnv                        // a HERALD_<KEY> environment variable
	sourceFlag                       // a command-line flag
)

// configError is an error in one configuration source. Its message names
// the source and the key: "config file x.yaml: line 3: publish_window: …",
// "HERALD_PUBLISH_WINDOW: …", "flag --listen: …".
type configError struct {
	// kind is the source.
	kind sourceKind
	// name is the file path, the environment variable or the flag name.
	name string
	// line is the line in the file, 0 when unknown or not a file.
	line int
	// key is the dotted yaml key, "" when the error concerns the whole file.
	key string
	// err is the cause; it wraps one of the sentinels above or an I/O or
	// YAML syntax error.
	err error
}

func (e *configError) Error() string {
	var b strings.Builder
	switch e.kind {
	case sourceFile:
		fmt.Fprintf(&b, "config file %s: ", e.name)
		if e.line > 0 {
			fmt.Fprintf(&b, "line %d: ", e.line)
		}
		if e.key != "" {
			b.WriteString(e.key + ": ")
		}
	case sourceEnv:
		b.WriteString(e.name + ": ")
	case sourceFlag:
		fmt.Fprintf(&b, "flag --%s: ", e.name)
	}
	b.WriteString(e.err.Error())
	return b.String()
}

func (e *configError) Unwrap() error { return e.err }

// nodeFlagKeys lists the flags of `herald node` that set a configuration
// key, in the order they are registered.
var nodeFlagKeys = []struct {
	flag, key, usage string
}{
	{"data-dir", "data_dir", "`directory` for the database, the generated certificates and the node id"},
	{"listen", "listen", "QUIC listen `address`"},
	{"http", "http", "HTTP listen `address` for /healthz, /readyz and /metrics"},
	{"tls-cert", "tls_cert", "PEM certificate `file` for the QUIC listener (with --tls-key; none: generated dev certificates)"},
	{"tls-key", "tls_key", "PEM private key `file` for --tls-cert"},
	{"log-level", "log_level", "log `level`: debug, info, warn or error"},
	{"log-format", "log_format", "log `format`: text or json"},
	{"trace", "trace_exporter", "where spans go: `exporter` none, stdout or otlp (OTEL_EXPORTER_OTLP_* set the endpoint)"},
	{"node-id", "node_id", "this node's `id` in a cluster (with --peers)"},
	{"cluster-listen", "cluster_listen", "UDP `address` peers reach this node at (with --peers)"},
	{"advertise", "advertise", "client `address` the cluster tells clients this node is at (with --peers; default: --listen when it names a host)"},
	{"peers", "peers", "every node of the cluster as `id=address,...` (none: a single node)"},
	{"cluster-ca", "cluster_ca", "PEM `file` of the cluster CA for mutual TLS between peers (with --cluster-cert, --cluster-key)"},
	{"cluster-cert", "cluster_cert", "PEM certificate `file` of this node under --cluster-ca"},
	{"cluster-key", "cluster_key", "PEM private key `file` for --cluster-cert"},
	{"join", "cluster_join", "join a running cluster: with nothing stored, take the cluster's state from it (a node added with herald cluster add)"},
}

// nodeFlags holds what registerNodeFlags registered, for loadNodeConfig.
type nodeFlags struct {
	// configFile is the value of --config: a YAML file, or "" for none.
	configFile string
	// keys maps the name of each flag that sets a configuration key to that
	// dotted yaml key.
	keys map[string]string
}

// registerNodeFlags registers the flags of `herald node` on fs: --config
// and one flag per entry of nodeFlagKeys, whose shown default is the
// built-in one. Only flags the user sets override the file and the
// environment. Call loadNodeConfig after fs.Parse.
func registerNodeFlags(fs *flag.FlagSet) *nodeFlags {
	nf := &nodeFlags{keys: make(map[string]string, len(nodeFlagKeys))}
	fs.StringVar(&nf.configFile, "config", "", "YAML configuration `file` (see docs/configuration.md)")
	defaults := supervisors.DefaultConfig()
	schema := newConfigSchema(&defaults)
	for _, f := range nodeFlagKeys {
		field, ok := schema.byKey[f.key]
		if !ok {
			panic(fmt.Sprintf("herald: flag --%s names unknown config key %q", f.flag, f.key))
		}
		if field.value.Kind() == reflect.Bool {
			fs.Bool(f.flag, field.value.Bool(), f.usage) // --join, not --join true
		} else {
			fs.String(f.flag, formatValue(field.value), f.usage)
		}
		nf.keys[f.flag] = f.key
	}
	return nf
}

// loadNodeConfig builds the node configuration after fs.Parse: the
// defaults, then the YAML file from --config, then every HERALD_<KEY> that
// lookupEnv finds (os.LookupEnv when nil), then the flags of nf the user
// set. It returns every error of the first source that has any, each a
// *configError naming the source and key, or an error wrapping
// errInvalidConfig when Validate rejects the result. On error the returned
// Config is the zero value.
func loadNodeConfig(fs *flag.FlagSet, nf *nodeFlags, lookupEnv func(string) (string, bool)) (supervisors.Config, error) {
	if !fs.Parsed() {
		return supervisors.Config{}, errors.New("herald: loadNodeConfig called before the flags were parsed")
	}
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	cfg := supervisors.DefaultConfig()
	schema := newConfigSchema(&cfg)
	if nf.configFile != "" {
		if err := schema.applyFile(nf.configFile); err != nil {
			return supervisors.Config{}, err
		}
	}
	if err := schema.applyEnv(lookupEnv); err != nil {
		return supervisors.Config{}, err
	}
	if err := schema.applyFlags(fs, nf); err != nil {
		return supervisors.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return supervisors.Config{}, fmt.Errorf("%w:\n%w", errInvalidConfig, err)
	}
	return cfg, nil
}

// configField is one settable leaf of the Config struct.
type configField struct {
	// key is the dotted yaml key, e.g. "badger.mem_table_size".
	key string
	// env is the environment variable, e.g. "HERALD_BADGER_MEM_TABLE_SIZE".
	env string
	// value is the field itself, settable.
	value reflect.Value
}

// configSchema is the list of keys of one Config value, found by walking
// its yaml tags, with the fields to set.
type configSchema struct {
	// fields are the leaves in struct order.
	fields []*configField
	// byKey indexes fields by dotted key.
	byKey map[string]*configField
	// sections holds the dotted keys of nested structs (e.g. "badger").
	sections map[string]bool
}

// newConfigSchema walks cfg; setting a field of the schema sets it in cfg.
func newConfigSchema(cfg *supervisors.Config) *configSchema {
	s := &configSchema{byKey: make(map[string]*configField), sections: make(map[string]bool)}
	s.walk(reflect.ValueOf(cfg).Elem(), "")
	return s
}

// walk adds the exported fields of struct v, their keys prefixed by prefix.
// A field's key is its yaml tag name (the lower-cased field name when the
// tag has none, as yaml.v3 does); "-" skips it; nested structs are sections
// whose keys join with '.', or are flattened with ",inline".
func (s *configSchema) walk(v reflect.Value, prefix string) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		if sf.Type.Kind() == reflect.Struct {
			if slices.Contains(strings.Split(opts, ","), "inline") {
				s.walk(v.Field(i), prefix)
				continue
			}
			s.sections[prefix+name] = true
			s.walk(v.Field(i), prefix+name+".")
			continue
		}
		key := prefix + name
		f := &configField{
			key:   key,
			env:   "HERALD_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")),
			value: v.Field(i),
		}
		s.fields = append(s.fields, f)
		s.byKey[key] = f
	}
}

// applyEnv sets every field whose environment variable lookupEnv finds.
// An empty value counts as set.
func (s *configSchema) applyEnv(lookupEnv func(string) (string, bool)) error {
	var errs []error
	for _, f := range s.fields {
		text, ok := lookupEnv(f.env)
		if !ok {
			continue
		}
		if err := setValue(f.value, text); err != nil {
			errs = append(errs, &configError{kind: sourceEnv, name: f.env, key: f.key, err: err})
		}
	}
	return errors.Join(errs...)
}

// applyFlags sets the field of every flag of nf the user set on fs.
func (s *configSchema) applyFlags(fs *flag.FlagSet, nf *nodeFlags) error {
	var errs []error
	fs.Visit(func(fl *flag.Flag) {
		key, ok := nf.keys[fl.Name]
		if !ok {
			return
		}
		f, ok := s.byKey[key]
		if !ok {
			errs = append(errs, &configError{kind: sourceFlag, name: fl.Name, key: key, err: errUnknownKey})
			return
		}
		if err := setValue(f.value, fl.Value.String()); err != nil {
			errs = append(errs, &configError{kind: sourceFlag, name: fl.Name, key: key, err: err})
		}
	})
	return errors.Join(errs...)
}

// applyFile reads the YAML file at path and applies it.
func (s *configSchema) applyFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return &configError{kind: sourceFile, name: path, err: err}
	}
	return s.applyYAML(path, data)
}

// applyYAML applies one YAML document; name is the file name for errors.
// The document is a mapping of the Config's yaml keys, nested for sections;
// a key Config lacks is an error, as with yaml.v3's KnownFields(true). An
// empty document changes nothing. Scalars are parsed by setValue, the code
// path the environment uses, so both accept the same spellings.
func (s *configSchema) applyYAML(name string, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return &configError{kind: sourceFile, name: name, err: err}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errMultipleDocuments
		}
		return &configError{kind: sourceFile, name: name, line: next.Line, err: err}
	}
	var errs []error
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	s.applyMapping(name, root, "", &errs)
	return errors.Join(errs...)
}

// applyMapping applies mapping node n to the keys under prefix ("" or a
// section key followed by '.'), appending errors to errs.
func (s *configSchema) applyMapping(name string, n *yaml.Node, prefix string, errs *[]error) {
	section := strings.TrimSuffix(prefix, ".")
	fail := func(line int, key string, err error) {
		*errs = append(*errs, &configError{kind: sourceFile, name: name, line: line, key: key, err: err})
	}
	n, err := resolveAlias(n)
	if err != nil {
		fail(n.Line, section, err)
		return
	}
	if isNull(n) {
		return // an empty file or section changes nothing
	}
	if n.Kind != yaml.MappingNode {
		fail(n.Line, section, fmt.Errorf("%w: want a mapping of keys, got %s", errBadValue, kindName(n)))
		return
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := resolveAlias(n.Content[i])
		if err != nil || k.Kind != yaml.ScalarNode {
			fail(n.Content[i].Line, section, fmt.Errorf("%w: a key must be a plain name", errBadValue))
			continue
		}
		key := prefix + k.Value
		if line, dup := seen[key]; dup {
			fail(k.Line, key, fmt.Errorf("%w (first set on line %d)", errDuplicateKey, line))
			continue
		}
		seen[key] = k.Line
		v := n.Content[i+1]
		switch f, ok := s.byKey[key]; {
		case ok:
			if err := setNode(f.value, v); err != nil {
				fail(v.Line, key, err)
			}
		case s.sections[key]:
			s.applyMapping(name, v, key+".", errs)
		default:
			fail(k.Line, key, errUnknownKey)
		}
	}
}

// setNode sets v from the YAML value node n, which must be a non-null
// scalar.
func setNode(v reflect.Value, n *yaml.Node) error {
	n, err := resolveAlias(n)
	if err != nil {
		return err
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: want a single value, got %s", errBadValue, kindName(n))
	}
	if isNull(n) {
		return fmt.Errorf("%w: the key has no value (write \"\" for an empty string)", errBadValue)
	}
	return setValue(v, n.Value)
}

// resolveAlias follows YAML aliases (*name) to the anchored node.
func resolveAlias(n *yaml.Node) (*yaml.Node, error) {
	for range 16 {
		if n.Kind != yaml.AliasNode {
			return n, nil
		}
		if n.Alias == nil {
			break
		}
		n = n.Alias
	}
	return n, fmt.Errorf("%w: unresolvable alias", errBadValue)
}

// isNull reports whether n is a YAML null (~, null, or nothing).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName names n's kind for error messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	default:
		return "something else"
	}
}

var durationType = reflect.TypeFor[time.Duration]()

// setValue parses text for v's type and sets v. It accepts: any text for
// strings; strconv.ParseBool spellings for bools; Go duration syntax with
// days ("10s", "1m30s", "7d", parseDuration) for time.Duration; for integers a decimal number,
// optionally followed by KiB, MiB or GiB (case-insensitive, space allowed),
// so byte sizes read naturally. Errors wrap errBadValue.
func setValue(v reflect.Value, text string) error {
	if v.Type() == durationType {
		d, err := parseDuration(text)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return fmt.Errorf("%w %q: want true or false", errBadValue, text)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := parseSize(text)
		if err != nil {
			return err
		}
		if v.OverflowInt(n) {
			return fmt.Errorf("%w %q: out of range for %s", errBadValue, text, v.Type())
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := parseSize(text)
		if err != nil {
			return err
		}
		if n < 0 || v.OverflowUint(uint64(n)) {
			return fmt.Errorf("%w %q: out of range for %s", errBadValue, text, v.Type())
		}
		v.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil {
			return fmt.Errorf("%w %q: want a number such as 0.01", errBadValue, text)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("%w %s", errUnsupportedType, v.Type())
	}
	return nil
}

// sizeSuffixes are the multipliers parseSize accepts.
var sizeSuffixes = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10},
	{"MiB", 1 << 20},
	{"GiB", 1 << 30},
}

// parseSize parses a decimal integer, optionally followed by KiB, MiB or
// GiB: "1024", "16MiB", "2 GiB". Errors wrap errBadValue.
func parseSize(text string) (int64, error) {
	s := strings.TrimSpace(text)
	mult := int64(1)
	for _, u := range sizeSuffixes {
		if len(s) > len(u.suffix) && strings.EqualFold(s[len(s)-len(u.suffix):], u.suffix) {
			s = strings.TrimSpace(s[:len(s)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%w %q: out of range", errBadValue, text)
		}
		return 0, fmt.Errorf("%w %q: want an integer, optionally followed by KiB, MiB or GiB", errBadValue, text)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("%w %q: out of range", errBadValue, text)
	}
	return n * mult, nil
}

// formatValue formats v the way setValue parses it back: durations in Go
// syntax, integers in plain decimal.
func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		return fmt.Sprint(v.Interface())
	}
}
