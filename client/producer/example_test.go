package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

// Publish a snapshot, then patch one key against the version just written.
func Example() {
	ctx := context.Background()
	c, err := producer.New(producer.Options{Author: "alice@example.com"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: "payments"}); err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		log.Fatal(err)
	}
	v1, err := c.Publish(ctx, "payments/limits", []producer.Property{
		{Key: "rps", Value: []byte(`100`), ContentType: "application/json"},
		{Key: "owner", Value: []byte("team-payments"), ContentType: "text/plain"},
	}, producer.WithMessage("initial limits"))
	if err != nil {
		log.Fatal(err)
	}
	v2, err := c.Patch(ctx, "payments/limits", v1.GetSeq(), producer.Patch{
		Set: []producer.Property{{Key: "rps", Value: []byte(`150`), ContentType: "application/json"}},
	}, producer.WithMessage("raise rps for the sale"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", v2.GetSeq(), v2.GetChecksum())
}

// A stale base is a conflict that names the latest version; rebase and retry.
func ExampleClient_Patch_conflict() {
	ctx := context.Background()
	c, err := producer.New(producer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Patch(ctx, "payments/limits", 1, producer.Patch{Delete: []string{"owner"}})
	var perr *producer.Error
	switch {
	case errors.Is(err, producer.ErrConflict) && errors.As(err, &perr):
		fmt.Println("someone else published; latest is", perr.CurrentVersion)
	case errors.As(err, &perr) && perr.Field != "":
		fmt.Printf("bad %s: %s (limit %s)\n", perr.Field, perr.Message, perr.Limit)
	case err != nil:
		log.Fatal(err)
	}
}

// Read a version and verify its checksum from the returned content.
func ExampleClient_Get() {
	ctx := context.Background()
	c, err := producer.New(producer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	v, err := c.Get(ctx, "payments/limits", producer.AtVersion(2))
	if err != nil {
		log.Fatal(err)
	}
	if err := v.Verify(); err != nil {
		log.Fatal(err)
	}
	for _, p := range v.Properties {
		fmt.Printf("%s (%s) = %s\n", p.Key, p.ContentType, p.Value)
	}
}

// Walk the history, newest first, stopping after ten versions.
func ExampleClient_History() {
	ctx := context.Background()
	c, err := producer.New(producer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	n := 0
	for v, err := range c.History(ctx, "payments/limits") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(v.GetSeq(), v.GetAuthor(), v.GetMessage())
		if n++; n == 10 {
			break
		}
	}
}
