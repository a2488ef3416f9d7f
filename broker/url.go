package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// The client libraries fill in what a URL leaves out (NATS and RabbitMQ dial
// 127.0.0.1 or localhost, Redis localhost:6379, pgx a local socket and a
// database named after the user), so a URL missing its server would deliver
// to a broker nobody named. These checks refuse such URLs at Open.

func checkNothing(*url.URL, string) error { return nil }

// checkNATSURL wants a host in every server of the comma-separated list
// (the port defaults to 4222).
func checkNATSURL(_ *url.URL, raw string) error {
	var servers []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	for i, s := range servers {
		if !strings.Contains(s, "://") {
			s = "nats://" + s // as nats.go reads the servers after the first
		}
		u, err := url.Parse(s)
		if err == nil && u.Hostname() != "" {
			continue
		}
		if len(servers) == 1 {
			return errors.New("no host: name the NATS server, e.g. nats://127.0.0.1:4222")
		}
		return fmt.Errorf("server %d of %d has no host: name every NATS server, e.g. nats://10.0.0.1:4222,10.0.0.2:4222", i+1, len(servers))
	}
	return nil
}

func checkAMQPURL(u *url.URL, _ string) error {
	if u.Hostname() == "" {
		return errors.New("no host: name the RabbitMQ server, e.g. amqp://guest:guest@127.0.0.1:5672/")
	}
	return nil
}

func checkRedisURL(u *url.URL, _ string) error {
	if u.Hostname() == "" {
		return errors.New("no host: name the Redis server, e.g. redis://127.0.0.1:6379/0")
	}
	return nil
}

func checkKafkaURL(u *url.URL, _ string) error {
	_, err := kafkaBrokers(u)
	return err
}

// kafkaBrokers lists the host:port addresses of a kafka:// URL; Sarama needs
// both parts of each.
func kafkaBrokers(u *url.URL) ([]string, error) {
	if u.User != nil {
		return nil, errors.New("credentials in kafka:// URLs are not supported")
	}
	const example = "list the Kafka brokers as host:port, e.g. kafka://10.0.0.1:9092,10.0.0.2:9092"
	var brokers []string
	for _, b := range strings.Split(u.Host, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b)
		switch {
		case err != nil || port == "":
			return nil, fmt.Errorf("broker address %q has no port: %s", b, example)
		case host == "":
			return nil, fmt.Errorf("broker address %q has no host: %s", b, example)
		}
		brokers = append(brokers, b)
	}
	if len(brokers) == 0 {
		return nil, errors.New("no broker address: " + example)
	}
	return brokers, nil
}

// checkPostgresURL wants a server, in the authority or as ?host= (which may
// name a socket directory), and a database, in the path or as ?dbname=.
func checkPostgresURL(u *url.URL, _ string) error {
	q := u.Query()
	if u.Hostname() == "" && q.Get("host") == "" {
		return errors.New("no host: name the PostgreSQL server, e.g. postgres://user@127.0.0.1:5432/db, or a socket directory with ?host=/var/run/postgresql")
	}
	if strings.TrimPrefix(u.Path, "/") == "" && q.Get("dbname") == "" {
		return errors.New("no database: name it in the path, e.g. postgres://user@127.0.0.1:5432/db")
	}
	return nil
}
