// Package pgdb is what errand's PostgreSQL broker and result backend share,
// so that neither requires the other: the versioned schema both keep their
// tables in (Migrate, Check), the location a backend declares and a broker
// co-locates with (Location), and the writer a producer's call uses, the
// caller's own transaction when its ctx carries one (Writer).
//
// One schema version covers both drivers' tables: errand migrate and either
// driver's Migrate create all of them, so a deployment that uses one driver
// today and both tomorrow migrates once.
package pgdb
