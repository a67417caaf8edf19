package wire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	. "lehr.dev/lehr/internal/wire"
)

// connPair returns a distributor's and an agent's side of one real QUIC
// connection on loopback, the agent's transport configured by client.
func connPair(t *testing.T, client *quic.Config) (server, agent *quic.Conn) {
	t.Helper()
	pki := newTestPKI(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", pki.server, ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	agent, err = quic.DialAddr(ctx, ln.Addr().String(), pki.client, client)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { agent.CloseWithError(CodeNoError, "") })
	server, err = ln.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { server.CloseWithError(CodeNoError, "") })
	select {
	case <-agent.HandshakeComplete():
	case <-ctx.Done():
		t.Fatal("handshake not complete")
	}
	return server, agent
}

// TestSendUpdateStall: SendUpdate's stall bound ends the write to an agent
// that stopped taking update streams or their bytes, and only that: a slow
// agent that keeps reading gets the whole frame. Without the bound the two
// stuck cases block until the connection ends — which, with the agent's
// keepalives, is never.
func TestSendUpdateStall(t *testing.T) {
	const stall = 300 * time.Millisecond
	small := func() *quic.Config { // one update stream, 64 KiB windows
		c := ClientQUICConfig()
		c.MaxIncomingUniStreams = 1
		c.InitialStreamReceiveWindow, c.MaxStreamReceiveWindow = 64<<10, 64<<10
		c.InitialConnectionReceiveWindow, c.MaxConnectionReceiveWindow = 64<<10, 64<<10
		return c
	}
	tests := []struct {
		name string
		// agent plays the agent's side; it returns what it read, if it
		// reads.
		agent     func(ctx context.Context, conn *quic.Conn) ([]byte, error)
		frames    [][]byte // sent in turn; only the last may stall
		stall     time.Duration
		wantStall string // "" for success, else a fragment of the error
	}{
		{
			name: "no stream credit (streams never accepted)",
			agent: func(ctx context.Context, _ *quic.Conn) ([]byte, error) {
				<-ctx.Done()
				return nil, nil
			},
			// The first stream is opened and its bytes buffered by the
			// agent's QUIC; the second finds no credit.
			frames:    [][]byte{bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{2}, 100)},
			stall:     stall,
			wantStall: "no stream credit for 300ms",
		},
		{
			name: "stream accepted, never read",
			agent: func(ctx context.Context, conn *quic.Conn) ([]byte, error) {
				_, err := conn.AcceptUniStream(ctx)
				<-ctx.Done()
				return nil, err
			},
			frames:    [][]byte{bytes.Repeat([]byte{3}, 1<<20)},
			stall:     stall,
			wantStall: "of 1048576 bytes written, none for 300ms",
		},
		{
			name: "slow reader keeps progressing",
			agent: func(ctx context.Context, conn *quic.Conn) ([]byte, error) {
				s, err := conn.AcceptUniStream(ctx)
				if err != nil {
					return nil, err
				}
				var got bytes.Buffer
				buf := make([]byte, 16<<10)
				for {
					n, err := s.Read(buf)
					got.Write(buf[:n])
					if err == io.EOF {
						return got.Bytes(), nil
					}
					if err != nil {
						return got.Bytes(), err
					}
					time.Sleep(10 * time.Millisecond) // a slow agent
				}
			},
			frames: [][]byte{bytes.Repeat([]byte{4}, 512<<10)},
			// Each 64 KiB chunk takes the reader about 40 ms; the bound
			// is 100 times that, so only a stuck reader reaches it.
			stall: 4 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			server, agent := connPair(t, small())
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			actx, stopAgent := context.WithCancel(ctx)
			type result struct {
				got []byte
				err error
			}
			read := make(chan result, 1)
			go func() {
				got, err := tc.agent(actx, agent)
				read <- result{got, err}
			}()
			defer stopAgent()
			var err error
			for _, f := range tc.frames {
				if err = SendUpdate(ctx, server, f, tc.stall); err != nil {
					break
				}
			}
			if tc.wantStall == "" {
				if err != nil {
					t.Fatalf("SendUpdate = %v, want the whole frame sent", err)
				}
				r := <-read
				if r.err != nil || !bytes.Equal(r.got, tc.frames[len(tc.frames)-1]) {
					t.Fatalf("agent read %d bytes (err %v), want the %d sent", len(r.got), r.err, len(tc.frames[len(tc.frames)-1]))
				}
				return
			}
			if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), tc.wantStall) {
				t.Fatalf("SendUpdate = %v, want ErrStalled saying %q", err, tc.wantStall)
			}
			if ctx.Err() != nil {
				t.Fatalf("SendUpdate returned only when the test's context ended")
			}
		})
	}
}

// TestSendUpdateCancel: ending ctx during a stalled write returns ctx's
// cause, not ErrStalled.
func TestSendUpdateCancel(t *testing.T) {
	c := ClientQUICConfig()
	c.MaxIncomingUniStreams = 1
	server, _ := connPair(t, c)
	if err := SendUpdate(context.Background(), server, []byte{1}, 0); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("session ending")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	err := SendUpdate(ctx, server, []byte{2}, time.Hour)
	if errors.Is(err, ErrStalled) || ctx.Err() == nil {
		t.Fatalf("SendUpdate = %v, want the context's end", err)
	}
}
