module github.com/errand-go/errand/e2e/machinery

go 1.26.0

require (
	github.com/RichardKnop/machinery/v2 v2.0.16
	github.com/aws/aws-sdk-go-v2 v1.47.7
	github.com/aws/aws-sdk-go-v2/credentials v1.20.15
	github.com/aws/aws-sdk-go-v2/service/sqs v1.52.10
	github.com/errand-go/errand v0.1.0
	github.com/errand-go/errand/backends/mongo v0.1.0
	github.com/errand-go/errand/backends/redis v0.1.0
	github.com/errand-go/errand/brokers/amqp v0.1.0
	github.com/errand-go/errand/brokers/redis v0.1.0
	github.com/errand-go/errand/brokers/sqs v0.1.0
	github.com/errand-go/errand/config v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	go.mongodb.org/mongo-driver/v2 v2.9.3
)
