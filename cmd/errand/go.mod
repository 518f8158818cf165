module github.com/errand-go/errand/cmd/errand

go 1.26.0

require (
	github.com/errand-go/errand v0.0.0
	github.com/errand-go/errand/backends/memcache v0.0.0
	github.com/errand-go/errand/backends/mongo v0.0.0
	github.com/errand-go/errand/backends/redis v0.0.0
	github.com/errand-go/errand/brokers/redis v0.0.0
	github.com/errand-go/errand/brokers/sqs v0.0.0
	github.com/redis/go-redis/v9 v9.23.0 // the tests clean their keys up
)
