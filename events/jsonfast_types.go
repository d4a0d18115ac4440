package events

import (
	"encoding/base64"
	"encoding/json"
)

// The hot records' writers and readers (see jsonfast.go). Each writer
// lists the fields in their declaration order with their encoding/json
// tags; a field added to one of these types must be added here too, which
// TestFastJSONMatchesEncodingJSON enforces by filling every field.

// appendFast appends v's JSON when v is one of the hot records and
// returns true; false for any other value, or one encoding/json would
// refuse (the caller then uses encoding/json).
func appendFast(b []byte, v any) ([]byte, bool) {
	w := jwriter{b: b}
	ok := false
	switch v := v.(type) {
	case *Op:
		ok = v != nil && w.op(v)
	case Op:
		ok = w.op(&v)
	case *Decided:
		ok = v != nil && w.decided(v)
	case *Started:
		ok = v != nil && w.started(v)
	case *Completed:
		ok = v != nil && w.completed(v)
	case *Request:
		ok = v != nil && w.request(v)
	case Request:
		ok = w.request(&v)
	case *Reply:
		ok = v != nil && w.reply(v)
	case Reply:
		ok = w.reply(&v)
	}
	return w.b, ok
}

func (w *jwriter) opHeader(h OpHeader) {
	w.str("op_id", h.OpID)
	w.str("workspace", h.Workspace)
}

func (w *jwriter) op(op *Op) bool {
	w.str("op_id", op.ID)
	w.str("workspace", op.Workspace)
	w.str("state", string(op.State))
	w.strOmit("agent", op.Agent)
	w.strOmit("tool", op.Tool)
	w.strOmit("class", op.Class)
	w.strOmit("fingerprint", op.Fingerprint)
	w.strOmit("args_digest", op.ArgsDigest)
	w.uintOmit("request_seq", op.RequestSeq)
	w.strings("operands", op.Operands)
	w.strOmit("policy_hash", op.PolicyHash)
	w.strOmit("reason", op.Reason)
	w.strOmit("hold_id", op.HoldID)
	if !w.timeOmit("hold_expires_at", op.HoldExpiresAt) {
		return false
	}
	w.strOmit("approver", op.Approver)
	w.strOmit("resolution", op.Resolution)
	if !w.timeOmit("resolved_at", op.ResolvedAt) {
		return false
	}
	w.strOmit("rule", op.Rule)
	w.strOmit("attempt", op.Attempt)
	w.intOmit("attempts", int64(op.Attempts))
	w.boolOmit("started", op.Started)
	w.strOmit("instance", op.Instance)
	w.strOmit("host", op.Host)
	if !w.timeOmit("claimed_at", op.ClaimedAt) {
		return false
	}
	w.strOmit("result_digest", op.ResultDigest)
	w.intOmit("result_bytes", int64(op.ResultBytes))
	if !w.timeOmit("result_kept_until", op.ResultKeptUntil) {
		return false
	}
	w.boolOmit("result_erase_on_delivery", op.ResultEraseOnDelivery)
	w.strOmit("result_erased", op.ResultErased)
	w.uintOmit("result_seq", op.ResultSeq)
	w.strOmit("error_code", string(op.ErrorCode))
	w.strOmit("error", op.Error)
	w.boolOmit("scrubbed", op.Scrubbed)
	w.uint("version", op.Version)
	w.uint("first_seq", op.FirstSeq)
	if !w.time("created_at", op.CreatedAt) || !w.time("updated_at", op.UpdatedAt) {
		return false
	}
	w.end()
	return true
}

func (w *jwriter) summary(k string, s *Summary) {
	if s == nil {
		return
	}
	w.key(k)
	in := jwriter{b: w.b}
	in.str("fingerprint", s.Fingerprint)
	in.str("agent", s.Agent)
	in.str("tool", s.Tool)
	in.str("class", s.Class)
	in.str("args_digest", s.ArgsDigest)
	in.strOmit("idempotency_key", s.IdempotencyKey)
	in.uint("request_seq", s.RequestSeq)
	in.strings("operands", s.Operands)
	in.end()
	w.b = in.b
}

func (w *jwriter) decided(d *Decided) bool {
	w.opHeader(d.OpHeader)
	w.summary("request", d.Request)
	w.str("policy_hash", d.PolicyHash)
	w.str("reason", d.Reason)
	w.strOmit("rule", d.Rule)
	w.strOmit("mode", d.Mode)
	if d.Results != nil {
		w.key("results")
		in := jwriter{b: w.b}
		in.int("ttl_s", d.Results.TTLSeconds)
		in.boolOmit("erase_on_delivery", d.Results.EraseOnDelivery)
		in.end()
		w.b = in.b
	}
	w.end()
	return true
}

func (w *jwriter) started(s *Started) bool {
	w.opHeader(s.OpHeader)
	w.str("attempt", s.Attempt)
	if !w.raw("evidence", s.Evidence) {
		return false
	}
	if c := s.Claim; c != nil {
		w.key("claim")
		in := jwriter{b: w.b}
		in.str("executor", c.Executor)
		in.strOmit("recovers", c.Recovers)
		in.uintOmit("work_seq", c.WorkSeq)
		in.uintOmit("delivery", c.Delivery)
		in.strOmit("consumer", c.Consumer)
		in.strOmit("runner", c.Runner)
		in.strOmit("instance", c.Instance)
		in.strOmit("host", c.Host)
		in.end()
		w.b = in.b
	}
	if d := s.Decision; d != nil {
		w.key("decision")
		in := jwriter{b: w.b}
		if !in.decided(d) {
			return false
		}
		w.b = in.b
	}
	w.end()
	return true
}

func (w *jwriter) completed(c *Completed) bool {
	w.opHeader(c.OpHeader)
	w.str("attempt", c.Attempt)
	w.str("result_digest", c.ResultDigest)
	w.int("result_bytes", int64(c.ResultBytes))
	w.int("duration_ms", c.DurationMS)
	w.boolOmit("recovered", c.Recovered)
	if !w.timeOmit("result_kept_until", c.KeptUntil) {
		return false
	}
	w.boolOmit("result_erase_on_delivery", c.EraseOnDelivery)
	w.uintOmit("result_seq", c.ResultSeq)
	w.end()
	return true
}

// UnmarshalJSON is json.Unmarshal into v, a pointer, faster for the hot
// records (an op record, a decided, started or completed event's data, a
// request, a reply), which it expects zero.
func UnmarshalJSON(body []byte, v any) error {
	if decodeFast(body, v) {
		return nil
	}
	reset(v)
	return json.Unmarshal(body, v)
}

// reset zeroes a hot record a failed fast read may have filled in part.
func reset(v any) {
	switch v := v.(type) {
	case *Op:
		*v = Op{}
	case *Decided:
		*v = Decided{}
	case *Started:
		*v = Started{}
	case *Completed:
		*v = Completed{}
	case *Request:
		*v = Request{}
	case *Reply:
		*v = Reply{}
	}
}

// decodeFast reads body into payload when payload is one of the hot
// records and the reader takes all of it; false otherwise, with payload
// then in an unknown state (the caller decodes a new one with
// encoding/json).
func decodeFast(body []byte, payload any) bool {
	r := jreader{b: body}
	ok := false
	switch v := payload.(type) {
	case *Op:
		ok = r.op(v)
	case *Decided:
		ok = r.decided(v)
	case *Started:
		ok = r.started(v)
	case *Completed:
		ok = r.completed(v)
	case *Request:
		ok = r.request(v)
	case *Reply:
		ok = r.reply(v)
	}
	return ok && r.done()
}

func (r *jreader) op(op *Op) bool {
	return r.object(func(k []byte) int {
		switch string(k) {
		case "op_id":
			return took(1, r.str(&op.ID))
		case "workspace":
			return took(2, r.str(&op.Workspace))
		case "state":
			return took(3, readString(r, &op.State))
		case "agent":
			return took(4, r.str(&op.Agent))
		case "tool":
			return took(5, r.str(&op.Tool))
		case "class":
			return took(6, r.str(&op.Class))
		case "fingerprint":
			return took(7, r.str(&op.Fingerprint))
		case "args_digest":
			return took(8, r.str(&op.ArgsDigest))
		case "request_seq":
			return took(9, r.uint(&op.RequestSeq))
		case "operands":
			return took(10, r.strings(&op.Operands))
		case "policy_hash":
			return took(11, r.str(&op.PolicyHash))
		case "reason":
			return took(12, r.str(&op.Reason))
		case "hold_id":
			return took(13, r.str(&op.HoldID))
		case "hold_expires_at":
			return took(14, r.timePtr(&op.HoldExpiresAt))
		case "approver":
			return took(15, r.str(&op.Approver))
		case "resolution":
			return took(16, r.str(&op.Resolution))
		case "resolved_at":
			return took(17, r.timePtr(&op.ResolvedAt))
		case "rule":
			return took(18, r.str(&op.Rule))
		case "attempt":
			return took(19, r.str(&op.Attempt))
		case "attempts":
			return took(20, r.int(&op.Attempts))
		case "started":
			return took(21, r.bool(&op.Started))
		case "instance":
			return took(22, r.str(&op.Instance))
		case "host":
			return took(23, r.str(&op.Host))
		case "claimed_at":
			return took(24, r.timePtr(&op.ClaimedAt))
		case "result_digest":
			return took(25, r.str(&op.ResultDigest))
		case "result_bytes":
			return took(26, r.int(&op.ResultBytes))
		case "result_kept_until":
			return took(27, r.timePtr(&op.ResultKeptUntil))
		case "result_erase_on_delivery":
			return took(28, r.bool(&op.ResultEraseOnDelivery))
		case "result_erased":
			return took(29, r.str(&op.ResultErased))
		case "error_code":
			return took(30, readString(r, &op.ErrorCode))
		case "error":
			return took(31, r.str(&op.Error))
		case "scrubbed":
			return took(32, r.bool(&op.Scrubbed))
		case "version":
			return took(33, r.uint(&op.Version))
		case "first_seq":
			return took(34, r.uint(&op.FirstSeq))
		case "created_at":
			return took(35, r.time(&op.CreatedAt))
		case "updated_at":
			return took(36, r.time(&op.UpdatedAt))
		case "result_seq":
			return took(37, r.uint(&op.ResultSeq))
		}
		return 0
	})
}

// took is n when the read went well, 0 (not taken) when not.
func took(n int, read bool) int {
	if read {
		return n
	}
	return 0
}

func (r *jreader) opHeader(k []byte, h *OpHeader) int {
	switch string(k) {
	case "op_id":
		return took(1, r.str(&h.OpID))
	case "workspace":
		return took(2, r.str(&h.Workspace))
	}
	return 0
}

func (r *jreader) summary(dst **Summary) bool {
	s := new(Summary)
	if !r.object(func(k []byte) int {
		switch string(k) {
		case "fingerprint":
			return took(1, r.str(&s.Fingerprint))
		case "agent":
			return took(2, r.str(&s.Agent))
		case "tool":
			return took(3, r.str(&s.Tool))
		case "class":
			return took(4, r.str(&s.Class))
		case "args_digest":
			return took(5, r.str(&s.ArgsDigest))
		case "idempotency_key":
			return took(6, r.str(&s.IdempotencyKey))
		case "request_seq":
			return took(7, r.uint(&s.RequestSeq))
		case "operands":
			return took(8, r.strings(&s.Operands))
		}
		return 0
	}) {
		return false
	}
	*dst = s
	return true
}

func (r *jreader) decided(d *Decided) bool {
	return r.object(func(k []byte) int {
		if n := r.opHeader(k, &d.OpHeader); n > 0 {
			return n
		}
		switch string(k) {
		case "request":
			return took(3, r.summary(&d.Request))
		case "policy_hash":
			return took(4, r.str(&d.PolicyHash))
		case "reason":
			return took(5, r.str(&d.Reason))
		case "rule":
			return took(6, r.str(&d.Rule))
		case "mode":
			return took(7, r.str(&d.Mode))
		case "results":
			ret := new(Retention)
			if !r.object(func(k []byte) int {
				switch string(k) {
				case "ttl_s":
					return took(1, r.int64(&ret.TTLSeconds))
				case "erase_on_delivery":
					return took(2, r.bool(&ret.EraseOnDelivery))
				}
				return 0
			}) {
				return 0
			}
			d.Results = ret
			return 8
		}
		return 0
	})
}

func (r *jreader) started(s *Started) bool {
	return r.object(func(k []byte) int {
		if n := r.opHeader(k, &s.OpHeader); n > 0 {
			return n
		}
		switch string(k) {
		case "attempt":
			return took(3, r.str(&s.Attempt))
		case "evidence":
			return took(4, r.raw(&s.Evidence))
		case "claim":
			c := new(Claim)
			if !r.object(func(k []byte) int {
				switch string(k) {
				case "executor":
					return took(1, r.str(&c.Executor))
				case "recovers":
					return took(2, r.str(&c.Recovers))
				case "work_seq":
					return took(3, r.uint(&c.WorkSeq))
				case "delivery":
					return took(4, r.uint(&c.Delivery))
				case "consumer":
					return took(5, r.str(&c.Consumer))
				case "runner":
					return took(6, r.str(&c.Runner))
				case "instance":
					return took(7, r.str(&c.Instance))
				case "host":
					return took(8, r.str(&c.Host))
				}
				return 0
			}) {
				return 0
			}
			s.Claim = c
			return 5
		case "decision":
			d := new(Decided)
			if !r.decided(d) {
				return 0
			}
			s.Decision = d
			return 6
		}
		return 0
	})
}

func (r *jreader) completed(c *Completed) bool {
	return r.object(func(k []byte) int {
		if n := r.opHeader(k, &c.OpHeader); n > 0 {
			return n
		}
		switch string(k) {
		case "attempt":
			return took(3, r.str(&c.Attempt))
		case "result_digest":
			return took(4, r.str(&c.ResultDigest))
		case "result_bytes":
			return took(5, r.int(&c.ResultBytes))
		case "duration_ms":
			return took(6, r.int64(&c.DurationMS))
		case "recovered":
			return took(7, r.bool(&c.Recovered))
		case "result_kept_until":
			return took(8, r.timePtr(&c.KeptUntil))
		case "result_erase_on_delivery":
			return took(9, r.bool(&c.EraseOnDelivery))
		case "result_seq":
			return took(10, r.uint(&c.ResultSeq))
		}
		return 0
	})
}

func (w *jwriter) request(q *Request) bool {
	w.str("workspace", q.Workspace)
	w.str("agent", q.Agent)
	w.str("tool", q.Tool)
	if q.Args == nil {
		w.key("args")
		w.b = append(w.b, "null"...)
	} else if len(q.Args) == 0 || !w.raw("args", q.Args) {
		return false // encoding/json refuses empty raw JSON too
	}
	w.strOmit("idempotency_key", q.IdempotencyKey)
	w.end()
	return true
}

func (r *jreader) request(q *Request) bool {
	return r.object(func(k []byte) int {
		switch string(k) {
		case "workspace":
			return took(1, r.str(&q.Workspace))
		case "agent":
			return took(2, r.str(&q.Agent))
		case "tool":
			return took(3, r.str(&q.Tool))
		case "args":
			return took(4, r.raw(&q.Args))
		case "idempotency_key":
			return took(5, r.str(&q.IdempotencyKey))
		}
		return 0
	})
}

// reply writes a reply without a hold or a mode (a held op's and a mode
// command's replies go through encoding/json).
func (w *jwriter) reply(p *Reply) bool {
	if p.Hold != nil || p.Mode != nil {
		return false
	}
	w.strOmit("op_id", p.OpID)
	w.strOmit("state", string(p.State))
	w.boolOmit("existing", p.Existing)
	w.strOmit("code", string(p.Code))
	w.strOmit("message", p.Message)
	if !w.raw("result", p.Result) {
		return false
	}
	if len(p.Sealed) > 0 {
		w.key("sealed_result")
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, p.Sealed)
		w.b = append(w.b, '"')
	}
	if !w.timeOmit("result_kept_until", p.KeptUntil) {
		return false
	}
	w.boolOmit("result_erase_on_delivery", p.EraseOnDelivery)
	w.strOmit("result_erased", p.Erased)
	w.strOmit("result_digest", p.ResultDigest)
	w.intOmit("result_bytes", int64(p.ResultBytes))
	w.end()
	return true
}

func (r *jreader) reply(p *Reply) bool {
	return r.object(func(k []byte) int {
		switch string(k) {
		case "op_id":
			return took(1, r.str(&p.OpID))
		case "state":
			return took(2, readString(r, &p.State))
		case "existing":
			return took(3, r.bool(&p.Existing))
		case "code":
			return took(4, readString(r, &p.Code))
		case "message":
			return took(5, r.str(&p.Message))
		case "result":
			return took(6, r.raw(&p.Result))
		case "sealed_result":
			return took(7, r.bytes(&p.Sealed))
		case "result_kept_until":
			return took(8, r.timePtr(&p.KeptUntil))
		case "result_erase_on_delivery":
			return took(9, r.bool(&p.EraseOnDelivery))
		case "result_erased":
			return took(10, r.str(&p.Erased))
		case "result_digest":
			return took(11, r.str(&p.ResultDigest))
		case "result_bytes":
			return took(12, r.int(&p.ResultBytes))
		}
		return 0
	})
}
