module github.com/errand-go/errand/backends/memcache

go 1.25

require github.com/errand-go/errand v0.1.0

require github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
