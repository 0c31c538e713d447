/**
 * A worker process (spawned by the bench, one per worker). It sets its system's worker up, says
 * `ready`, starts on `go`, reports progress over IPC, and on `stop` shuts down gracefully and
 * reports every run index its handler executed.
 */
import type { RunStore } from "@leasehold/core"
import { Effect } from "effect"
import type { ChildConfig, ChildMessage, ParentMessage, StoreProfile } from "./protocol.js"
import { monotonicMs } from "./stats.js"
import type { WorkerHooks } from "./systems/system.js"
import { variantById } from "./variants.js"

const send = (message: ChildMessage, then?: () => void) => {
  process.send?.(message, undefined, {}, () => then?.())
}

const main = async () => {
  const config = JSON.parse(process.argv[2]!) as ChildConfig
  const variant = variantById(config.variant)
  const executed: Array<number> = []
  let claimed = 0
  let claimedAllSent = false

  const onRun = config.role === "latency"
    ? (i: number) => send({ t: "started", i, at: monotonicMs() })
    : (i: number) => void executed.push(i)

  // Leasehold only: count renewal statements and time each one, at the store boundary.
  const wrapStore = (store: RunStore["Service"]): RunStore["Service"] => ({
    ...store,
    renew: (owner, leases, ttl) =>
      Effect.suspend(() => {
        const sentAt = monotonicMs()
        return store.renew(owner, leases, ttl).pipe(
          Effect.tap((renewed) =>
            Effect.sync(() =>
              send({ t: "renew", sentAt, ms: monotonicMs() - sentAt, leases: leases.length, renewed: renewed.length })
            )
          )
        )
      })
  })

  // Leasehold: calls, items and time per store operation, from go to stop.
  const storeProfile: StoreProfile = {}
  const timed = <A, E>(operation: string, items: number, effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const started = performance.now()
      return Effect.ensuring(
        effect,
        Effect.sync(() => {
          const entry = (storeProfile[operation] ??= { calls: 0, items: 0, ms: 0 })
          entry.calls++
          entry.items += items
          entry.ms += performance.now() - started
        })
      )
    })
  const profileStore = (store: RunStore["Service"]): RunStore["Service"] => ({
    ...store,
    claim: (request) =>
      Effect.tap(
        timed("claim", 0, store.claim(request)),
        (runs) => Effect.sync(() => void (storeProfile["claim"]!.items += runs.length))
      ),
    completeBatch: (items, next) => timed("completeBatch", items.length, store.completeBatch(items, next)),
    renew: (owner, leases, ttl) => timed("renew", leases.length, store.renew(owner, leases, ttl))
  })

  const hooks: WorkerHooks = {
    onRun,
    hold: config.role === "hold",
    onEvent: (event) => {
      if (event._tag === "Claimed") {
        claimed++
        if (config.claimTarget !== undefined && !claimedAllSent && claimed >= config.claimTarget) {
          claimedAllSent = true
          send({ t: "claimedAll", n: claimed, at: monotonicMs() })
        }
      } else if (event._tag === "HeartbeatSent") {
        send({ t: "heartbeatSent", leases: event.leases.length, at: monotonicMs() })
      } else if (event._tag === "LeaseLost" || event._tag === "StoreError" || event._tag === "WriteRejected") {
        send({ t: "anomaly", event: JSON.stringify(event) })
      }
    },
    wrapStore: config.observeRenewals ? wrapStore : profileStore
  }

  const handle = await variant.system.startWorker(config.url, config.options ?? variant.options, hooks)

  let lastReported = -1
  const progress = setInterval(() => {
    const count = executed.length + claimed
    if (count !== lastReported) {
      lastReported = count
      send({ t: "progress", executed: executed.length, claimed })
    }
  }, 25)

  let cpuAtGo = process.cpuUsage()
  let wallAtGo = performance.now()
  process.on("message", (message: ParentMessage) => {
    if (message.t === "go") {
      cpuAtGo = process.cpuUsage()
      wallAtGo = performance.now()
      handle.go().catch((error) => {
        send({ t: "error", message: `start failed: ${String(error?.stack ?? error)}` })
      })
    } else if (message.t === "stop") {
      const cpu = process.cpuUsage(cpuAtGo)
      const profile = {
        cpuMs: (cpu.user + cpu.system) / 1000,
        wallMs: performance.now() - wallAtGo,
        store: storeProfile
      }
      void (async () => {
        try {
          await handle.stop()
        } catch (error) {
          send({ t: "error", message: `stop failed: ${String((error as Error)?.message ?? error)}` })
        }
        clearInterval(progress)
        // Libraries may leave timers behind: exit once the report is handed over.
        send({ t: "done", executed, profile }, () => process.exit(0))
      })()
    }
  })
  send({ t: "ready" })
}

main().catch((error) => {
  send({ t: "error", message: String(error?.stack ?? error) })
  process.exit(1)
})
