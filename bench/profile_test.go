package bench

import "testing"

// Each sample's stack goes to the part that asked for the work.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		stack []string // leaf first
		want  string
	}{
		{[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.sendmsg", "net.(*UDPConn).WriteMsgUDP", "github.com/quic-go/quic-go.(*sendQueue).Run"}, partQUICSyscall},
		{[]string{"internal/runtime/syscall/linux.Syscall6", "runtime.netpoll", "runtime.findRunnable", "runtime.schedule"}, partRTSyscall},
		{[]string{"runtime.futex", "runtime.notewakeup", "runtime.startm", "runtime.wakep"}, partRTSyscall},
		{[]string{"crypto/internal/fips140/aes/gcm.gcmAesEnc", "github.com/quic-go/quic-go.(*packetPacker).encryptPacket"}, partCrypto},
		{[]string{"runtime.scanObject", "runtime.gcDrainN", "runtime.gcAssistAlloc1", "runtime.mallocgc", "lehr.dev/lehr/internal/wire.SendUpdate"}, partGC},
		{[]string{"runtime.mallocgc", "context.WithDeadlineCause", "lehr.dev/lehr/internal/wire.SendUpdate", "github.com/quic-go/quic-go.(*Conn).OpenUniStreamSync"}, partLehr},
		{[]string{"runtime.chanrecv", "github.com/quic-go/quic-go.(*ReceiveStream).readImpl", "bufio.(*Reader).fill", "lehr.dev/lehr/internal/wire.readFrame"}, partQUIC},
		{[]string{"runtime.gopark", "runtime.schedule", "runtime.park_m", "runtime.mcall"}, partSched},
		{[]string{"net/http.(*conn).serve"}, partOther},
	} {
		if got := classify(tc.stack); got != tc.want {
			t.Errorf("classify(%q) = %q, want %q", tc.stack, got, tc.want)
		}
	}
}
