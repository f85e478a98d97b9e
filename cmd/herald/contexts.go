package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"gopkg.in/yaml.v3"
)

// A context, as in `nats context` and rpk profiles, names a node and the
// credentials to use with it, so that the client commands work from any
// directory without flags. Contexts live in one YAML file in the user's
// config directory: $HERALD_CONFIG_DIR/contexts.yaml, or
// os.UserConfigDir()/herald/contexts.yaml (~/.config/herald on Linux). The
// file holds tokens, so it is written 0600 in a 0700 directory.

// contextsFile is the name of the contexts file in the config directory.
const contextsFile = "contexts.yaml"

// cliContext is one saved context. Empty fields are not set: the flag, the
// environment or the built-in default decides.
type cliContext struct {
	// Name names the context (`herald context use NAME`, --context NAME).
	Name string `yaml:"name" json:"name"`
	// Server is the node's address, or a comma-separated list of seeds.
	Server string `yaml:"server,omitempty" json:"server,omitempty"`
	// CA is the absolute path of the CA file to trust.
	CA string `yaml:"ca,omitempty" json:"ca,omitempty"`
	// Token authenticates the client.
	Token string `yaml:"token,omitempty" json:"-"`
	// Tenant is the tenant a bare or two-part stream name is in.
	Tenant string `yaml:"tenant,omitempty" json:"tenant,omitempty"`
	// Cert and CertKey are a client certificate for mutual TLS (absolute
	// paths).
	Cert    string `yaml:"cert,omitempty" json:"cert,omitempty"`
	CertKey string `yaml:"cert_key,omitempty" json:"cert_key,omitempty"`
}

// contextStore is the contexts file's content.
type contextStore struct {
	// Current names the context used when neither --context nor
	// HERALD_CONTEXT names one; empty for none.
	Current string `yaml:"current,omitempty"`
	// Contexts are the saved contexts, in the order they were added.
	Contexts []cliContext `yaml:"contexts"`
}

// configDir returns the CLI's config directory: $HERALD_CONFIG_DIR, else
// userConfigDir()/herald.
func configDir(getenv func(string) string, userConfigDir func() (string, error)) (string, error) {
	if d := getenv("HERALD_CONFIG_DIR"); d != "" {
		return d, nil
	}
	d, err := userConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the config directory for contexts (set HERALD_CONFIG_DIR): %w", err)
	}
	return filepath.Join(d, "herald"), nil
}

// loadContexts reads the contexts file of dir; a missing file is an empty
// store.
func loadContexts(dir string) (*contextStore, error) {
	path := filepath.Join(dir, contextsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &contextStore{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read contexts: %w", err)
	}
	s := &contextStore{}
	if err := yaml.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("contexts file %s: %w", path, err)
	}
	return s, nil
}

// save writes the store to dir atomically (a temporary file renamed over
// the old one), creating dir if needed.
func (s *contextStore) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	f, err := os.CreateTemp(dir, contextsFile+".*")
	if err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename there is nothing to remove
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("save contexts: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("save contexts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, contextsFile)); err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	return nil
}

// find returns the context named name, or nil.
func (s *contextStore) find(name string) *cliContext {
	i := slices.IndexFunc(s.Contexts, func(c cliContext) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &s.Contexts[i]
}

// remove deletes the context named name and reports whether there was one;
// removing the current context leaves none current.
func (s *contextStore) remove(name string) bool {
	n := len(s.Contexts)
	s.Contexts = slices.DeleteFunc(s.Contexts, func(c cliContext) bool { return c.Name == name })
	if s.Current == name {
		s.Current = ""
	}
	return len(s.Contexts) < n
}

// selectedContext returns the context a client command uses: the one named
// by --context (flag), else by HERALD_CONTEXT, else the current one; nil
// when none is. A name that is not saved is an error.
func selectedContext(flag string, getenv func(string) string, userConfigDir func() (string, error)) (*cliContext, error) {
	name, from := flag, "--context"
	if name == "" {
		name, from = getenv("HERALD_CONTEXT"), "HERALD_CONTEXT"
	}
	if name == "" {
		// Without HERALD_CONFIG_DIR and a home directory there are no
		// contexts, and no need for them.
		dir, err := configDir(getenv, userConfigDir)
		if err != nil {
			return nil, nil
		}
		s, err := loadContexts(dir)
		if err != nil {
			return nil, err
		}
		if s.Current == "" {
			return nil, nil
		}
		c := s.find(s.Current)
		if c == nil {
			return nil, fmt.Errorf("the current context %q is not in %s (herald context use NAME picks another)", s.Current, filepath.Join(dir, contextsFile))
		}
		return c, nil
	}
	dir, err := configDir(getenv, userConfigDir)
	if err != nil {
		return nil, err
	}
	s, err := loadContexts(dir)
	if err != nil {
		return nil, err
	}
	c := s.find(name)
	if c == nil {
		return nil, usageErrorf("%s: no context %q (herald context ls lists them)", from, name)
	}
	return c, nil
}
