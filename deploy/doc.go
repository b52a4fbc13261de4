// Package deploy holds llmq's deployment assets, checked by its tests:
//
//   - prometheus/llmq-rules.yml: alert rules (dead letters growing, 429
//     ratio, queue depth, worker down or absent), validated with
//     Prometheus's own rule-file and PromQL parsers;
//   - prometheus/prometheus.yml: the scrape configuration of the compose
//     stack, which sends its alerts to the compose Alertmanager;
//   - alertmanager/alertmanager.yml: that Alertmanager, which llmq's own
//     dead-letter alerts (llmq.yaml) reach too;
//   - grafana/llmq-dashboard.json: a dashboard over the metrics of
//     docs/metrics.md;
//   - docker-compose.yml and Dockerfile: Postgres, RabbitMQ, the simulator,
//     workers, the API, Prometheus and Alertmanager on one machine; every
//     llmq listener is set to 0.0.0.0 there (the binary's defaults are
//     loopback);
//   - kubernetes/: worker and API Deployments and Services (probes on
//     /healthz and /readyz), the ConfigMap with the sample llmq.yaml, an
//     example of the Secret they reference, NetworkPolicies that let only
//     Prometheus pods reach the metrics ports (networkpolicy.yaml: the
//     metrics name every tenant's traffic), and ServiceMonitors for the
//     Prometheus Operator (servicemonitor.yaml, applied apart).
//
// The package has no Go API; it exists so that "go test ./deploy/" checks the
// assets while the heavy Prometheus parser stays out of the llmq binary.
package deploy
