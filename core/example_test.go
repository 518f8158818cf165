package core_test

import (
	"context"
	"fmt"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/core"
)

// A task sent to a worker, and its result read back.
func Example() {
	srv, _ := core.NewServer(core.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("add", func(ctx context.Context, a, b int) (int, error) { return a + b, nil })

	w := srv.NewWorker(core.WorkerConfig{Concurrency: 4})
	w.Start()
	defer w.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := srv.SendTask(ctx, core.NewSignature("add", 2, 3))
	if err != nil {
		panic(err)
	}
	var sum int
	if err := r.GetInto(ctx, &sum); err != nil {
		panic(err)
	}
	fmt.Println("2 + 3 =", sum)
	// Output: 2 + 3 = 5
}

// A chord: ten squares computed in parallel, summed by a callback that
// receives every member's result in group order.
func ExampleServer_SendChord() {
	srv, _ := core.NewServer(core.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("square", func(x int) (int, error) { return x * x, nil })
	srv.Register("sum", func(label string, xs ...int) (string, error) {
		total := 0
		for _, x := range xs {
			total += x
		}
		return fmt.Sprintf("%s %d", label, total), nil
	})
	w := srv.NewWorker(core.WorkerConfig{Concurrency: 4})
	w.Start()
	defer w.Shutdown(context.Background())

	var members []*core.Signature
	for i := 1; i <= 10; i++ {
		members = append(members, core.NewSignature("square", i))
	}
	group, _ := core.NewGroup(members...)
	chord, _ := core.NewChord(group, core.NewSignature("sum", "sum of squares:"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := srv.SendChord(ctx, chord, 2)
	if err != nil {
		panic(err)
	}
	var out string
	if err := r.GetInto(ctx, &out); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: sum of squares: 385
}

// A chain: each task's results are appended to the next task's arguments.
func ExampleServer_SendChain() {
	srv, _ := core.NewServer(core.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	srv.Register("mul", func(a, b int) (int, error) { return a * b, nil })
	w := srv.NewWorker(core.WorkerConfig{})
	w.Start()
	defer w.Shutdown(context.Background())

	// mul(10, add(1, 2)) then add(5, previous)
	chain, _ := core.NewChain(core.NewSignature("add", 1, 2), core.NewSignature("mul", 10), core.NewSignature("add", 5))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, _ := srv.SendChain(ctx, chain)
	var out int
	if err := r.GetInto(ctx, &out); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: 35
}
