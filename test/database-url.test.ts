/**
 * `Database.resolveUrl` without the embedded server in `@leasehold/sql`: an explicit URL, else
 * `DATABASE_URL`, else the fallback given (the CLI gives `EmbeddedPostgres.url`), else `MissingUrl`.
 * No database is reached: the fallbacks here only answer a URL.
 */
import { assert, describe, it } from "@effect/vitest"
import { Database } from "@leasehold/sql"
import { ConfigProvider, Effect, Exit, type Scope } from "effect"

/** Runs `effect` in a scope with an environment holding `DATABASE_URL` = `value` (or none). */
const withDatabaseUrl = <A, E>(value: string | undefined, effect: Effect.Effect<A, E, Scope.Scope>) =>
  Effect.scoped(effect).pipe(
    Effect.provide(
      ConfigProvider.layer(ConfigProvider.fromEnv({ env: value === undefined ? {} : { DATABASE_URL: value } }))
    )
  )

describe("Database.resolveUrl", () => {
  it.effect("with no URL, no DATABASE_URL and no fallback, fails with MissingUrl naming the ways out", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(withDatabaseUrl(undefined, Database.resolveUrl()))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(withDatabaseUrl(undefined, Database.resolveUrl()))
      assert.strictEqual(error._tag, "MissingUrl")
      assert.include(error.message, "DATABASE_URL")
      assert.include(error.message, "@leasehold/embedded")
    }))

  it.effect("the fallback runs only when neither the URL nor DATABASE_URL is set", () =>
    Effect.gen(function*() {
      let started = 0
      const fallback = Effect.sync(() => {
        started++
        return "postgres://fallback/db"
      })
      assert.strictEqual(
        yield* (withDatabaseUrl(undefined, Database.resolveUrl({ fallback }))),
        "postgres://fallback/db"
      )
      assert.strictEqual(
        yield* (withDatabaseUrl("postgres://env/db", Database.resolveUrl({ fallback }))),
        "postgres://env/db"
      )
      assert.strictEqual(
        yield* (withDatabaseUrl("postgres://env/db", Database.resolveUrl({ url: "postgres://given/db", fallback }))),
        "postgres://given/db"
      )
      assert.strictEqual(started, 1)
    }))
})
