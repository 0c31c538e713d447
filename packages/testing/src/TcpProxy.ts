/**
 * A TCP proxy the test (or the demo) owns, between one worker process and PostgreSQL. `partition()` stops
 * forwarding in both directions while keeping every socket open, as a firewall DROP would: the
 * worker sees silence, not a reset. Bytes sent meanwhile are held, like unacknowledged TCP
 * segments, and delivered on `heal()`. `partition("answers")` cuts one direction only: what the
 * worker sends still reaches the server, what the server sends back (its answers, and its closing
 * of a connection) is held, so a statement runs and its client waits on it in silence.
 * `reset()` closes every connection instead.
 */
import * as net from "node:net"

interface Pipe {
  readonly client: net.Socket
  upstream: net.Socket | undefined
  readonly toUpstream: Array<Buffer>
  readonly toClient: Array<Buffer>
  clientEnded: boolean
  upstreamEnded: boolean
}

/** What a partition cuts: both directions, or only what the server sends (`answers`). */
export type Cut = "both" | "answers"

export interface TcpProxy {
  readonly port: number
  readonly partition: (cut?: Cut) => void
  readonly heal: () => void
  readonly reset: () => void
  /** Points new connections at another server (a promoted standby), closing every open one. */
  readonly retarget: (target: { host: string; port: number }) => void
  readonly isPartitioned: () => boolean
  readonly close: () => Promise<void>
}

export const start = (initial: { host: string; port: number }): Promise<TcpProxy> =>
  new Promise((resolve, reject) => {
    let target = initial
    const pipes = new Set<Pipe>()
    let cut: Cut | undefined
    const partitioned = () => cut !== undefined

    const flush = (pipe: Pipe) => {
      if (cut === "both") return
      if (pipe.upstream === undefined) connectUpstream(pipe)
      const upstream = pipe.upstream
      if (upstream === undefined || upstream.connecting) return
      // Bytes for a server that has closed its end go nowhere, as they would on the wire.
      const sent = pipe.toUpstream.splice(0)
      if (!pipe.upstreamEnded) { for (const chunk of sent) upstream.write(chunk) }
      if (pipe.clientEnded) upstream.end()
      if (cut === "answers") return
      for (const chunk of pipe.toClient.splice(0)) pipe.client.write(chunk)
      if (pipe.upstreamEnded) pipe.client.end()
    }

    const destroy = (pipe: Pipe) => {
      pipes.delete(pipe)
      pipe.client.destroy()
      pipe.upstream?.destroy()
    }

    const connectUpstream = (pipe: Pipe) => {
      const upstream = net.connect(target.port, target.host)
      pipe.upstream = upstream
      upstream.setNoDelay(true)
      upstream.on("connect", () => flush(pipe))
      upstream.on("data", (chunk) => {
        pipe.toClient.push(chunk)
        flush(pipe)
      })
      upstream.on("end", () => {
        pipe.upstreamEnded = true
        flush(pipe)
      })
      // During a partition the client learns nothing of the server's side: not even an error.
      upstream.on("error", () => {
        if (partitioned()) pipe.upstreamEnded = true
        else destroy(pipe)
      })
      upstream.on("close", () => {
        if (partitioned()) pipe.upstreamEnded = true
        else destroy(pipe)
      })
    }

    const server = net.createServer((client) => {
      client.setNoDelay(true)
      const pipe: Pipe = {
        client,
        upstream: undefined,
        toUpstream: [],
        toClient: [],
        clientEnded: false,
        upstreamEnded: false
      }
      pipes.add(pipe)
      client.on("data", (chunk) => {
        pipe.toUpstream.push(chunk)
        flush(pipe)
      })
      client.on("end", () => {
        pipe.clientEnded = true
        flush(pipe)
      })
      client.on("error", () => destroy(pipe))
      client.on("close", () => {
        if (!partitioned()) destroy(pipe)
      })
      // A connection opened during a partition is held (its SYN "dropped") until heal.
      flush(pipe)
    })
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      resolve({
        port,
        partition: (what = "both") => {
          cut = what
        },
        heal: () => {
          cut = undefined
          for (const pipe of [...pipes]) flush(pipe)
        },
        reset: () => {
          for (const pipe of [...pipes]) destroy(pipe)
        },
        retarget: (next) => {
          target = next
          for (const pipe of [...pipes]) destroy(pipe)
        },
        isPartitioned: partitioned,
        close: () =>
          new Promise<void>((done) => {
            for (const pipe of [...pipes]) destroy(pipe)
            server.close(() => done())
          })
      })
    })
  })
