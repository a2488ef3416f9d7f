package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// runFleet cleans every tenant's database of the fleet's file or
// registry, one after the other, each line prefixed with its tenant; a
// tenant that fails is named in the error, and the others are cleaned.
func (o *cleanupOptions) runFleet(ctx context.Context, out io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	src, closeSource, err := tenantSource(o.databasesFile, o.registryURL, o.registryTable)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer closeSource()
	tenants, err := src.Read(ctx)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	var failed []string
	for _, t := range tenants {
		var lines bytes.Buffer
		err := o.clean(ctx, t.URL(), &lines)
		for _, line := range strings.SplitAfter(lines.String(), "\n") {
			if line != "" {
				fmt.Fprintf(out, "%s: %s", t.Name, line)
			}
		}
		if err != nil {
			fmt.Fprintf(out, "%s: FAILED: %v\n", t.Name, err)
			failed = append(failed, fmt.Sprintf("tenant %s: %v", t.Name, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(failed) > 0 {
		return errors.New("cleanup: " + strings.Join(failed, "; "))
	}
	return nil
}
