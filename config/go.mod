module github.com/errand-go/errand/config

go 1.26.0

require (
	github.com/errand-go/errand v0.1.0
	go.yaml.in/yaml/v3 v3.0.6
)
