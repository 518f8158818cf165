package web_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/web"
)

// The task page and the queue's lists show the progress a task last
// reported (errand.SetProgress), as the backend stores it; the page keeps
// reloading while the task runs.
func TestProgressShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	ctx := context.Background()
	st, err := f.srv.Backend().GetState(ctx, f.schedule)
	if err != nil {
		t.Fatal(err)
	}
	st.State, st.StartedAt = errand.StateStarted, time.Now()
	st.Progress = json.RawMessage(`{"done":3,"of":10}`)
	if errs := f.srv.Backend().SetStates(ctx, []*errand.TaskState{st}); errs != nil && errs[0] != nil {
		t.Fatal(errs[0])
	}
	_, body := f.get(t, "/queues/"+queue+"/tasks/"+f.schedule)
	for _, want := range []string{`<dt>Progress</dt>`, `<pre id="progress">{
  &#34;done&#34;: 3,
  &#34;of&#34;: 10
}</pre>`, `data-refresh="2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page of a running task that reported progress lacks %q:\n%s", want, body)
		}
	}
	_, body = f.get(t, "/queues/"+queue+"/scheduled")
	if !strings.Contains(body, `data-progress title="{&#34;done&#34;:3,&#34;of&#34;:10}">{&#34;done&#34;:3,&#34;of&#34;:10}</span>`) {
		t.Errorf("the scheduled list does not show the task's progress beside its state:\n%s", body)
	}
	_, body = f.get(t, "/queues/"+queue+"/tasks/"+f.done[0])
	if strings.Contains(body, `id="progress"`) {
		t.Errorf("the page of a task that reported no progress shows some:\n%s", body)
	}
}
