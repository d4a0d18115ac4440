package mcpgw

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxLineBytes bounds one JSON-RPC message on stdio. A longer line is
// answered with an error and skipped.
const MaxLineBytes = 4 << 20

// Stdio is the stdio transport of the gateway over in and out. Unlike
// the SDK's own, which ends the session at the first line that is not a
// JSON-RPC message, it answers such a line with a JSON-RPC error (-32700
// for what is not JSON or too long, -32600 for JSON that is not one
// JSON-RPC 2.0 message: a batch, another version) and reads on: a client
// that sent garbage once keeps its session.
func Stdio(in io.Reader, out io.Writer, log *slog.Logger) sdk.Transport {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go filter(in, pw, w, log)
	return &sdk.IOTransport{Reader: pr, Writer: w, MaxLineLength: MaxLineBytes + 1}
}

// filter copies the JSON-RPC messages of in to pw, a line each, and
// answers every other line on w.
func filter(in io.Reader, pw *io.PipeWriter, w io.Writer, log *slog.Logger) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			if reply := refuse(line, tooLong); reply != nil {
				log.Warn("mcp: refused a stdio line that is no JSON-RPC message", "bytes", len(line), "error", reply.Error.Message)
				b, _ := json.Marshal(reply)
				_, _ = w.Write(append(b, '\n'))
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			_ = pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line without its newline; a line over MaxLineBytes
// is read to its end and returned empty with tooLong.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > MaxLineBytes {
				tooLong, line = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// rpcError is a JSON-RPC error response.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// refuse is the answer to a line that is no JSON-RPC 2.0 message, or
// nil for one the SDK may read.
func refuse(line []byte, tooLong bool) *rpcError {
	e := &rpcError{JSONRPC: "2.0", ID: json.RawMessage("null")}
	switch {
	case tooLong:
		e.Error.Code, e.Error.Message = -32700, fmt.Sprintf("parse error: the message is over %d bytes", MaxLineBytes)
		return e
	case !json.Valid(line):
		e.Error.Code, e.Error.Message = -32700, "parse error: the line is not JSON"
		return e
	}
	var m struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
	}
	if t := bytes.TrimSpace(line); t[0] != '{' || json.Unmarshal(t, &m) != nil {
		e.Error.Code, e.Error.Message = -32600, "invalid request: one JSON-RPC 2.0 object a line (batches are not served)"
		return e
	}
	if len(m.ID) > 0 && (m.ID[0] == '"' || (m.ID[0] >= '0' && m.ID[0] <= '9') || m.ID[0] == '-') {
		e.ID = m.ID
	}
	if m.JSONRPC == nil || *m.JSONRPC != "2.0" {
		e.Error.Code, e.Error.Message = -32600, `invalid request: "jsonrpc" must be "2.0"`
		return e
	}
	return nil
}

// lockedWriter writes whole lines, one writer at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
