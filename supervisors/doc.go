// Package supervisors builds a Herald node: it opens storage, spawns the
// actor tree (node supervisor, catalog, shards, storage writer, listener and
// connections), runs the QUIC and HTTP listeners, and decides what each
// actor's failure does. cmd/herald's `node` command is a thin shell around
// Node.
package supervisors
