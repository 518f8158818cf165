module github.com/errand-go/errand/bench

go 1.26.0

require (
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
	github.com/errand-go/errand v0.0.0
	github.com/errand-go/errand/backends/memcache v0.0.0
	github.com/errand-go/errand/backends/mongo v0.0.0
	github.com/errand-go/errand/backends/redis v0.0.0
	github.com/errand-go/errand/brokers/redis v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	go.mongodb.org/mongo-driver/v2 v2.9.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/xdg-go/pbkdf2 v1.0.0 // indirect
	github.com/xdg-go/scram v1.2.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/sync v0.21.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.39.0 // indirect
)

replace (
	github.com/errand-go/errand => ../
	github.com/errand-go/errand/backends/memcache => ../backends/memcache
	github.com/errand-go/errand/backends/mongo => ../backends/mongo
	github.com/errand-go/errand/backends/redis => ../backends/redis
	github.com/errand-go/errand/brokers/redis => ../brokers/redis
)
