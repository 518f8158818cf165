package main

import (
	"context"
	"errors"

	"github.com/errand-go/errand"
)

type errandPGPeer struct {
	pgPeer
	srv *errand.Server
}

func newErrandPGPeer(ctx context.Context) (pgPeer, error) {
	return nil, errors.New("errand PostgreSQL drivers not merged yet")
}
