package machinerye2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	mbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	mbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	mconfig "github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/redis" // redis:// backends, format=machinery among them
	_ "github.com/errand-go/errand/brokers/redis"  // redis:// brokers
	errandconfig "github.com/errand-go/errand/config"
)

// machineryTestConfig returns the path of machinery's own example YAML
// file, config/testconfig.yml, in the module cache.
func machineryTestConfig(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/RichardKnop/machinery/v2").Output()
	if err != nil {
		t.Fatalf("locating machinery's module: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "config", "testconfig.yml")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMachineryYAMLConfiguresErrandWorker: machinery's own example config
// file, unchanged, with the environment variables a deployment sets
// (BROKER and RESULT_BACKEND naming its Redis; REDIS_MASTER_NAME emptied
// since the file names a Sentinel master this Redis does not have),
// configures an errand worker through errandconfig; a machinery producer
// configured from the same file by machinery's own loader sends a task
// and reads its result.
func TestMachineryYAMLConfiguresErrandWorker(t *testing.T) {
	rs := newRedis(t)
	path := machineryTestConfig(t)
	redisURL := "redis://" + rs.addr + "/12"
	env := map[string]string{"BROKER": redisURL, "RESULT_BACKEND": redisURL, "REDIS_MASTER_NAME": ""}
	mc, err := errandconfig.LoadMachinery(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	settings, err := errandconfig.FromMachinery(mc)
	if err != nil {
		t.Fatal(err)
	}
	if settings.DefaultQueue != "default_queue" {
		t.Fatalf("default queue %q, want testconfig.yml's default_queue", settings.DefaultQueue)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := settings.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRuns()
	if err := srv.RegisterTasks(taskFuncs(r, "errand")); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(settings.WorkerConfig())
	w.Start()
	defer func() {
		w.Shutdown(context.Background())
		srv.Close()
	}()

	// The producer: machinery's own loader, on the same file.
	mcnf, err := mconfig.NewFromYaml(path, false)
	if err != nil {
		t.Fatal(err)
	}
	mcnf.Redis.MasterName = ""
	if mcnf.DefaultQueue != "default_queue" || mcnf.Redis.DelayedTasksKey != "delayed_tasks_key" {
		t.Fatalf("machinery read %s as %+v", path, mcnf)
	}
	prod := machinery.NewServer(mcnf, mbroker.NewGR(mcnf, []string{rs.addr}, testDB), mbackend.NewGR(mcnf, []string{rs.addr}, testDB), eager.New())
	tag := unique("yaml")
	ar, err := prod.SendTask(sig("add", tag, 20, 22))
	if err != nil {
		t.Fatal(err)
	}
	eta := time.Now().Add(time.Second)
	later := sig("add", tag+"-eta", 1, 1)
	later.ETA = &eta
	ar2, err := prod.SendTask(later)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ar.GetWithTimeout(getTimeout, getSleep)
	if err != nil || len(got) != 1 || got[0].Interface() != int64(42) {
		t.Errorf("task sent by machinery to testconfig.yml's queue: result %v, %v; want 42", values(got), err)
	}
	got, err = ar2.GetWithTimeout(getTimeout, getSleep)
	if err != nil || len(got) != 1 || got[0].Interface() != int64(2) {
		t.Errorf("ETA task through testconfig.yml's delayed_tasks_key: result %v, %v; want 2", values(got), err)
	}
	r.exactlyOnce(t, map[string]int{tag: 1, tag + "-eta": 1})
}
