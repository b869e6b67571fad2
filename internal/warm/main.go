package main

import (
	_ "cel.dev/cel-go/cel"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/prometheus/client_golang/api/prometheus/v1"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/prometheus/prometheus/model/textparse"
	_ "github.com/prometheus/prometheus/promql"
	_ "github.com/prometheus/prometheus/promql/parser"
	_ "github.com/prometheus/prometheus/tsdb"
	_ "github.com/slack-go/slack"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	_ "gonum.org/v1/plot"
	_ "gopkg.in/yaml.v3"
)

func main() {}
