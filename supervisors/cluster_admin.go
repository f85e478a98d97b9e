package supervisors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// Changing the cluster: an operator drains, undrains, adds or removes a
// node through any node's HTTP listener (POST /cluster/drain, /undrain,
// /add, /remove; `herald cluster drain|undrain|add|remove`). The node
// proposes the change to the metadata group and answers once it applied
// here. With credentials configured (auth_tokens_file), the request must
// carry a token holding the cluster permission; in dev mode anyone who
// reaches the listener may.

// ClusterChange is the body of a POST /cluster/drain, /undrain, /add or
// /remove.
type ClusterChange struct {
	Node uint64 `json:"node"`
	// Addr is the address an added node's peers reach it at (add).
	Addr string `json:"addr,omitempty"`
	// Force removes a node that is gone for good at once (remove).
	Force bool `json:"force,omitempty"`
}

// ClusterChangeResult answers a cluster change: the cluster's state after
// it.
type ClusterChangeResult struct {
	// Members are the cluster's nodes (leaving ones included), Leaving
	// those being removed, Drained the drained ones.
	Members []uint64 `json:"members"`
	Leaving []uint64 `json:"leaving"`
	Drained []uint64 `json:"drained"`
}

// ClusterChangeError is how the HTTP listener refuses a cluster change:
// the wire error code's name and a message.
type ClusterChangeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ChangeCluster drains, undrains, adds or removes node ch.Node (op),
// through the metadata group, and returns the cluster's state once the
// change applied on this node. Refusals are *wire.Error: invalid_request
// (no such node, not a cluster, the last undrained node, an id used
// before, too few nodes left for a stream's replicas, a forced removal of
// a node that is up), not_leader (no metadata leader reachable yet, or
// this node has not joined), replication_timeout (not committed in time:
// it may still be).
func (n *Node) ChangeCluster(ctx context.Context, op actors.ClusterOp, ch ClusterChange) (*actors.ClusterMembership, error) {
	if n.cluster == nil {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "this node is not part of a cluster (it runs without --peers)")
	}
	wait := time.Duration(n.cfg.ReplicationTimeoutMillis)*time.Millisecond + 5*time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(dl)), time.Millisecond)
	}
	res, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.ClusterChangeRequest{Op: op, Node: ch.Node, Addr: ch.Addr, Force: ch.Force}, wait).Result()
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeReplicationTimeout, Message: fmt.Sprintf("no answer from the catalog: %v; the change may still apply", err)}
	}
	r, ok := res.(*actors.ClusterChangeResponse)
	if !ok {
		return nil, fmt.Errorf("cluster change: unexpected answer %T", res)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Membership, nil
}

// serveClusterChange answers POST /cluster/drain, /undrain, /add and
// /remove.
func (n *Node) serveClusterChange(op actors.ClusterOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code wire.Code, format string, args ...any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(ClusterChangeError{Code: code.String(), Message: fmt.Sprintf(format, args...)})
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(http.StatusMethodNotAllowed, wire.CodeInvalidRequest, "%s takes POST", r.URL.Path)
			return
		}
		if n.cluster == nil {
			fail(http.StatusNotFound, wire.CodeInvalidRequest, "not a cluster: this node runs without peers")
			return
		}
		if werr := n.authorizeClusterChange(r); werr != nil {
			status := http.StatusForbidden
			if werr.Code == wire.CodeUnauthenticated {
				status = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			}
			fail(status, werr.Code, "%s", werr.Message)
			return
		}
		var body ClusterChange
		dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Node == 0 || (body.Addr != "") != (op == actors.ClusterAdd) || body.Force && op != actors.ClusterRemove {
			fail(http.StatusBadRequest, wire.CodeInvalidRequest, `the body must be {"node": ID} with a node id other than 0 (add: and "addr": "host:port"; remove: and "force": true, maybe)`)
			return
		}
		m, err := n.ChangeCluster(r.Context(), op, body)
		if err != nil {
			var werr *wire.Error
			if !errors.As(err, &werr) {
				fail(http.StatusInternalServerError, wire.CodeInternal, "%v", err)
				return
			}
			status := http.StatusServiceUnavailable
			switch werr.Code.Retry() {
			case wire.RetryFatal:
				status = http.StatusBadRequest
			case wire.RetryOutcomeUnknown:
				status = http.StatusGatewayTimeout
			}
			fail(status, werr.Code, "%s", werr.Message)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resultOf(m))
	}
}

// resultOf is the answer to a cluster change that left the cluster in m.
func resultOf(m *actors.ClusterMembership) ClusterChangeResult {
	res := ClusterChangeResult{Members: nonNil(m.IDs()), Leaving: []uint64{}, Drained: nonNil(m.Drained)}
	for _, mb := range m.Members {
		if mb.Leaving {
			res.Leaving = append(res.Leaving, mb.ID)
		}
	}
	return res
}

// authorizeClusterChange checks a cluster change's credentials: none in
// dev mode; otherwise a bearer token holding the cluster permission.
func (n *Node) authorizeClusterChange(r *http.Request) *wire.Error {
	if n.auth.Dev() {
		return nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return wire.Errorf(wire.CodeUnauthenticated, "a cluster change needs a token with the cluster permission (Authorization: Bearer TOKEN; herald --token)")
	}
	p, werr := n.auth.Authenticate(token, nil)
	if werr != nil {
		return werr
	}
	if p.Perms&actors.PermCluster == 0 {
		return wire.Errorf(wire.CodePermissionDenied, "credentials %q do not allow cluster changes (they allow %s)", p.Name, p.Perms)
	}
	return nil
}

// nonNil is s, or an empty slice (a JSON [] rather than null).
func nonNil(s []uint64) []uint64 {
	if s == nil {
		return []uint64{}
	}
	return s
}
