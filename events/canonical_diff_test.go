package events_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The canonical JSON against another RFC 8785 implementation
// (github.com/gowebpki/jcs), on the inputs where both must agree: those
// events.Canonical accepts (it is stricter: duplicate keys, invalid
// UTF-8, numbers a double cannot hold exactly are errors). Fixed vectors
// first (number forms, key order by UTF-16 code units, escapes), then
// random documents.
func TestCanonicalAgreesWithRFC8785(t *testing.T) {
	vectors := []string{
		`{"b":1,"a":2}`,
		`{"\u20ac":"euro","\r":"cr","1":"one","\ud83d\ude00":"smile","\u0080":"c1","\ufb33":"hebrew","a":{}}`,
		`[0,-0,1,-1,0.5,1e21,1e-7,123456789012345680000,1e+300,5e-324,1.7976931348623157e308,0.1,100,1e2,2.5E-3]`,
		`["\u0000\u001f\"\\\/\b\f\n\r\t","\u007f\u2028\u2029","é","𝄞"]`,
		`{"nested":[{"z":null,"y":true,"x":false},[],""]}`,
		`  { "spaced" :  [ 1 , 2 ] }  `,
		`"just a string"`, `42`, `null`,
	}
	for _, v := range vectors {
		assert.True(t, agree(t, []byte(v)), "vector %s is refused", v)
	}
	r := rand.New(rand.NewPCG(8785, 1))
	compared := 0
	for range 2000 {
		doc, err := json.Marshal(randomValue(r, 0))
		require.NoError(t, err)
		if agree(t, doc) {
			compared++
		}
	}
	assert.Greater(t, compared, 1800, "most random documents are in the domain compared")
}

// agree compares the two on doc and reports whether events.Canonical
// took it (outside its domain there is nothing to compare).
func agree(t *testing.T, doc []byte) bool {
	t.Helper()
	ours, err := events.Canonical(doc)
	if err != nil {
		return false
	}
	theirs, err := jcs.Transform(doc)
	require.NoError(t, err, "%s", doc)
	assert.Equal(t, string(theirs), string(ours), "%s", doc)
	return true
}

func randomValue(r *rand.Rand, depth int) any {
	k := r.IntN(8)
	if depth > 4 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomNumber(r)
	case 3, 4:
		return randomString(r)
	case 5:
		n := r.IntN(5)
		a := make([]any, n)
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	default:
		n := r.IntN(6)
		m := make(map[string]any, n)
		for range n {
			m[randomString(r)] = randomValue(r, depth+1)
		}
		return m
	}
}

func randomNumber(r *rand.Rand) json.Number {
	switch r.IntN(5) {
	case 0:
		return json.Number(strconv.FormatInt(r.Int64N(1<<53)-1<<52, 10))
	case 1:
		return json.Number(strconv.FormatFloat(r.NormFloat64()*math.Pow(10, float64(r.IntN(40)-20)), 'g', -1, 64))
	case 2:
		return json.Number(fmt.Sprintf("%de%d", r.IntN(1000), r.IntN(60)-30))
	case 3:
		return json.Number(strconv.FormatFloat(math.Float64frombits(r.Uint64()&^(0x7ff<<52)|uint64(r.IntN(0x7fe))<<52), 'e', -1, 64))
	}
	return json.Number(strconv.Itoa(r.IntN(100)))
}

func randomString(r *rand.Rand) string {
	pools := []string{"abcxyz", "0123456789", "\u0000\u0001\u001f\"\\/\b\f\n\r\t", "éü€\u2028\u2029\u0080\u00ff", "𝄞😀\U0010ffff", "\ufb33\uffff\ue000"}
	var b strings.Builder
	for range r.IntN(8) {
		p := []rune(pools[r.IntN(len(pools))])
		b.WriteRune(p[r.IntN(len(p))])
	}
	return b.String()
}
