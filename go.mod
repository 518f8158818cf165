module github.com/errand-go/errand

go 1.25
