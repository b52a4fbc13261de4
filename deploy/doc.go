// Package deploy holds llmq's deployment assets, checked by its tests:
//
//   - prometheus/llmq-rules.yml: alert rules (dead letters growing, 429
//     ratio, queue depth, worker down or absent), validated with
//     Prometheus's own rule-file and PromQL parsers;
//   - prometheus/prometheus.yml: the scrape configuration of the compose
//     stack;
//   - grafana/llmq-dashboard.json: a dashboard over the metrics of
//     docs/metrics.md;
//   - docker-compose.yml and Dockerfile: Postgres, RabbitMQ, the simulator,
//     workers, the API and Prometheus on one machine;
//   - kubernetes/: worker and API Deployments and Services, the ConfigMap
//     with the sample llmq.yaml, and an example of the Secret they reference.
//
// The package has no Go API; it exists so that "go test ./deploy/" checks the
// assets while the heavy Prometheus parser stays out of the llmq binary.
package deploy
