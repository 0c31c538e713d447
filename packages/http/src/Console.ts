/**
 * The web console: static files (HTML, ES modules compiled from `src/console/`'s TypeScript, CSS,
 * and the preact package's modules under `vendor/`) served at `/` by the same server as the admin
 * API, behind the same authentication, with the same security headers. The build puts them in
 * this package's `dist/console/` (tsc, then `scripts/console-assets.mjs`); `root` serves another folder.
 *
 * @since 0.1.0
 */
import { Effect, type Redacted } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerRespondable, HttpStaticServer } from "effect/http"
import { fileURLToPath } from "node:url"
import { type Credential, singleTokenName } from "./Credentials.js"
import { admit, unauthorized, wrongHost } from "./internal/Auth.js"
import { secure } from "./internal/Http.js"

/** Where the console's files are: `dist/console/` of this package. @category constants */
export const defaultRoot: string = fileURLToPath(new URL("./console/", import.meta.url))

/** @category models */
export interface ConsoleOptions {
  /** The folder to serve. Default `defaultRoot`. */
  readonly root?: string | undefined
  /** The admin token; the files are served only to requests that carry it (as the API is). */
  readonly token?: Redacted.Redacted<string> | undefined
  /** Named admin credentials (`Credentials`): any of them opens the console, as the API. */
  readonly credentials?: ReadonlyArray<Credential> | undefined
}

/**
 * `GET /*`: files under `root` (`index.html` for `/`), with content types by extension. Routes
 * added with more specific paths (`/api/...`) take precedence.
 *
 * @category layers
 */
export const layer = (options: ConsoleOptions = {}) =>
  HttpRouter.use(Effect.fnUntraced(function*(router) {
    const files = yield* HttpStaticServer.make({
      root: options.root ?? defaultRoot,
      index: "index.html",
      cacheControl: "no-cache"
    })
    const credentials: ReadonlyArray<Credential> = [
      ...(options.token === undefined ? [] : [{ name: singleTokenName, scope: "rw" as const, secret: options.token }]),
      ...(options.credentials ?? [])
    ]
    yield* router.add(
      "GET",
      "/*",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const access = admit(request.headers, credentials)
        if (access === undefined) return unauthorized()
        if (access === "wrong-host") return wrongHost()
        return yield* Effect.catch(files, HttpServerRespondable.toResponse)
      }).pipe(Effect.map(secure))
    )
  }))
