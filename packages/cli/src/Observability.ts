/**
 * OpenTelemetry export for the command, configured by the standard `OTEL_*` environment variables
 * (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_SDK_DISABLED`, ...): when an endpoint is
 * set, runs are traced (`Telemetry`) and traces, metrics and logs are exported over OTLP/HTTP with
 * effect/observability. Without one nothing is started.
 *
 * @since 0.1.0
 */
import { Telemetry } from "@leasehold/core"
import { Effect, Layer } from "effect"
import type { OtlpExporter } from "effect/observability"

const configured = (name: string) => (process.env[name] ?? "") !== ""

/** Whether an OTLP endpoint is configured (and the SDK not disabled). */
export const enabled: boolean = process.env.OTEL_SDK_DISABLED !== "true" &&
  (configured("OTEL_EXPORTER_OTLP_ENDPOINT") || configured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))

// The OpenTelemetry default exporter is otlp; effect/observability exports a signal only when its
// OTEL_<SIGNAL>_EXPORTER says so. The command follows the specification's default.
if (enabled) {
  for (const signal of ["TRACES", "METRICS", "LOGS"]) process.env[`OTEL_${signal}_EXPORTER`] ??= "otlp"
}

/**
 * The exporters and run tracing when `enabled`, nothing otherwise. The exporters' modules are
 * loaded only then: every other start of the command would pay for them (ADR 0019).
 */
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
