package events

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every code has its sentinel, and any error of that code, wrapped or
// not, matches it and no other.
func TestSentinels(t *testing.T) {
	require.Len(t, sentinels, len(AllCodes))
	for i, s := range sentinels {
		assert.Equal(t, AllCodes[i], s.Code)
		err := fmt.Errorf("wrapped: %w", Errorf(s.Code, "a message"))
		assert.ErrorIs(t, err, s)
		for _, other := range sentinels {
			if other != s {
				assert.False(t, errors.Is(err, other), "%s matches %s", s.Code, other.Code)
			}
		}
	}
}
