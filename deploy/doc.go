// Package deploy holds what operators install beside the relay: Prometheus
// alert rules (prometheus/alerts.yml) and a Grafana dashboard
// (grafana/entoutbox.json). It has no code; its test checks that every rule
// and panel parses and uses only metrics that package metrics registers,
// that the dashboard shows every one of them, and that every panel or alert
// an alert's text names exists; and, with PostgreSQL and promtool, that the
// rules fire over what a relay cut off from its database exports.
package deploy
