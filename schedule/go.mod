module github.com/errand-go/errand/schedule

go 1.26.0

require (
	github.com/errand-go/errand v0.1.0
	github.com/robfig/cron/v3 v3.0.1
)
