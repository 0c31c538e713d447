/**
 * A TCP proxy the test (or the demo) owns, between one worker process and PostgreSQL. `partition()` stops
 * forwarding in both directions while keeping every socket open, as a firewall DROP would: the
 * worker sees silence, not a reset. Bytes sent meanwhile are held, like unacknowledged TCP
 * segments, and delivered on `heal()`. `reset()` closes every connection instead.
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

export interface TcpProxy {
  readonly port: number
  readonly partition: () => void
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
    let partitioned = false

    const flush = (pipe: Pipe) => {
      if (partitioned) return
      if (pipe.upstream === undefined) connectUpstream(pipe)
      const upstream = pipe.upstream
      if (upstream === undefined || upstream.connecting) return
      for (const chunk of pipe.toUpstream.splice(0)) upstream.write(chunk)
      for (const chunk of pipe.toClient.splice(0)) pipe.client.write(chunk)
      if (pipe.clientEnded) upstream.end()
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
      upstream.on("error", () => destroy(pipe))
      upstream.on("close", () => {
        if (!partitioned) destroy(pipe)
      })
    }

    const server = net.createServer((client) => {
      client.setNoDelay(true)
      const pipe: Pipe = { client, upstream: undefined, toUpstream: [], toClient: [], clientEnded: false, upstreamEnded: false }
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
        if (!partitioned) destroy(pipe)
      })
      // A connection opened during a partition is held (its SYN "dropped") until heal.
      flush(pipe)
    })
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      resolve({
        port,
        partition: () => {
          partitioned = true
        },
        heal: () => {
          partitioned = false
          for (const pipe of [...pipes]) flush(pipe)
        },
        reset: () => {
          for (const pipe of [...pipes]) destroy(pipe)
        },
        retarget: (next) => {
          target = next
          for (const pipe of [...pipes]) destroy(pipe)
        },
        isPartitioned: () => partitioned,
        close: () =>
          new Promise<void>((done) => {
            for (const pipe of [...pipes]) destroy(pipe)
            server.close(() => done())
          })
      })
    })
  })
