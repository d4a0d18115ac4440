package approvers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func open(t *testing.T) (*approvers.Store, *testenv.NATS) {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	st, err := approvers.Open(context.Background(), n.JetStream, nil)
	require.NoError(t, err)
	return st, n
}

var pass = func(*approvers.Link) error { return nil }

// Accounts: made with workspaces, given more, listed, removed; the limits
// on workspaces, passkeys and enrollment links hold.
func TestAccounts(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	a, tok, err := st.Add(ctx, "ann", []string{"prod"}, time.Hour)
	require.NoError(t, err)
	assert.Len(t, a.Handle, 32)
	assert.NotEmpty(t, tok)
	a2, tok2, err := st.Add(ctx, "ann", []string{"dev", "prod"}, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, []string{"prod", "dev"}, a2.Workspaces)
	assert.Equal(t, a.Handle, a2.Handle, "the handle stays")
	assert.NotEqual(t, tok, tok2)
	assert.True(t, a2.Can("dev"))
	assert.False(t, a2.Can("other"))

	_, _, err = st.Add(ctx, "bob", nil, time.Hour)
	assert.ErrorContains(t, err, "1 to 64 workspaces")
	many := make([]string, approvers.MaxWorkspaces+1)
	for i := range many {
		many[i] = fmt.Sprintf("w%d", i)
	}
	_, _, err = st.Add(ctx, "bob", many, time.Hour)
	assert.ErrorContains(t, err, "1 to 64 workspaces")
	_, _, err = st.Add(ctx, "bob", []string{"w"}, approvers.MaxEnrollTTL+time.Second)
	assert.ErrorContains(t, err, "works for 1s to")

	for i := range approvers.MaxPasskeys {
		require.NoError(t, st.AddPasskey(ctx, "ann", approvers.Passkey{PublicKey: fmt.Sprintf("k%d", i)}))
	}
	assert.ErrorContains(t, st.AddPasskey(ctx, "ann", approvers.Passkey{PublicKey: "one too many"}), "the most an account may have")
	got, _, err := st.Account(ctx, "ann")
	require.NoError(t, err)
	_, ok := got.Passkey("k3")
	assert.True(t, ok)

	list, err := st.Accounts(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	byHandle, err := st.ByHandle(ctx, a.Handle)
	require.NoError(t, err)
	assert.Equal(t, "ann", byHandle.Name)
	_, err = st.ByHandle(ctx, []byte("nobody"))
	assert.ErrorIs(t, err, approvers.ErrNotFound)
	require.NoError(t, st.Remove(ctx, "ann"))
	_, _, err = st.Account(ctx, "ann")
	assert.ErrorIs(t, err, approvers.ErrNotFound)
	_, err = st.ByHandle(ctx, a.Handle)
	assert.ErrorIs(t, err, approvers.ErrNotFound, "a removed account's passkeys sign in")
	assert.ErrorIs(t, st.Remove(ctx, "ann"), approvers.ErrNotFound)
	again, _, err := st.Add(ctx, "ann", []string{"prod"}, time.Hour)
	require.NoError(t, err)
	assert.NotEqual(t, a.Handle, again.Handle, "an account made again is another account")
}

// An enrollment link and a hold link work once, even when many use them
// at the same moment; an expired one never; a link a check refuses stays
// usable.
func TestLinksWorkOnce(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	_, tok, err := st.Add(ctx, "ann", []string{"prod"}, time.Hour)
	require.NoError(t, err)
	var won atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, rev, err := st.Enrollment(ctx, tok)
			if err != nil {
				return
			}
			if st.UseEnrollment(ctx, tok, rev) == nil {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), won.Load(), "enrollments that used one link")
	_, _, err = st.Enrollment(ctx, tok)
	assert.ErrorIs(t, err, approvers.ErrUsed)

	link, err := st.MintLink(ctx, "prod", "hold_1", time.Now().Add(time.Hour))
	require.NoError(t, err)
	_, err = st.UseLink(ctx, link, func(l *approvers.Link) error { return fmt.Errorf("not for %s", l.Workspace) })
	assert.ErrorContains(t, err, "not for prod")
	won.Store(0)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := st.UseLink(ctx, link, pass); err == nil && l.HoldID == "hold_1" {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), won.Load(), "uses of one hold link")

	short, err := st.MintLink(ctx, "prod", "hold_2", time.Now().Add(time.Second))
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond)
	_, err = st.UseLink(ctx, short, pass)
	assert.ErrorIs(t, err, approvers.ErrUsed, "an expired link")
	_, err = st.MintLink(ctx, "prod", "hold_3", time.Now().Add(-time.Second))
	assert.ErrorContains(t, err, "has expired")
	for _, bad := range []string{"", "x", string(make([]byte, 200))} {
		_, err = st.UseLink(ctx, bad, pass)
		assert.ErrorIs(t, err, approvers.ErrUsed)
	}
}

// Sessions end when ended or at their life's end; a mark's MAC does not
// survive a change.
func TestSessionsAndMarks(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	ann := &approvers.Account{Name: "ann", Handle: []byte("h")}
	tok, s, err := st.NewSession(ctx, ann, time.Second)
	require.NoError(t, err)
	assert.NotEmpty(t, s.CSRF)
	got, err := st.Session(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, "ann", got.Approver)
	assert.Equal(t, []byte("h"), got.Handle)
	assert.Equal(t, s.CSRF, got.CSRF)
	time.Sleep(1100 * time.Millisecond)
	_, err = st.Session(ctx, tok)
	assert.ErrorIs(t, err, approvers.ErrUsed, "a session past its life")

	tok, _, err = st.NewSession(ctx, ann, time.Hour)
	require.NoError(t, err)
	require.NoError(t, st.EndSession(ctx, tok))
	_, err = st.Session(ctx, tok)
	assert.ErrorIs(t, err, approvers.ErrUsed, "an ended session")

	k1, err := st.MACKey(ctx)
	require.NoError(t, err)
	k2, err := st.MACKey(ctx)
	require.NoError(t, err)
	assert.Equal(t, k1, k2, "one key per deployment")
	m := approvers.Mark(k1, "session", "token.123")
	v, ok := approvers.Unmark(k1, "session", m)
	assert.True(t, ok)
	assert.Equal(t, "token.123", v)
	flip := "A"
	if m[len(m)-1] == 'A' {
		flip = "B"
	}
	for _, bad := range []string{m[:len(m)-1] + flip, "token.124" + m[len("token.123"):], "nodot", ""} {
		_, ok := approvers.Unmark(k1, "session", bad)
		assert.False(t, ok, bad)
	}
	_, ok = approvers.Unmark([]byte("another key"), "session", m)
	assert.False(t, ok)
	_, ok = approvers.Unmark(k1, "ceremony", m)
	assert.False(t, ok, "a mark passes for another purpose")

	// A ceremony finishes once, and not after its time.
	require.NoError(t, st.NewCeremony(ctx, "challenge-1", time.Minute))
	require.NoError(t, st.UseCeremony(ctx, "challenge-1"))
	assert.ErrorIs(t, st.UseCeremony(ctx, "challenge-1"), approvers.ErrUsed, "a ceremony finished again")
	assert.ErrorIs(t, st.UseCeremony(ctx, "never-begun"), approvers.ErrUsed)
	require.NoError(t, st.NewCeremony(ctx, "challenge-2", time.Second))
	time.Sleep(1100 * time.Millisecond)
	assert.ErrorIs(t, st.UseCeremony(ctx, "challenge-2"), approvers.ErrUsed, "a ceremony finished late")
}
