package errand

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/errand-go/errand/internal/wirejson"
)

// fastSignature decodes b into s without reflection when b is what
// EncodeSignature writes — every key spelled as Signature's JSON names
// them, each at most once, strings without escapes, integers without
// fraction or exponent, ETA and Deadline as time.Time writes them, Args
// elements objects, links objects or null — and reports whether it did;
// anything else (another key or spelling, an escape, a null element) is
// left to encoding/json, which then decodes all of b. b need not be valid
// JSON: what the fast path takes it has checked (each value it skips is
// checked on its own), so it declines what encoding/json would refuse. s
// must be zero. Headers, when not null, are decoded by encoding/json on
// their own.
func fastSignature(s *Signature, b []byte) bool {
	i := wirejson.SkipSpace(b, 0)
	// The strings are taken from one copy of b (a signature's UUID, name
	// and queue share one allocation).
	end, ok := fastSigObject(s, b, string(b), i, 0)
	return ok && wirejson.SkipSpace(b, end) == len(b)
}

// maxFastDepth bounds the nesting of linked signatures the fast path
// follows; deeper ones go to encoding/json.
const maxFastDepth = 32

// fastSigObject decodes the signature object at b[i] into s, returning the
// index after it. src is string(b): s's strings are its substrings.
func fastSigObject(s *Signature, b []byte, src string, i, depth int) (int, bool) {
	if depth > maxFastDepth || i >= len(b) || b[i] != '{' {
		return 0, false
	}
	var seen uint32
	i = wirejson.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		kb, j, ok := wirejson.Plain(b, i)
		if !ok {
			return 0, false
		}
		j = wirejson.SkipSpace(b, j)
		if j >= len(b) || b[j] != ':' {
			return 0, false
		}
		j = wirejson.SkipSpace(b, j+1)
		end := wirejson.SkipValue(b, j)
		if end < 0 || end <= j {
			return 0, false
		}
		v := b[j:end]
		null := string(v) == "null"
		k := sigField(kb)
		switch k {
		case fUUID, fName, fRoutingKey, fGroupUUID, fUniqueKey:
			var str string
			if !null {
				_, e, ok := wirejson.Plain(b, j)
				if !ok || e != end {
					return 0, false
				}
				str = src[j+1 : e-1]
			}
			switch k {
			case fUUID:
				s.UUID = str
			case fName:
				s.Name = str
			case fRoutingKey:
				s.RoutingKey = str
			case fGroupUUID:
				s.GroupUUID = str
			default:
				s.UniqueKey = str
			}
		case fGroupTaskCount, fRetryCount, fRetryTimeout, fAttempt, fSnoozes:
			var n int64
			if !null {
				if n, ok = wirejson.Int(v, strconv.IntSize); !ok {
					return 0, false
				}
			}
			switch k {
			case fGroupTaskCount:
				s.GroupTaskCount = int(n)
			case fRetryCount:
				s.RetryCount = int(n)
			case fRetryTimeout:
				s.RetryTimeout = int(n)
			case fSnoozes:
				s.Snoozes = int(n)
			default:
				s.Attempt = int(n)
			}
		case fTimeout, fUniqueFor:
			var n int64
			if !null {
				if n, ok = wirejson.Int(v, 64); !ok {
					return 0, false
				}
			}
			if k == fTimeout {
				s.Timeout = time.Duration(n)
			} else {
				s.UniqueFor = time.Duration(n)
			}
		case fPriority:
			if !null {
				if v[0] == '-' {
					return 0, false
				}
				n, ok := wirejson.Int(v, 64)
				if !ok || n > 255 {
					return 0, false
				}
				s.Priority = uint8(n)
			}
		case fImmutable:
			switch string(v) {
			case "true":
				s.Immutable = true
			case "false":
				s.Immutable = false
			case "null":
			default:
				return 0, false
			}
		case fETA, fDeadline:
			var t *time.Time
			if !null {
				if v[0] != '"' {
					return 0, false
				}
				t = new(time.Time)
				if t.UnmarshalJSON(v) != nil {
					return 0, false
				}
			}
			if k == fETA {
				s.ETA = t
			} else {
				s.Deadline = t
			}
		case fArgs:
			if !null {
				args, ok := fastArgs(v)
				if !ok {
					return 0, false
				}
				s.Args = args
			}
		case fHeaders:
			if !null {
				if v[0] != '{' || json.Unmarshal(v, &s.Headers) != nil {
					return 0, false
				}
			}
		case fOnSuccess, fOnError:
			var links []*Signature
			if !null {
				if links, ok = fastLinks(b, src, j, end, depth); !ok {
					return 0, false
				}
			}
			if k == fOnSuccess {
				s.OnSuccess = links
			} else {
				s.OnError = links
			}
		case fChordCallback:
			if !null {
				cb := new(Signature)
				if e, ok := fastSigObject(cb, b, src, j, depth+1); !ok || e != end {
					return 0, false
				}
				s.ChordCallback = cb
			}
		default:
			return 0, false
		}
		if seen&(1<<k) != 0 {
			return 0, false
		}
		seen |= 1 << k
		j = wirejson.SkipSpace(b, end)
		if j < len(b) && b[j] == ',' {
			i = wirejson.SkipSpace(b, j+1)
			continue
		}
		if j < len(b) && b[j] == '}' {
			return j + 1, true
		}
		return 0, false
	}
}

// The fields of Signature's JSON form, as bits of a set.
const (
	fUnknown uint = iota
	fUUID
	fName
	fRoutingKey
	fGroupUUID
	fUniqueKey
	fGroupTaskCount
	fRetryCount
	fRetryTimeout
	fAttempt
	fSnoozes
	fTimeout
	fUniqueFor
	fPriority
	fImmutable
	fETA
	fDeadline
	fArgs
	fHeaders
	fOnSuccess
	fOnError
	fChordCallback
)

// sigField names the Signature field under the JSON key k, spelled
// exactly as EncodeSignature writes it; fUnknown for any other.
func sigField(k []byte) uint {
	switch string(k) { // no copy: the compiler compares in place
	case "UUID":
		return fUUID
	case "Name":
		return fName
	case "RoutingKey":
		return fRoutingKey
	case "GroupUUID":
		return fGroupUUID
	case "UniqueKey":
		return fUniqueKey
	case "GroupTaskCount":
		return fGroupTaskCount
	case "RetryCount":
		return fRetryCount
	case "RetryTimeout":
		return fRetryTimeout
	case "Attempt":
		return fAttempt
	case "Snoozes":
		return fSnoozes
	case "Timeout":
		return fTimeout
	case "UniqueFor":
		return fUniqueFor
	case "Priority":
		return fPriority
	case "Immutable":
		return fImmutable
	case "ETA":
		return fETA
	case "Deadline":
		return fDeadline
	case "Args":
		return fArgs
	case "Headers":
		return fHeaders
	case "OnSuccess":
		return fOnSuccess
	case "OnError":
		return fOnError
	case "ChordCallback":
		return fChordCallback
	}
	return fUnknown
}

// fastArgs decodes a JSON array of Arg objects. Their values share one
// copy of v.
func fastArgs(v []byte) ([]Arg, bool) {
	if v[0] != '[' {
		return nil, false
	}
	i := wirejson.SkipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return make([]Arg, 0, 4), true
	}
	v = bytes.Clone(v)
	var buf [8]Arg // most tasks have fewer: one exact allocation below
	args := buf[:0]
	for {
		end := wirejson.SkipValue(v, i)
		if end < 0 || i >= len(v) || v[i] != '{' {
			return nil, false
		}
		var a Arg
		if !fastArg(&a, v[i:end], true) {
			return nil, false
		}
		args = append(args, a)
		i = wirejson.SkipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = wirejson.SkipSpace(v, i+1)
			continue
		}
		if i < len(v) && v[i] == ']' {
			return slices.Clone(args), true
		}
		return nil, false
	}
}

// fastLinks decodes the JSON array of signature objects b[i:end]; src
// is string(b).
func fastLinks(b []byte, src string, i, end, depth int) ([]*Signature, bool) {
	if b[i] != '[' {
		return nil, false
	}
	links := []*Signature{}
	i = wirejson.SkipSpace(b, i+1)
	if i < end && b[i] == ']' {
		return links, true
	}
	for {
		s := new(Signature)
		e, ok := fastSigObject(s, b, src, i, depth+1)
		if !ok || e > end {
			return nil, false
		}
		links = append(links, s)
		i = wirejson.SkipSpace(b, e)
		if i < end && b[i] == ',' {
			i = wirejson.SkipSpace(b, i+1)
			continue
		}
		if i < end && b[i] == ']' && i+1 == end {
			return links, true
		}
		return nil, false
	}
}
