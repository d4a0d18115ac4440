package natsrv_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CheckBlocks passes the blocks the embedded server wrote (messages with
// and without headers, deleted ones, securely erased ones) and finds one
// flipped byte in any record.
func TestCheckBlocks(t *testing.T) {
	dir := t.TempDir()
	s, err := natsrv.Start(natsrv.Config{DataDir: dir})
	require.NoError(t, err)
	nc, err := nats.Connect("", nats.InProcessServer(s))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CHECKED", Subjects: []string{"checked.>"}})
	require.NoError(t, err)
	var seqs []uint64
	for i := range 50 {
		m := &nats.Msg{Subject: fmt.Sprintf("checked.%d", i), Data: []byte(fmt.Sprintf("message %d", i))}
		if i%2 == 0 {
			m.Header = nats.Header{"K": []string{fmt.Sprint(i)}}
		}
		ack, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	require.NoError(t, st.DeleteMsg(ctx, seqs[3]))
	require.NoError(t, st.SecureDeleteMsg(ctx, seqs[7]))
	// A stream checked strictly (as Airlock's own are), with nothing
	// erased, whose every byte is flipped below: an erased record is
	// random bytes that nothing reads, its subject's length among them.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLIPPED", Subjects: []string{"flipped.>"}})
	require.NoError(t, err)
	for i := range 20 {
		m := &nats.Msg{Subject: fmt.Sprintf("flipped.%d", i), Data: []byte(fmt.Sprintf(`{"n":%d,"pad":"%0200d"}`, i, i))}
		if i%2 == 0 {
			m.Header = nats.Header{"K": []string{fmt.Sprint(i)}}
		}
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	store := filepath.Join(dir, natsrv.StoreDir)
	strict := func(stream string) bool { return stream == "FLIPPED" }
	n, err := natsrv.CheckBlocks(store, false, strict)
	require.NoError(t, err)
	assert.Positive(t, n)

	blocks, err := filepath.Glob(filepath.Join(store, "jetstream", "*", "streams", "FLIPPED", "msgs", "*.blk"))
	require.NoError(t, err)
	require.NotEmpty(t, blocks)
	b, err := os.ReadFile(blocks[0])
	require.NoError(t, err)
	// Every byte of the block, each flipped on its own: the subject's
	// length of a record without headers too, which the record's checksum
	// does not cover (the subject and the message are hashed as one run).
	var missed []int
	for off := range b {
		flipped := append([]byte(nil), b...)
		flipped[off] ^= 0x5a
		require.NoError(t, os.WriteFile(blocks[0], flipped, 0o600))
		if _, err := natsrv.CheckBlocks(store, false, strict); err == nil {
			missed = append(missed, off)
		}
	}
	assert.Empty(t, missed, "flipped bytes not found in a block of %d bytes", len(b))

	// The newest record of the newest block, torn or flipped: what a kill
	// during a write can leave, and nats-server cuts off at start. A start
	// (tail) lets it pass; an offline verify does not.
	last := append([]byte(nil), b...)
	last[len(last)-1] ^= 0x5a
	for _, bad := range [][]byte{last, b[:len(b)-3]} {
		require.NoError(t, os.WriteFile(blocks[0], bad, 0o600))
		_, err = natsrv.CheckBlocks(store, true, strict)
		assert.NoError(t, err)
		_, err = natsrv.CheckBlocks(store, false, strict)
		assert.Error(t, err)
	}
	require.NoError(t, os.WriteFile(blocks[0], b, 0o600))
	_, err = natsrv.CheckBlocks(store, false, strict)
	assert.NoError(t, err)
}

// A stream other clients write to is checked by its checksums only: a
// subject of any characters and headers nats-server stores without
// parsing them are theirs to send, and a start must not refuse them.
func TestCheckBlocksTakesWhatClientsMayStore(t *testing.T) {
	dir := t.TempDir()
	s, err := natsrv.Start(natsrv.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPEN", Subjects: []string{"open.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "open.ws:1.é+{x}", []byte(`{"a":1}`))
	require.NoError(t, err)
	// Headers without the NATS/1.0 frame, in the client protocol's own
	// words (the client library would frame them).
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.ClientURL(), "nats://"))
	require.NoError(t, err)
	defer conn.Close()
	hdr, body := "not a frame", "payload"
	_, err = fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"headers\":true}\r\nHPUB open.raw %d %d\r\n%s%s\r\nPING\r\n", len(hdr), len(hdr)+len(body), hdr, body)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "OPEN")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 2
	}, 5*time.Second, 10*time.Millisecond, "the raw publish is stored")
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	store := filepath.Join(dir, natsrv.StoreDir)
	_, err = natsrv.CheckBlocks(store, true, func(string) bool { return false })
	assert.NoError(t, err)
	_, err = natsrv.CheckBlocks(store, false, func(stream string) bool { return stream == "OPEN" })
	assert.Error(t, err, "checked strictly, neither record is one Airlock writes")
}
