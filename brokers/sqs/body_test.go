package sqsbroker

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestRequestBodyWorkaround replays net/http's last read of a request body
// (transferWriter.writeBody's check for bytes beyond Content-Length) after
// smithy-go has closed it, as happens when the response arrives first: on
// smithy's own body io.Copy fails with io.EOF, which makes net/http close
// the connection; on the body RequestBodyWorkaround gives the transport it
// ends cleanly.
func TestRequestBodyWorkaround(t *testing.T) {
	for _, fix := range []bool{false, true} {
		var got *http.Request
		o := sqs.Options{HTTPClient: smithyhttp.ClientDoFunc(func(r *http.Request) (*http.Response, error) {
			got = r
			return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
		})}
		if fix {
			RequestBodyWorkaround(&o)
			RequestBodyWorkaround(&o) // applying it twice wraps once
			if c, ok := o.HTTPClient.(plainBodyClient); !ok || func() bool { _, again := c.next.(plainBodyClient); return again }() {
				t.Fatalf("HTTPClient = %T", o.HTTPClient)
			}
		}
		sreq, err := smithyhttp.NewStackRequest().(*smithyhttp.Request).SetStream(bytes.NewReader([]byte(`{"QueueUrl":"q"}`)))
		if err != nil {
			t.Fatal(err)
		}
		req := sreq.Build(context.Background())
		if _, err := o.HTTPClient.Do(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, io.LimitReader(got.Body, 16)); err != nil {
			t.Fatal(err)
		}
		req.Body.Close() // smithy-go's ClientHandler, once Do has returned
		_, err = io.Copy(io.Discard, got.Body)
		if fix && err != nil {
			t.Errorf("with the workaround: read after smithy's close: %v", err)
		}
		if !fix && err != io.EOF {
			t.Logf("without the workaround, a read after smithy's close returns %v, not io.EOF: smithy-go changed, is RequestBodyWorkaround still needed?", err)
		}
	}
}
