package errand_test

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// A task sent to a worker, and its result read back.
func Example() {
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("add", func(ctx context.Context, a, b int) (int, error) { return a + b, nil })

	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4})
	w.Start()
	defer w.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
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
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("square", func(x int) (int, error) { return x * x, nil })
	srv.Register("sum", func(label string, xs ...int) (string, error) {
		total := 0
		for _, x := range xs {
			total += x
		}
		return fmt.Sprintf("%s %d", label, total), nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4})
	w.Start()
	defer w.Shutdown(context.Background())

	var members []*errand.Signature
	for i := 1; i <= 10; i++ {
		members = append(members, errand.NewSignature("square", i))
	}
	group, _ := errand.NewGroup(members...)
	chord, _ := errand.NewChord(group, errand.NewSignature("sum", "sum of squares:"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := srv.SendChord(ctx, chord, errand.SendConcurrency(2))
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
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	srv.Register("mul", func(a, b int) (int, error) { return a * b, nil })
	w := srv.NewWorker(errand.WorkerConfig{})
	w.Start()
	defer w.Shutdown(context.Background())

	// mul(10, add(1, 2)) then add(5, previous)
	chain, _ := errand.NewChain(errand.NewSignature("add", 1, 2), errand.NewSignature("mul", 10), errand.NewSignature("add", 5))
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
