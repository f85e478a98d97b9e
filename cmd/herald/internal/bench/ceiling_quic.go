package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/transport"
)

// The raw quic-go ceiling: a server and a client in this process on
// loopback, with Herald's TLS configuration (TLS 1.3, development
// certificates, ALPN herald/1), no Herald protocol. Each measurement opens
// one bidirectional stream whose first byte names it.

// Stream kinds of the QUIC ceiling server.
const (
	// quicBulk: the client writes until it closes; the server counts the
	// bytes and answers with the count.
	quicBulk = 'b'
	// quicFrames: the client writes length-prefixed frames through a
	// buffered writer; the server reads them one by one and answers with
	// their number.
	quicFrames = 'f'
	// quicEcho: the server writes every frame back as it reads it.
	quicEcho = 'e'
)

// Shapes of the QUIC ceiling measurements.
const (
	// quicBulkWrite is the size of one bulk Write.
	quicBulkWrite = 1 << 20
	// quicFrameBuffer is the buffered writer and reader size for frames.
	quicFrameBuffer = 64 << 10
	// quicFrameHeader is the length prefix of a frame.
	quicFrameHeader = 4
)

// quicCeiling is the raw transport ceiling on loopback.
type quicCeiling struct {
	// BulkBytes were written on one stream in 1 MiB Writes.
	BulkBytes    int64   `json:"bulk_bytes"`
	BulkSeconds  float64 `json:"bulk_seconds"`
	BulkMBPerSec float64 `json:"bulk_mb_per_sec"`
	// FrameBytes is the payload of one frame (plus a 4-byte length).
	FrameBytes     int     `json:"frame_bytes"`
	Frames         int64   `json:"frames"`
	FramesSeconds  float64 `json:"frames_seconds"`
	FramesPerSec   float64 `json:"frames_per_sec"`
	FramesMBPerSec float64 `json:"frames_mb_per_sec"`
	// EchoRTT is the round trip of one frame written and echoed back, one
	// at a time on one stream.
	EchoRTT latencySummary `json:"echo_rtt"`
	// PacedEchoRTT is the same round trip with the frames sent at
	// PacedEchoRate per second, as the latency scenario paces its
	// publishes: between frames both ends go idle, and each round trip
	// then pays for waking the parked goroutines and threads again.
	PacedEchoRate int            `json:"paced_echo_rate"`
	PacedEchoRTT  latencySummary `json:"paced_echo_rtt"`
}

// benchQUICCeiling measures bulk, framed and echo on one loopback
// connection, each for d, with development certificates written to
// certDir.
func benchQUICCeiling(certDir string, progress *benchProgress, frameBytes int, d time.Duration) (quicCeiling, error) {
	res := quicCeiling{FrameBytes: frameBytes}
	certs, err := transport.EnsureDevCertificates(certDir, nil)
	if err != nil {
		return res, err
	}
	serverTLS, err := transport.ServerTLSConfig(certs.CertFile, certs.KeyFile)
	if err != nil {
		return res, err
	}
	clientTLS, err := transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: certs.CAFile})
	if err != nil {
		return res, err
	}
	srv, err := startQUICCeilingServer(serverTLS)
	if err != nil {
		return res, err
	}
	defer srv.close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*d+time.Minute)
	defer cancel()
	conn, err := quic.DialAddr(ctx, srv.ln.Addr().String(), clientTLS, nil)
	if err != nil {
		return res, err
	}
	defer conn.CloseWithError(0, "done")

	var n atomic.Int64
	progress.phase("quic bulk, one stream", "bytes", &n, d)
	bytes, secs, err := quicBulkRun(ctx, conn, d, &n)
	if err != nil {
		return res, fmt.Errorf("bulk: %w", err)
	}
	res.BulkBytes, res.BulkSeconds, res.BulkMBPerSec = bytes, secs, float64(bytes)/1e6/secs

	n.Store(0)
	progress.phase(fmt.Sprintf("quic %s frames", fmtBytes(frameBytes)), "frames", &n, d)
	frames, secs, err := quicFramesRun(ctx, conn, frameBytes, d, &n)
	if err != nil {
		return res, fmt.Errorf("frames: %w", err)
	}
	res.Frames, res.FramesSeconds = frames, secs
	res.FramesPerSec = float64(frames) / secs
	res.FramesMBPerSec = float64(frames) * float64(frameBytes) / 1e6 / secs

	n.Store(0)
	progress.phase(fmt.Sprintf("quic %s echo", fmtBytes(frameBytes)), "round trips", &n, d)
	if res.EchoRTT, err = quicEchoRun(ctx, conn, frameBytes, d, 0, &n); err != nil {
		return res, fmt.Errorf("echo: %w", err)
	}

	n.Store(0)
	res.PacedEchoRate = defaultLatencyRate
	progress.phase(fmt.Sprintf("quic %s echo at %d/s", fmtBytes(frameBytes), res.PacedEchoRate), "round trips", &n, d)
	if res.PacedEchoRTT, err = quicEchoRun(ctx, conn, frameBytes, d, time.Second/time.Duration(res.PacedEchoRate), &n); err != nil {
		return res, fmt.Errorf("paced echo: %w", err)
	}
	return res, nil
}

// quicBulkRun writes 1 MiB chunks on a new stream for d and returns the
// bytes the server counted and the seconds until its answer.
func quicBulkRun(ctx context.Context, conn *quic.Conn, d time.Duration, n *atomic.Int64) (int64, float64, error) {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return 0, 0, err
	}
	if _, err := str.Write([]byte{quicBulk}); err != nil {
		return 0, 0, err
	}
	chunk := make([]byte, quicBulkWrite)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := str.Write(chunk); err != nil {
			return 0, 0, err
		}
		n.Add(int64(len(chunk)))
	}
	got, err := finishQUICStream(str)
	return got, time.Since(start).Seconds(), err
}

// quicFramesRun writes frames of frameBytes through a buffered writer on a
// new stream for d and returns the frames the server read and the seconds
// until its answer.
func quicFramesRun(ctx context.Context, conn *quic.Conn, frameBytes int, d time.Duration, n *atomic.Int64) (int64, float64, error) {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return 0, 0, err
	}
	if _, err := str.Write([]byte{quicFrames}); err != nil {
		return 0, 0, err
	}
	frame := make([]byte, quicFrameHeader+frameBytes)
	binary.BigEndian.PutUint32(frame, uint32(frameBytes))
	w := bufio.NewWriterSize(str, quicFrameBuffer)
	start := time.Now()
	for time.Since(start) < d {
		for range 256 {
			if _, err := w.Write(frame); err != nil {
				return 0, 0, err
			}
		}
		n.Add(256)
	}
	if err := w.Flush(); err != nil {
		return 0, 0, err
	}
	got, err := finishQUICStream(str)
	return got, time.Since(start).Seconds(), err
}

// quicEchoRun sends one frame at a time on a new stream for d and records
// each round trip. With interval > 0 a frame is sent every interval (the
// next as soon as the last is back if that is later); otherwise each as
// soon as the last is back.
func quicEchoRun(ctx context.Context, conn *quic.Conn, frameBytes int, d, interval time.Duration, n *atomic.Int64) (latencySummary, error) {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return latencySummary{}, err
	}
	frame := make([]byte, 1+quicFrameHeader+frameBytes)
	frame[0] = quicEcho
	binary.BigEndian.PutUint32(frame[1:], uint32(frameBytes))
	back := make([]byte, quicFrameHeader+frameBytes)
	hist := newLatencyHistogram()
	start := time.Now()
	first := true
	for i := 0; time.Since(start) < d; i++ {
		if interval > 0 {
			if wait := time.Duration(i)*interval - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
		}
		t0 := time.Now()
		out := frame[1:]
		if first { // the stream's kind goes with the first frame
			out, first = frame, false
		}
		if _, err := str.Write(out); err != nil {
			return latencySummary{}, err
		}
		if _, err := io.ReadFull(str, back); err != nil {
			return latencySummary{}, err
		}
		recordLatency(hist, time.Since(t0))
		n.Add(1)
	}
	if _, err := finishQUICStream(str); err != nil && !errors.Is(err, io.EOF) {
		return latencySummary{}, err
	}
	return summarize(hist), nil
}

// finishQUICStream closes str's send side and reads the server's 8-byte
// answer.
func finishQUICStream(str *quic.Stream) (int64, error) {
	if err := str.Close(); err != nil {
		return 0, err
	}
	var answer [8]byte
	if _, err := io.ReadFull(str, answer[:]); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(answer[:])), nil
}

// quicCeilingServer serves the ceiling's streams. Its goroutines are
// started by startQUICCeilingServer and stopped by close, which waits for
// them.
type quicCeilingServer struct {
	// ln is the loopback listener.
	ln *quic.Listener
	// ctx is cancelled by close; it ends every goroutine.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the accept, connection and stream goroutines.
	wg sync.WaitGroup
}

func startQUICCeilingServer(tlsConf *tls.Config) (*quicCeilingServer, error) {
	ln, err := quic.ListenAddr("127.0.0.1:0", tlsConf, nil)
	if err != nil {
		return nil, err
	}
	s := &quicCeilingServer{ln: ln}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *quicCeilingServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.serveConn(conn)
	}
}

func (s *quicCeilingServer) serveConn(conn *quic.Conn) {
	defer s.wg.Done()
	defer conn.CloseWithError(0, "server closed")
	for {
		str, err := conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = serveQUICCeilingStream(str)
		}()
	}
}

// serveQUICCeilingStream answers one stream according to its first byte.
func serveQUICCeilingStream(str *quic.Stream) error {
	defer str.Close()
	r := bufio.NewReaderSize(str, quicFrameBuffer)
	kind, err := r.ReadByte()
	if err != nil {
		return err
	}
	var count int64
	switch kind {
	case quicBulk:
		if count, err = io.Copy(io.Discard, r); err != nil {
			return err
		}
	case quicFrames, quicEcho:
		var buf []byte
		for {
			var hdr [quicFrameHeader]byte
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			size := int(binary.BigEndian.Uint32(hdr[:]))
			if cap(buf) < quicFrameHeader+size {
				buf = make([]byte, quicFrameHeader+size)
			}
			buf = buf[:quicFrameHeader+size]
			copy(buf, hdr[:])
			if _, err := io.ReadFull(r, buf[quicFrameHeader:]); err != nil {
				return err
			}
			if kind == quicEcho {
				if _, err := str.Write(buf); err != nil {
					return err
				}
			}
			count++
		}
	default:
		str.CancelRead(1)
		return fmt.Errorf("unknown stream kind %q", kind)
	}
	var answer [8]byte
	binary.BigEndian.PutUint64(answer[:], uint64(count))
	_, err = str.Write(answer[:])
	return err
}

// close stops the server and waits for its goroutines.
func (s *quicCeilingServer) close() {
	s.cancel()
	_ = s.ln.Close()
	s.wg.Wait()
}
