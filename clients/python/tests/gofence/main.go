// Command gofence writes through the Go guards of package fence, for the
// Python client's tests to check that Go and Python writers fence each
// other on one PostgreSQL table and one Redis:
//
//	gofence postgres URL TABLE KEY TOKEN VALUE
//	gofence redis    URL PREFIX KEY TOKEN VALUE
//
// It exits 0 when the write was accepted, and prints "stale LAST" and
// exits 4 when it was refused as stale.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/fence/redisfence"
)

func main() {
	if len(os.Args) != 7 {
		log.Fatal("usage: gofence postgres|redis URL TABLE|PREFIX KEY TOKEN VALUE")
	}
	kind, url, where, key, value := os.Args[1], os.Args[2], os.Args[3], os.Args[4], []byte(os.Args[6])
	token, err := strconv.ParseUint(os.Args[5], 10, 64)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var g fence.Guard
	switch kind {
	case "postgres":
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		pg := pgfence.New(conn, fence.WithTable(where))
		if err := pg.Init(ctx); err != nil {
			log.Fatal(err)
		}
		g = pg
	case "redis":
		opt, err := redis.ParseURL(url)
		if err != nil {
			log.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		defer func() { _ = rdb.Close() }()
		g = redisfence.New(rdb, fence.WithKeyPrefix(where))
	default:
		log.Fatalf("unknown guard %q", kind)
	}
	err = g.Write(ctx, key, token, value)
	var stale *fence.StaleTokenError
	switch {
	case errors.As(err, &stale):
		fmt.Println("stale", stale.LastToken)
		os.Exit(4)
	case err != nil:
		log.Fatal(err)
	}
}
