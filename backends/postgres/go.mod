module github.com/errand-go/errand/backends/postgres

go 1.26.0

require (
	github.com/errand-go/errand v0.1.0
	github.com/errand-go/errand/internal/pgdb v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
)
