package postgresbroker

import "time"

// SetNotifyWindow sets b's notifyWindow (tests of the trailing
// notification need one longer than a test's steps).
func SetNotifyWindow(b *Broker, d time.Duration) { b.notify.window = d }
