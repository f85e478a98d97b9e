package supervisors

import (
	"net"
	"syscall"
)

// udpBuffers reports the kernel's receive and send buffer sizes of the
// node's UDP socket, as quic-go left them: it asks for 7 MiB each and is
// capped by net.core.rmem_max and wmem_max (the kernel reports twice what
// was granted, the bookkeeping overhead included). ok is false when the
// socket cannot be asked.
func udpBuffers(pc net.PacketConn) (rcv, snd int, ok bool) {
	sc, isSyscall := pc.(syscall.Conn)
	if !isSyscall {
		return 0, 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var rerr, serr error
	if err := raw.Control(func(fd uintptr) {
		rcv, rerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		snd, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil || rerr != nil || serr != nil {
		return 0, 0, false
	}
	return rcv, snd, true
}
