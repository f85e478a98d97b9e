// Package transport prepares the TLS side of Herald's QUIC transport: the
// tls.Config a node listens with, the tls.Config a client dials with, and the
// self-signed development certificates a node generates when it is given none.
//
// It knows no actors, storage or frames beyond the ALPN name from package
// wire. Every tls.Config it returns requires TLS 1.3 (QUIC allows nothing
// older) and offers only wire.ALPN, so a peer that does not speak Herald's
// protocol fails the handshake instead of exchanging frames.
//
// Development certificates live in one directory (a node uses
// <data_dir>/tls):
//
//	ca.pem          the self-signed CA; clients trust it (herald --ca)
//	ca-key.pem      the CA's key, kept so the server certificate can be renewed
//	server.pem      the server certificate, signed by the CA
//	server-key.pem  the server certificate's key
//
// EnsureDevCertificates reuses them while they are sound and renews the
// server certificate (keeping the CA, so clients keep trusting it) when it
// is about to expire. They are for development: production deployments pass
// their own certificate and key to ServerTLSConfig.
package transport
