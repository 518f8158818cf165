module github.com/errand-go/errand/cmd/errand

go 1.25

require github.com/errand-go/errand v0.0.0
