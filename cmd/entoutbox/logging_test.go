package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"
)

// Whatever a library logs, in the message, an error or a field, carries
// no password: neither of the URLs the command was given (even quoted
// alone) nor of any other URL or key=value connection string.
func TestLogsRedactPasswords(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			redact := newRedactor("postgres://app:given-pw@db:5432/app", "amqp://guest:rabbit%2Fpw@mq:5672/")
			_, logger, err := newLoggers(&out, "debug", format, redact)
			require.NoError(t, err)
			logger.Error("connecting to postgres://other:other-pw@db2/x failed", fmt.Errorf("dial: %w",
				errors.New("auth failed for given-pw")), watermill.LogFields{
				"dsn": "host=db user=app password=dsn-pw dbname=app", "url": "redis://:redis-pw@cache:6379/0",
				"raw": "rabbit/pw"})
			logger.Error("stopped", nil, nil)
			got := out.String()
			for _, secret := range []string{"given-pw", "other-pw", "dsn-pw", "redis-pw", "rabbit/pw", "rabbit%2Fpw"} {
				require.NotContains(t, got, secret)
			}
			require.Contains(t, got, "xxxxx")
			require.Contains(t, got, "stopped")
			require.NotContains(t, got, "error=<nil>", "an Error without error logs none")
			require.NotContains(t, got, `"error":null`)
		})
	}
	_, _, err := newLoggers(&bytes.Buffer{}, "info", "yaml", redactor{})
	require.EqualError(t, err, `--log-format "yaml": want text or json`)
}
