package machinerye2e

import (
	"context"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	mmongo "github.com/RichardKnop/machinery/v2/backends/mongo"
	mbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	"github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	mongobackend "github.com/errand-go/errand/backends/mongo"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestMongoMachineryProducerErrandWorkers: an unchanged machinery producer
// with machinery's Redis broker and its MongoDB result backend sends the
// scenario's tasks and workflows; errand workers alone run them, writing
// states into machinery's tasks and group_metas collections, where
// machinery's AsyncResult reads every result. (No machinery workers here:
// machinery v2.0.16's Mongo TriggerChord reports a win even when its update
// matched nothing, so machinery workers can fire a chord twice on it.)
func TestMongoMachineryProducerErrandWorkers(t *testing.T) {
	rs := newRedis(t)
	uri := need(t, "ERRAND_MONGO_URI")
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		unreachable(t, "MongoDB at ERRAND_MONGO_URI", err)
	}
	db := unique("machinery_e2e")
	t.Cleanup(func() { client.Database(db).Drop(context.Background()) })

	queue, delayed := unique("machinery-mongo-q"), unique("machinery-mongo-delayed")
	r := newRuns()
	broker := redisbroker.NewMachinery(rs.client, &redisbroker.MachineryOptions{DefaultQueue: queue, DelayedTasksKey: delayed, Prefix: "errand-machinery-test"})
	errandWorker(t, broker, mongobackend.NewMachinery(client, &mongobackend.MachineryOptions{Database: db}), queue, r)

	cnf := machineryConfig(queue, delayed)
	cnf.ResultBackend = uri
	cnf.MongoDB = &config.MongoDBConfig{Database: db}
	be, err := mmongo.New(cnf)
	if err != nil {
		t.Fatal(err)
	}
	prod := machinery.NewServer(cnf, mbroker.NewGR(cnf, []string{rs.addr}, testDB), be, eager.New())
	want := scenario(t, prod, r, 100)
	r.exactlyOnce(t, want)
}
