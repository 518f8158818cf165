package sqsbroker

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// RequestBodyWorkaround is an sqs client option that works around a race
// between smithy-go (the SDK's HTTP layer) and net/http's Transport, which
// otherwise now and then closes a connection under a response the SDK is
// still reading: the call fails with "use of closed network connection"
// after a 200 and the SDK retries it. For a ReceiveMessage the first
// attempt's messages were delivered but never seen, so they stay invisible
// for their whole visibility timeout (a 30 s stall of a drain).
//
// The race: smithy-go gives the Transport the request body wrapped in a
// closer whose WriteTo returns io.EOF once closed, and closes it as soon as
// Client.Do returns (smithy-go transport/http/client.go, ClientHandler.Handle).
// net/http flushes the headers, streams the body straight to the socket,
// then reads the body once more (transferWriter.writeBody, checking for
// bytes beyond Content-Length) in the write loop. The server has the whole
// request by then and may already have answered, so Do returned and smithy
// closed the body; that last read goes through WriteTo, io.Copy hands its
// io.EOF back as an error (it only swallows io.EOF from Read), and
// persistConn.writeLoop, taking it for a failed write, closes the
// connection while the response body is being read.
//
// The option wraps the client's HTTPClient so the Transport gets a body with
// only Read and Close: a Read after smithy's Close returns a plain io.EOF,
// which ends the copy cleanly. Open applies it; with New, pass it where you
// build the client:
//
//	client := sqs.NewFromConfig(cfg, sqsbroker.RequestBodyWorkaround)
//
// Apply it after any option that replaces HTTPClient. Upstream: the SDK now
// retries the error (aws/aws-sdk-go-v2#2949, after #2737 and #1825), which
// is what turns it into invisible messages for a receive; smithy-go#678 is
// about the body still being used after Do returns.
func RequestBodyWorkaround(o *sqs.Options) {
	// sqs.New resolves the default HTTPClient before it runs options.
	if o.HTTPClient == nil {
		return
	}
	if _, ok := o.HTTPClient.(plainBodyClient); !ok {
		o.HTTPClient = plainBodyClient{o.HTTPClient}
	}
}

// plainBodyClient hands its client a request whose body hides every method
// but Read and Close (see RequestBodyWorkaround).
type plainBodyClient struct{ next sqs.HTTPClient }

func (c plainBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	r := new(http.Request)
	*r = *req
	r.Body = plainBody{req.Body}
	return c.next.Do(r)
}

type plainBody struct{ rc io.ReadCloser }

func (b plainBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b plainBody) Close() error               { return b.rc.Close() }
