package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// streamCmd is a parsed `herald stream` command line.
type streamCmd struct {
	conn *clientFlags
	// op is create, describe, edit, list or delete.
	op string
	// name is the stream (create, describe, delete).
	name client.StreamName
	// tenant and namespace filter list; tenant "" lets the node pick the
	// credentials' own.
	tenant, namespace string
	// allTenants lists every tenant the CLI knows of (list --all-tenants).
	allTenants bool
	// config is the stream config for create (edit: its Replicas).
	config client.StreamConfig
	// force deletes without asking (delete --force).
	force bool
	// json and yaml select the output (--output, --json); neither is a
	// table.
	json, yaml bool
}

// setFormat sets json and yaml from an output format.
func setFormat(f outputFormat, json, yaml *bool) {
	*json, *yaml = f == outputJSON, f == outputYAML
}

// format returns the output format json and yaml select.
func format(json, yaml bool) outputFormat {
	switch {
	case json:
		return outputJSON
	case yaml:
		return outputYAML
	}
	return outputTable
}

// queueDefaultsHelp says what "default" means in a stream's description.
var queueDefaultsHelp = fmt.Sprintf(`A queue bound of 0 is shown as "default": the node's subscriber_queue_capacity and
subscriber_queue_max_bytes, whose built-in values are shown beside it (%d batches, %s);
a node configured otherwise applies its own.`, supervisors.DefaultConfig().SubscriberQueueCapacity,
	formatSize(supervisors.DefaultConfig().SubscriberQueueMaxBytes))

func newStreamCmd(env *cliEnv) *cobra.Command {
	c := parentCmd("stream", "Create, describe, edit, list and delete streams",
		"Create, describe, edit, list and delete streams.\n\n"+streamArgHelp,
		`  herald stream create acme/shop/orders --shards 4 --retention-age 7d --retention-bytes 10GiB
  herald stream describe acme/shop/orders
  herald stream edit acme/shop/orders --replicas 3
  herald stream list acme
  herald stream delete acme/shop/orders --force`)
	conn := registerClientFlags(c.PersistentFlags())
	c.AddCommand(newStreamCreateCmd(env, conn), newStreamDescribeCmd(env, conn), newStreamEditCmd(env, conn), newStreamListCmd(env, conn), newStreamDeleteCmd(env, conn))
	return c
}

// streamOp is the RunE of a stream subcommand: it resolves the connection
// flags and the output, lets parse fill in the rest, and runs the command.
func streamOp(env *cliEnv, conn *clientFlags, out *outputFlags, op string, parse func(*cobra.Command, *streamCmd, []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		cmd := &streamCmd{conn: conn, op: op}
		if err := conn.resolve(c.Flags(), env); err != nil {
			return err
		}
		f, err := out.resolve(c)
		if err != nil {
			return err
		}
		setFormat(f, &cmd.json, &cmd.yaml)
		if err := parse(c, cmd, args); err != nil {
			return err
		}
		return parsedOrRun(env, cmd, func() error { return cmd.run(context.Background(), env) })
	}
}

// oneStream parses the single STREAM argument of op.
func (cmd *streamCmd) oneStream(args []string) error {
	if len(args) != 1 {
		return usageErrorf("%s takes one STREAM argument", cmd.op)
	}
	var err error
	cmd.name, err = parseStreamArg(args[0], cmd.conn.tenant)
	return err
}

func newStreamCreateCmd(env *cliEnv, conn *clientFlags) *cobra.Command {
	var out outputFlags
	var (
		shards                     int
		routing, overflow          string
		ephemeral                  bool
		queueCap                   int
		queueBytes, retentionBytes sizeFlag
		retentionAge               durationFlag
		replicas                   int
	)
	c := &cobra.Command{
		Use:   "create STREAM [flags]",
		Short: "Create a stream (or check that it exists with this configuration)",
		Long: `Create a stream and print its description. Creating a stream that exists with the same
configuration succeeds; with another, it fails with stream_exists.

Sizes take KiB, MiB or GiB (10GiB) and durations d, h, m, s (7d, 1d12h, 90m), as in the
node's config file.

` + streamArgHelp,
		Example: `  herald stream create orders                                  # default/default/orders: 1 shard, durable
  herald stream create acme/shop/orders --shards 4 --routing jump
  herald stream create acme/shop/events --ephemeral --overflow drop_old
  herald stream create acme/shop/audit --retention-age 7d --retention-bytes 10GiB
  herald stream create orders --shards 3 --replicas 3 --server 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420`,
	}
	f := c.Flags()
	f.IntVar(&shards, "shards", 1, "number of shards")
	f.StringVar(&routing, "routing", "hash", "how a key picks its shard: hash (hash % shards) or jump (jump consistent hashing)")
	f.BoolVar(&ephemeral, "ephemeral", false, "keep the stream in memory only")
	f.StringVar(&overflow, "overflow", "drop_new", "what a full subscriber queue does to a live batch: drop_new, drop_old or block")
	f.IntVar(&queueCap, "queue-capacity", 0, "subscriber queue capacity in batches (0: the node's default)")
	f.Var(&queueBytes, "queue-max-bytes", "subscriber queue bound in payload bytes, e.g. 64MiB (0: the node's default)")
	f.Var(&retentionAge, "retention-age", "delete whole batches older than this, e.g. 7d or 72h (0: keep forever)")
	f.Var(&retentionBytes, "retention-bytes", "delete a shard's oldest whole batches past this size, e.g. 10GiB (0: no bound)")
	f.IntVar(&replicas, "replicas", 1, "nodes of the cluster holding each shard (1: the node asked alone); a replicated stream is durable")
	addOutputFlags(c, &out, "the stream's description, as stream describe prints it")
	completeWords(c, "routing", "hash", "jump")
	completeWords(c, "overflow", "drop_new", "drop_old", "block")
	c.RunE = streamOp(env, conn, &out, "create", func(_ *cobra.Command, cmd *streamCmd, args []string) error {
		if err := cmd.oneStream(args); err != nil {
			return err
		}
		cfg := client.StreamConfig{Shards: shards, Durable: !ephemeral, QueueCapacity: queueCap,
			QueueMaxBytes: int64(queueBytes), RetentionAge: time.Duration(retentionAge), RetentionBytes: int64(retentionBytes)}
		if replicas > 1 {
			cfg.Replicas = replicas
		}
		var err error
		if cfg.Routing, err = parseRouting(routing); err != nil {
			return err
		}
		if cfg.Overflow, err = parseOverflow(overflow); err != nil {
			return err
		}
		switch {
		case cfg.Shards < 1:
			return usageErrorf("--shards must be at least 1")
		case replicas < 1 || replicas > 255:
			return usageErrorf("--replicas must be between 1 and 255")
		case replicas > 1 && ephemeral:
			return usageErrorf("--replicas needs a durable stream: drop --ephemeral")
		case cfg.QueueCapacity < 0 || int64(cfg.QueueCapacity) > 1<<32-1:
			return usageErrorf("--queue-capacity must be between 0 and %d", uint32(1<<32-1))
		case cfg.QueueMaxBytes < 0:
			return usageErrorf("--queue-max-bytes must not be negative")
		case cfg.RetentionAge < 0:
			return usageErrorf("--retention-age must not be negative")
		case cfg.RetentionBytes < 0:
			return usageErrorf("--retention-bytes must not be negative")
		}
		cmd.config = cfg
		return nil
	})
	return c
}

func newStreamDescribeCmd(env *cliEnv, conn *clientFlags) *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "describe STREAM",
		Short: "Describe a stream: its configuration and each shard's tail",
		Long: `Describe a stream: its configuration, when it was created, and each shard's tail (the
offset its next record will get). For a replicated stream, each shard's leader, term, and
replicas with how far each is behind the leader: raft entries, and the records and bytes
of the shard log it lacks ("2 (8 entries, 24 records, 1536 bytes)"; "0" when caught up); with
several --server addresses each shard's row is its leader's view (only the leader knows
every replica's lag).

` + queueDefaultsHelp + `

` + streamArgHelp,
		Example: `  herald stream describe orders
  herald stream describe acme/shop/orders -o json`,
	}
	addOutputFlags(c, &out, "an object: stream, shards, routing, durable, overflow, queue_capacity, queue_max_bytes, retention_age_ms, retention_bytes, replicas, created, tails, and for a replicated stream replication: per shard its leader, term, commit and replicas (node, lag, lag_records, lag_bytes; null where unknown)")
	c.RunE = streamOp(env, conn, &out, "describe", func(_ *cobra.Command, cmd *streamCmd, args []string) error {
		return cmd.oneStream(args)
	})
	return c
}

func newStreamEditCmd(env *cliEnv, conn *clientFlags) *cobra.Command {
	var out outputFlags
	var replicas int
	c := &cobra.Command{
		Use:   "edit STREAM --replicas N",
		Short: "Change a cluster stream's replica count",
		Long: `Change how many nodes of a cluster hold each shard of a stream, and print the stream's
description. The new count is the cluster's when this returns; each shard's raft group then
moves to it on its own: new replicas join as learners and copy the shard's log, then vote
once caught up; replicas no longer placed leave, the leader last (after handing leadership
over). Publishing and subscribing go on throughout. Follow the change with
stream describe: a new replica's lag falls to 0, and the replicas listed are the new ones.

Only a cluster's streams have replicas to change (every durable stream of a node started with
--peers); the count goes from 1 to the number of nodes.

` + streamArgHelp,
		Example: `  herald stream edit orders --replicas 3 --server 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420
  herald stream edit orders --replicas 1`,
	}
	c.Flags().IntVar(&replicas, "replicas", 0, "nodes of the cluster to hold each shard (required)")
	addOutputFlags(c, &out, "the stream's description, as stream describe prints it")
	c.RunE = streamOp(env, conn, &out, "edit", func(_ *cobra.Command, cmd *streamCmd, args []string) error {
		if err := cmd.oneStream(args); err != nil {
			return err
		}
		if replicas < 1 || replicas > 255 {
			return usageErrorf("--replicas must be between 1 and 255")
		}
		cmd.config.Replicas = replicas
		return nil
	})
	return c
}

func newStreamListCmd(env *cliEnv, conn *clientFlags) *cobra.Command {
	var out outputFlags
	var allTenants bool
	c := &cobra.Command{
		Use:     "list [TENANT[/NAMESPACE]]",
		Aliases: []string{"ls"},
		Short:   "List the streams of a tenant",
		Long: `List the streams of a tenant, or of one namespace of it, as a table: the first line says
which tenant is listed.

Without TENANT it lists the current context's tenant; without a tenant in a context, the
tenant the credentials are bound to ("default" on a dev node, which has no credentials).
A credential bound to a tenant may list only that tenant.

--all-tenants lists every tenant's streams. Only credentials of every tenant may: a node
without authentication (dev mode); for credentials bound to a tenant it says so on stderr
and lists that tenant. Against an
older node that cannot enumerate tenants it lists those the CLI knows of: "default" and the
tenants of your saved contexts, skipping those the credentials may not list.`,
		Example: `  herald stream list
  herald stream list acme
  herald stream list acme/shop -o json
  herald stream list --all-tenants`,
	}
	c.Flags().BoolVarP(&allTenants, "all-tenants", "A", false, "list every tenant's streams (credentials of every tenant only)")
	addOutputFlags(c, &out, `an object: {"tenants": [...], "namespace": "", "streams": [each as stream describe prints it]}`)
	c.RunE = streamOp(env, conn, &out, "list", func(_ *cobra.Command, cmd *streamCmd, args []string) error {
		cmd.allTenants = allTenants
		switch len(args) {
		case 0:
			if conn.context != nil && conn.context.Tenant != "" {
				cmd.tenant = conn.context.Tenant
			}
			// Otherwise the node lists the credentials' tenant ("default"
			// on a dev node).
		case 1:
			if allTenants {
				return usageErrorf("--all-tenants does not take a TENANT argument")
			}
			cmd.tenant, cmd.namespace, _ = strings.Cut(args[0], "/")
			if cmd.tenant == "" || strings.Contains(cmd.namespace, "/") {
				return usageErrorf("list takes TENANT or TENANT/NAMESPACE, got %q", args[0])
			}
		default:
			return usageErrorf("list takes at most one TENANT[/NAMESPACE] argument")
		}
		return nil
	})
	return c
}

func newStreamDeleteCmd(env *cliEnv, conn *clientFlags) *cobra.Command {
	var out outputFlags
	var force bool
	c := &cobra.Command{
		Use:   "delete STREAM",
		Short: "Delete a stream and all its records",
		Long: `Delete a stream and all its records, for good.

On a terminal it asks for confirmation first, unless --force. When standard input is not
a terminal (a script, a pipe) it deletes nothing without --force: there is nobody to ask.

` + streamArgHelp,
		Example: `  herald stream delete acme/shop/orders          # asks: Delete stream acme/shop/orders ...? [y/N]
  herald stream delete acme/shop/orders --force  # in scripts`,
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "delete without asking for confirmation")
	addOutputFlags(c, &out, `an object: {"deleted": "TENANT/NAMESPACE/STREAM"}`)
	c.RunE = streamOp(env, conn, &out, "delete", func(_ *cobra.Command, cmd *streamCmd, args []string) error {
		cmd.force = force
		return cmd.oneStream(args)
	})
	return c
}

// completeWords offers words as the completions of flag name.
func completeWords(c *cobra.Command, name string, words ...string) {
	_ = c.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	})
}

// parseRouting parses --routing.
func parseRouting(s string) (client.Routing, error) {
	switch s {
	case "hash":
		return client.RoutingHash, nil
	case "jump":
		return client.RoutingJump, nil
	}
	return 0, usageErrorf("--routing %q: want hash or jump", s)
}

// parseOverflow parses --overflow.
func parseOverflow(s string) (client.Overflow, error) {
	switch s {
	case "drop_new":
		return client.OverflowDropNew, nil
	case "drop_old":
		return client.OverflowDropOld, nil
	case "block":
		return client.OverflowBlock, nil
	}
	return 0, usageErrorf("--overflow %q: want drop_new, drop_old or block", s)
}

// errNotConfirmed is the error of a delete the user did not confirm.
var errNotConfirmed = errors.New("not confirmed: nothing deleted")

// confirm prints prompt on stderr and reads the answer from stdin: nil for
// y or yes, errNotConfirmed for anything else, an end of input, or ctx
// ending first (Ctrl-C at the prompt). No --timeout runs meanwhile: the
// user may take their time.
func confirm(ctx context.Context, env *cliEnv, prompt string) error {
	fmt.Fprint(env.stderr, prompt+" [y/N] ")
	answer := make(chan string, 1)
	go func() { // ends with the input; the process ends it otherwise
		a, _ := bufio.NewReader(env.stdin).ReadString('\n')
		answer <- a
	}()
	select {
	case a := <-answer:
		if a = strings.ToLower(strings.TrimSpace(a)); a == "y" || a == "yes" {
			return nil
		}
		return errNotConfirmed
	case <-ctx.Done():
		fmt.Fprintln(env.stderr)
		return errNotConfirmed
	}
}

// run runs the stream command: create and describe print the stream's
// description, list a table of streams, delete "deleted STREAM".
func (cmd *streamCmd) run(ctx context.Context, env *cliEnv) error {
	if cmd.op == "delete" && !cmd.force && !env.isTerminal(env.stdin) {
		return usageErrorf("not deleting %s: standard input is not a terminal, so nobody can confirm; pass --force to delete it", cmd.name)
	}
	if (cmd.op == "create" || cmd.op == "describe" || cmd.op == "edit") && cmd.conn.clustered() {
		return cmd.runCluster(ctx, env)
	}
	c, err := cmd.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cmd.conn.timeout)
	defer cancel()
	f := format(cmd.json, cmd.yaml)

	switch cmd.op {
	case "create", "describe", "edit":
		var info client.StreamInfo
		switch cmd.op {
		case "create":
			info, err = c.CreateStream(ctx, cmd.name, cmd.config)
		case "edit":
			info, err = c.SetReplicas(ctx, cmd.name, cmd.config.Replicas)
		default:
			info, err = c.DescribeStream(ctx, cmd.name)
		}
		if err != nil {
			return err
		}
		if f.structured() {
			return writeValue(env.stdout, f, streamInfoJSONOf(info))
		}
		return writeStreamInfo(env.stdout, info)
	case "list":
		return cmd.list(ctx, c, env, f)
	case "delete":
		if !cmd.force {
			info, err := c.DescribeStream(ctx, cmd.name)
			if err != nil {
				return err
			}
			var records uint64
			for _, t := range info.Tails {
				records += t
			}
			if err := confirm(parent, env, fmt.Sprintf("Delete stream %s (%d shards, %d records written) and all its records?", cmd.name, len(info.Tails), records)); err != nil {
				return err
			}
		}
		// The delete's own --timeout, after however long the prompt took.
		ctx, cancel := context.WithTimeout(parent, cmd.conn.timeout)
		defer cancel()
		if err := c.DeleteStream(ctx, cmd.name); err != nil {
			return err
		}
		if f.structured() {
			return writeValue(env.stdout, f, map[string]string{"deleted": cmd.name.String()})
		}
		_, err := fmt.Fprintf(env.stdout, "deleted %s\n", cmd.name)
		return err
	}
	return fmt.Errorf("unknown stream operation %q", cmd.op)
}

// list lists one tenant's streams, or with --all-tenants those of every
// tenant: the node enumerates them, or, a node without that feature, the
// CLI lists every tenant it knows of.
func (cmd *streamCmd) list(ctx context.Context, c *client.Client, env *cliEnv, f outputFormat) error {
	tenants := []string{cmd.tenant}
	var infos []client.StreamInfo
	var listed []string
	if cmd.allTenants {
		list, err := c.ListStreams(ctx, client.AllTenants, cmd.namespace)
		switch {
		case err == nil:
			tenants = nil
			listed = []string{}
			for _, info := range list {
				if !slices.Contains(listed, info.Name.Tenant) {
					listed = append(listed, info.Name.Tenant)
				}
			}
			infos = list
		case errors.Is(err, errors.ErrUnsupported):
			tenants = knownTenants(env)
		case errors.Is(err, client.ErrPermissionDenied):
			// Credentials bound to a tenant see that tenant: list it.
			fmt.Fprintf(env.stderr, "herald stream list: the credentials may not list every tenant (%s); listing their own\n",
				strings.TrimPrefix(err.Error(), "herald: "))
			tenants = []string{""}
		default:
			return err
		}
	}
	for _, tenant := range tenants {
		list, err := c.ListStreams(ctx, tenant, cmd.namespace)
		if cmd.allTenants && errors.Is(err, client.ErrPermissionDenied) {
			fmt.Fprintf(env.stderr, "herald stream list: skipped tenant %s: the credentials may not list it\n", tenant)
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case tenant != "":
		case len(list) > 0:
			tenant = list[0].Name.Tenant
		case !cmd.conn.hasCredentials():
			tenant = "default" // a node that took no credentials is in dev mode
		}
		listed = append(listed, tenant)
		infos = append(infos, list...)
	}
	if f.structured() {
		j := streamListJSON{Tenants: listed, Namespace: cmd.namespace, Streams: make([]streamInfoJSON, len(infos))}
		for i, info := range infos {
			j.Streams[i] = streamInfoJSONOf(info)
		}
		return writeValue(env.stdout, f, j)
	}
	return writeStreamList(env.stdout, listed, cmd.namespace, cmd.allTenants, infos)
}

// knownTenants returns "default" and the tenant of every saved context, in
// that order, each once.
func knownTenants(env *cliEnv) []string {
	tenants := []string{"default"}
	dir, err := configDir(env.getenv, env.userConfigDir)
	if err != nil {
		return tenants
	}
	s, err := loadContexts(dir)
	if err != nil {
		return tenants
	}
	for _, c := range s.Contexts {
		if c.Tenant != "" && !slices.Contains(tenants, c.Tenant) {
			tenants = append(tenants, c.Tenant)
		}
	}
	return tenants
}

// writeStreamList prints a caption saying what is listed, then a table of
// the streams.
func writeStreamList(w io.Writer, tenants []string, namespace string, all bool, infos []client.StreamInfo) error {
	what := "tenant " + strings.Join(tenants, ", ")
	switch {
	case len(tenants) == 1 && tenants[0] == "":
		what = "the credentials' tenant"
	case len(tenants) > 1:
		what = "tenants " + strings.Join(tenants, ", ")
	}
	if all {
		what += ` ("default" and your contexts' tenants: the node cannot enumerate tenants)`
	}
	if namespace != "" {
		what += ", namespace " + namespace
	}
	if len(infos) == 0 {
		_, err := fmt.Fprintf(w, "No streams in %s.\n", what)
		return err
	}
	noun := "streams"
	if len(infos) == 1 {
		noun = "stream"
	}
	fmt.Fprintf(w, "%d %s in %s:\n", len(infos), noun, what)
	t := newTable("STREAM", "SHARDS", "DURABLE", "ROUTING", "OVERFLOW", "RETENTION", "RECORDS", "CREATED")
	for _, info := range infos {
		cfg := info.Config
		var records uint64
		for _, tail := range info.Tails {
			records += tail
		}
		appendRow(t, info.Name.String(), strconv.Itoa(cfg.Shards), strconv.FormatBool(cfg.Durable), cfg.Routing.String(),
			cfg.Overflow.String(), formatRetention(cfg), strconv.FormatUint(records, 10), info.Created.UTC().Format(time.RFC3339))
	}
	return writeTable(w, t)
}

// formatRetention prints a stream's retention bounds: "7d", "10GiB",
// "7d, 10GiB" or "none".
func formatRetention(cfg client.StreamConfig) string {
	var parts []string
	if cfg.RetentionAge > 0 {
		parts = append(parts, formatDuration(cfg.RetentionAge))
	}
	if cfg.RetentionBytes > 0 {
		parts = append(parts, formatSize(cfg.RetentionBytes))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeStreamInfo prints a stream's description: a table of its settings,
// then one of its shards' tails.
func writeStreamInfo(w io.Writer, info client.StreamInfo) error {
	cfg := info.Config
	defaults := supervisors.DefaultConfig()
	queueCap := strconv.Itoa(cfg.QueueCapacity)
	if cfg.QueueCapacity == 0 {
		queueCap = fmt.Sprintf("default (%d)", defaults.SubscriberQueueCapacity)
	}
	queueBytes := formatSize(cfg.QueueMaxBytes)
	if cfg.QueueMaxBytes == 0 {
		queueBytes = fmt.Sprintf("default (%s)", formatSize(defaults.SubscriberQueueMaxBytes))
	}
	age, bytes := "forever", "no bound"
	if cfg.RetentionAge > 0 {
		age = formatDuration(cfg.RetentionAge)
	}
	if cfg.RetentionBytes > 0 {
		bytes = formatSize(cfg.RetentionBytes)
	}
	t := newTable()
	for _, row := range [][2]string{
		{"STREAM", info.Name.String()},
		{"SHARDS", strconv.Itoa(cfg.Shards)},
		{"DURABLE", strconv.FormatBool(cfg.Durable)},
		{"ROUTING", cfg.Routing.String()},
		{"OVERFLOW", cfg.Overflow.String()},
		{"QUEUE_CAPACITY", queueCap},
		{"QUEUE_MAX_BYTES", queueBytes},
		{"RETENTION_AGE", age},
		{"RETENTION_BYTES", bytes},
		{"CREATED", info.Created.UTC().Format(time.RFC3339)},
	} {
		appendRow(t, row[0], row[1])
	}
	if cfg.Replicas > 1 {
		appendRow(t, "REPLICAS", strconv.Itoa(cfg.Replicas))
	}
	if err := writeTable(w, t); err != nil {
		return err
	}
	if len(info.Replication) > 0 {
		return writeReplicatedShards(w, info)
	}
	t = newTable("SHARD", "TAIL")
	for i, tail := range info.Tails {
		appendRow(t, strconv.Itoa(i), strconv.FormatUint(tail, 10))
	}
	fmt.Fprintln(w)
	return writeTable(w, t)
}

// streamInfoJSON is the json and yaml form of a stream's description. A
// queue bound of 0 is the node's default; a retention bound of 0, none.
type streamInfoJSON struct {
	Stream         string   `json:"stream"`
	Shards         int      `json:"shards"`
	Routing        string   `json:"routing"`
	Durable        bool     `json:"durable"`
	Overflow       string   `json:"overflow"`
	QueueCapacity  int      `json:"queue_capacity"`
	QueueMaxBytes  int64    `json:"queue_max_bytes"`
	RetentionAgeMS int64    `json:"retention_age_ms"`
	RetentionBytes int64    `json:"retention_bytes"`
	Replicas       int      `json:"replicas"`
	Created        string   `json:"created"`
	Tails          []uint64 `json:"tails"`
	// Replication is a replicated stream's, per shard.
	Replication []shardReplicationJSON `json:"replication,omitempty"`
}

// streamListJSON is the json and yaml form of a listing.
type streamListJSON struct {
	Tenants   []string         `json:"tenants"`
	Namespace string           `json:"namespace"`
	Streams   []streamInfoJSON `json:"streams"`
}

// streamInfoJSONOf returns the json form of info.
func streamInfoJSONOf(info client.StreamInfo) streamInfoJSON {
	cfg := info.Config
	tails := info.Tails
	if tails == nil {
		tails = []uint64{}
	}
	return streamInfoJSON{Stream: info.Name.String(), Shards: cfg.Shards, Routing: cfg.Routing.String(), Durable: cfg.Durable,
		Overflow: cfg.Overflow.String(), QueueCapacity: cfg.QueueCapacity, QueueMaxBytes: cfg.QueueMaxBytes,
		RetentionAgeMS: cfg.RetentionAge.Milliseconds(), RetentionBytes: cfg.RetentionBytes, Replicas: max(cfg.Replicas, 1),
		Created: info.Created.UTC().Format(time.RFC3339Nano), Tails: tails, Replication: replicationJSONOf(info)}
}
