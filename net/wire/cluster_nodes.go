package wire

import "encoding/binary"

// ClusterNodes asks a cluster node for the cluster's nodes and the client
// addresses they advertise (FeatureClusterNodes): how a client that was
// given some of the nodes learns of the others, one added later among them.
// Its body is empty; it is answered with NodeList, or Error
// (invalid_request on a node that is not in a cluster).

// AppendClusterNodes appends a ClusterNodes frame.
func AppendClusterNodes(dst []byte, reqID uint64) []byte {
	dst, s := frameStart(dst, TypeClusterNodes, 0, reqID)
	return frameEnd(dst, s)
}

// DecodeClusterNodes checks a ClusterNodes body (it is empty).
func DecodeClusterNodes(body []byte) error {
	d := decoder{b: body}
	return d.end("cluster_nodes")
}

// ClusterNode is one node of a NodeList: its id and the client address it
// advertises ("" when it advertises none, or the answering node does not
// know it yet).
type ClusterNode struct {
	ID   uint64
	Addr string
}

// clusterNodeMin is the smallest encoded ClusterNode (no address).
const clusterNodeMin = 8 + 2

// AppendNodeList appends a NodeList frame, the answer to ClusterNodes:
// count u16 | count × (id u64 | address str16). At most 65535 nodes.
func AppendNodeList(dst []byte, reqID uint64, nodes []ClusterNode) []byte {
	dst, s := frameStart(dst, TypeNodeList, 0, reqID)
	nodes = nodes[:min(len(nodes), 0xFFFF)]
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(nodes)))
	for _, n := range nodes {
		dst = binary.BigEndian.AppendUint64(dst, n.ID)
		dst = appendStr16(dst, n.Addr)
	}
	return frameEnd(dst, s)
}

// DecodeNodeList decodes a NodeList body; node ids are not 0.
func DecodeNodeList(body []byte) ([]ClusterNode, error) {
	d := decoder{b: body}
	n := d.u16("node count")
	if d.err == nil && int(n)*clusterNodeMin > len(d.b)-d.off {
		d.fail("node count %d exceeds the frame", n)
	}
	if d.err != nil {
		return nil, d.err
	}
	out := make([]ClusterNode, 0, n)
	for i := uint16(0); i < n && d.err == nil; i++ {
		c := ClusterNode{ID: d.u64("node id"), Addr: d.str16("node address")}
		if d.err == nil && c.ID == 0 {
			d.fail("node id 0")
		}
		out = append(out, c)
	}
	return out, d.end("node_list")
}
