module github.com/errand-go/errand/brokers/amqp

go 1.26.0

require (
	github.com/errand-go/errand v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
)
