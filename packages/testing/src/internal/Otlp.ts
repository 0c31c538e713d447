/**
 * OpenTelemetry export for an instrumented worker process, from the standard `OTEL_*` variables
 * its test passes: traces, metrics and logs over OTLP/HTTP when an endpoint is set, and run
 * tracing on. Without an endpoint, nothing, and the exporters' modules are not loaded: the worker
 * starts as light as the tests that do not trace expect.
 */
import { Telemetry } from "@leasehold/core"
import { Effect, Layer } from "effect"
import type { OtlpExporter } from "effect/observability"

const enabled = (process.env.OTEL_EXPORTER_OTLP_ENDPOINT ?? "") !== ""

// effect/observability exports a signal only when its OTEL_<SIGNAL>_EXPORTER says so; the
// specification's default is otlp.
if (enabled) {
  for (const signal of ["TRACES", "METRICS", "LOGS"]) process.env[`OTEL_${signal}_EXPORTER`] ??= "otlp"
}

export const layer: Layer.Layer<OtlpExporter.Flusher> | Layer.Layer<never> = enabled
  ? Layer.unwrap(Effect.promise(async () => {
    const [{ Otlp, OtlpSerialization }, { FetchHttpClient }] = await Promise.all([
      import("effect/observability"),
      import("effect/http")
    ])
    return Layer.mergeAll(
      Otlp.layerFromConfig({ resource: { serviceName: process.env.OTEL_SERVICE_NAME ?? "leasehold" } }),
      Telemetry.layer()
    ).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(FetchHttpClient.layer))
  }))
  : Layer.empty
