package errand

import (
	"encoding/json"
	"strconv"

	"github.com/errand-go/errand/internal/wirejson"
)

// appendSignature appends s's wire form, byte for byte as encoding/json
// writes it, without reflection for what errand sends (Args values of
// the basic types; any other value and Headers go through encoding/json
// alone), and reports whether it did: false (dst as it was) where
// encoding/json must write all of s instead — an argument value it
// refuses, a time outside years 0-9999, links nested deeper than
// maxFastDepth (perhaps a cycle, which encoding/json reports) — so its
// output and errors stay encoding/json's. FuzzEncodeSignature compares
// both encoders.
func appendSignature(dst []byte, s *Signature, depth int) ([]byte, bool) {
	if s == nil {
		return append(dst, "null"...), true
	}
	if depth > maxFastDepth {
		return dst, false
	}
	n := len(dst)
	var ok bool
	dst = append(dst, `{"UUID":`...)
	dst = wirejson.AppendString(dst, s.UUID)
	dst = append(dst, `,"Name":`...)
	dst = wirejson.AppendString(dst, s.Name)
	dst = append(dst, `,"RoutingKey":`...)
	dst = wirejson.AppendString(dst, s.RoutingKey)
	dst = append(dst, `,"ETA":`...)
	if s.ETA == nil {
		dst = append(dst, "null"...)
	} else if dst, ok = wirejson.AppendTime(dst, *s.ETA); !ok {
		return dst[:n], false
	}
	dst = append(dst, `,"GroupUUID":`...)
	dst = wirejson.AppendString(dst, s.GroupUUID)
	dst = append(dst, `,"GroupTaskCount":`...)
	dst = strconv.AppendInt(dst, int64(s.GroupTaskCount), 10)
	dst = append(dst, `,"Args":`...)
	if s.Args == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, a := range s.Args {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"name":`...)
			dst = wirejson.AppendString(dst, a.Name)
			dst = append(dst, `,"type":`...)
			dst = wirejson.AppendString(dst, a.Type)
			dst = append(dst, `,"value":`...)
			if dst, ok = appendArgValue(dst, a.Value); !ok {
				return dst[:n], false
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"Headers":`...)
	if s.Headers == nil {
		dst = append(dst, "null"...)
	} else {
		h, err := json.Marshal(s.Headers)
		if err != nil {
			return dst[:n], false
		}
		dst = append(dst, h...)
	}
	dst = append(dst, `,"Priority":`...)
	dst = strconv.AppendUint(dst, uint64(s.Priority), 10)
	dst = append(dst, `,"Immutable":`...)
	dst = strconv.AppendBool(dst, s.Immutable)
	dst = append(dst, `,"RetryCount":`...)
	dst = strconv.AppendInt(dst, int64(s.RetryCount), 10)
	dst = append(dst, `,"RetryTimeout":`...)
	dst = strconv.AppendInt(dst, int64(s.RetryTimeout), 10)
	for _, l := range [...]struct {
		key   string
		links []*Signature
	}{{`,"OnSuccess":`, s.OnSuccess}, {`,"OnError":`, s.OnError}} {
		dst = append(dst, l.key...)
		if l.links == nil {
			dst = append(dst, "null"...)
			continue
		}
		dst = append(dst, '[')
		for i, c := range l.links {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, ok = appendSignature(dst, c, depth+1); !ok {
				return dst[:n], false
			}
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"ChordCallback":`...)
	if dst, ok = appendSignature(dst, s.ChordCallback, depth+1); !ok {
		return dst[:n], false
	}
	if s.Attempt != 0 {
		dst = append(dst, `,"Attempt":`...)
		dst = strconv.AppendInt(dst, int64(s.Attempt), 10)
	}
	if s.Snoozes != 0 {
		dst = append(dst, `,"Snoozes":`...)
		dst = strconv.AppendInt(dst, int64(s.Snoozes), 10)
	}
	if s.Timeout != 0 {
		dst = append(dst, `,"Timeout":`...)
		dst = strconv.AppendInt(dst, int64(s.Timeout), 10)
	}
	if s.Deadline != nil {
		dst = append(dst, `,"Deadline":`...)
		if dst, ok = wirejson.AppendTime(dst, *s.Deadline); !ok {
			return dst[:n], false
		}
	}
	if s.UniqueKey != "" {
		dst = append(dst, `,"UniqueKey":`...)
		dst = wirejson.AppendString(dst, s.UniqueKey)
	}
	if s.UniqueFor != 0 {
		dst = append(dst, `,"UniqueFor":`...)
		dst = strconv.AppendInt(dst, int64(s.UniqueFor), 10)
	}
	return append(dst, '}'), true
}

// appendArgValue appends an argument's value: the basic types by
// wirejson, raw JSON (an argument decoded from the wire) as encoding/json
// writes a json.RawMessage, anything else by encoding/json.
func appendArgValue(dst []byte, v any) ([]byte, bool) {
	if out, ok := wirejson.AppendValue(dst, v); ok {
		return out, true
	}
	if raw, ok := v.(json.RawMessage); ok {
		return wirejson.AppendRaw(dst, raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, false
	}
	return append(dst, b...), true
}

// sigSize guesses the length of s's wire form, to size its buffer once.
func sigSize(s *Signature) int {
	// The keys and nulls of an empty signature take about 210 bytes, an
	// argument's keys about 34 and a number up to 20.
	n := 216 + len(s.UUID) + len(s.Name) + len(s.RoutingKey) + len(s.GroupUUID) + len(s.UniqueKey)
	for _, a := range s.Args {
		n += 40 + len(a.Name) + len(a.Type)
		if str, ok := a.Value.(string); ok {
			n += len(str)
		} else if raw, ok := a.Value.(json.RawMessage); ok {
			n += len(raw)
		}
	}
	return n
}
