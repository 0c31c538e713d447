/**
 * The web console in a real browser: Debian's `chromium`, driven by `playwright-core` (no browser
 * download), against a real server on an ephemeral port, a real worker running the sample tasks and
 * a real PostgreSQL. Chromium missing is a failure that says how to install it, never a skip.
 */
import { assert, describe, it } from "@effect/vitest"
import { SampleTasks } from "@leasehold/cli"
import { Handler, KeyLimits, Run } from "@leasehold/core"
import { Callback, Callbacks } from "@leasehold/http"
import { Duration, Effect, Schema } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { afterAll } from "vitest"
import { background, connection } from "./support/cli.js"
import { at, callbacksOptions, startServer } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"
import { type Event, eventually, startWorker } from "./support/workers.js"

/** `CHROMIUM_PATH`, else what `command -v chromium` prints; absent is an error that says what to do. */
const chromiumPath = (): string => {
  const configured = process.env.CHROMIUM_PATH
  if (configured !== undefined && configured !== "") return configured
  try {
    const found = execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim()
    if (found !== "") return found
  } catch {
    // Not on PATH: the error below says what to do.
  }
  throw new Error(
    "the console's browser test needs Debian's chromium: `apt-get install -y chromium` (npm test installs it), " +
      "or set CHROMIUM_PATH to a Chromium binary"
  )
}

/**
 * As root (no sandbox), headless, and quiet on the network: this machine's closed network refuses
 * Chromium's background connections (updates, sync, QUIC), many at a time. playwright's `launch`
 * gives every browser a new empty profile of its own (`--user-data-dir` in a fresh temporary folder).
 */
const chromiumFlags = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

const launch = Effect.acquireRelease(
  // A missing browser or a failed launch fails the test with its own message (a defect), never a skip.
  Effect.promise(() => chromium.launch({ executablePath: chromiumPath(), args: chromiumFlags })),
  (browser: Browser) => Effect.promise(() => browser.close())
)

// The README's screenshot is refreshed on request (UPDATE_SCREENSHOTS=1); otherwise the test still
// takes it, into a folder of this run's own (a fixed name in the shared temporary folder may
// already be another user's file), so a plain run leaves the tree as it was.
const shots = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-console-shots-"))
afterAll(() => fs.rmSync(shots, { recursive: true, force: true }))
const screenshotPath = process.env.UPDATE_SCREENSHOTS === "1"
  ? path.resolve(import.meta.dirname, "..", "docs", "console.png")
  : path.join(shots, "console.png")

/** A run's row, read straight from the database. */
const readRun = (stores: Stores, runId: string) =>
  Effect.map(
    stores.sql.unsafe<{ state: string; fence: string; result: unknown }>(
      `SELECT state, fence::text AS fence, result FROM "${stores.schema}".runs_now WHERE id = ${Number(runId)}`
    ),
    (rows) => ({ state: rows[0]!.state, fence: Number(rows[0]!.fence), result: rows[0]!.result })
  )

/**
 * The whole setup, scoped: a fresh schema, a worker running the sample tasks, the HTTP server on
 * an ephemeral port, and a browser page that records what a hostile payload would make it do.
 */
const consoleSetupWith = (options: {
  /** `LEASEHOLD_ADMIN_TOKEN`; the browser then answers the basic-auth challenge with it. */
  readonly token?: string | undefined
  readonly traceUrl?: string | undefined
  /** The worker's and the server's handlers besides the sample tasks. */
  readonly handlers?: ReadonlyArray<Handler.Handler> | undefined
  /** Named credentials (`LEASEHOLD_ADMIN_TOKENS`) and the one the browser answers the challenge with. */
  readonly credentials?: { readonly spec: string; readonly secret: string } | undefined
}) =>
  Effect.gen(function*() {
    const stores = yield* twoStores
    const handlers = [...SampleTasks.handlers, ...(options.handlers ?? [])]
    const events = yield* startWorker(stores.a, stores.sql, {
      handlers,
      concurrency: 4,
      ttl: "10 seconds",
      pollInterval: "100 millis"
    })
    // `leasehold serve`'s server (admin API, callbacks, console) on a free loopback port.
    const { origin: baseUrl } = yield* startServer(stores, {
      handlers,
      token: options.token,
      credentials: options.credentials?.spec,
      traceUrl: options.traceUrl
    })
    const browser = yield* launch
    const page = yield* Effect.promise(() =>
      browser.newPage({
        viewport: { width: 1280, height: 900 },
        ...(options.token === undefined ? {} : { httpCredentials: { username: "admin", password: options.token } }),
        ...(options.credentials === undefined
          ? {}
          : { httpCredentials: { username: "ops", password: options.credentials.secret } })
      })
    )
    const problems: Array<string> = []
    page.on("dialog", (dialog) => {
      problems.push(`dialog: ${dialog.message()}`)
      void dialog.dismiss()
    })
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`))
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`console: ${message.text()}`)
    })
    page.on("response", (response) => {
      if (response.status() >= 400) problems.push(`${response.status()} for ${response.url()}`)
    })
    page.on("requestfailed", (request) => {
      // Requests still in flight when the test navigates away are aborted: not a failure.
      const error = request.failure()?.errorText ?? ""
      if (!request.url().endsWith("/api/events") && error !== "net::ERR_ABORTED") {
        problems.push(`request failed: ${request.url()} (${error})`)
      }
    })
    return { stores, baseUrl, page, problems, events }
  })

const consoleSetup = consoleSetupWith({})

/** Where a run stands, for a timeout's message: its row, its history and the worker's last events. */
const whereItStands = (stores: Stores, runId: string, events: ReadonlyArray<Event>) =>
  Effect.map(
    Effect.all([readRun(stores, runId), stores.b.history(runId)]),
    ([run, history]) =>
      [
        `run ${runId}: ${run.state} under fence ${run.fence}`,
        `history: ${history.map((h) => `${h.at.toISOString().slice(11, 23)} ${h.kind}@${h.fence}`).join(", ")}`,
        // Empty claims are the loop polling: the ones that did something say more.
        `worker's last events (of ${events.length}, empty claims left out): ${
          events.filter((e) => !(e._tag === "ClaimBatch" && e.count === 0)).slice(-12).map((e) =>
            JSON.stringify(e, (_, v) => typeof v === "bigint" ? String(v) : v)
          ).join("\n  ")
        }`
      ].join("\n")
  )

const enqueueRefund = (stores: Stores, order: string, amount: number) =>
  Effect.gen(function*() {
    const [enqueued] = yield* stores.b.enqueue([{ kind: "approve-refund", payload: { order, amount } }])
    const id = enqueued!.id
    yield* eventually(
      `run ${id} suspends for approval`,
      Effect.map(readRun(stores, id), (run) => run.state === "suspended"),
      // The worker's first claim can wait long for a core while the browser starts.
      "30 seconds"
    )
    return id
  })

const promise = <A>(f: () => Promise<A>) => Effect.promise(f)

/** The approvals card of one run. */
const card = (page: Page, runId: string) => page.locator(`article.approval[data-run-id="${runId}"]`)

describe("web console (chromium)", () => {
  it.live(
    "a person approves a suspended refund from the approvals inbox with the keyboard and sees it complete under fence 2 with its history",
    () =>
      Effect.gen(function*() {
        const { baseUrl, events, page, problems, stores } = yield* consoleSetup
        const runId = yield* enqueueRefund(stores, "A-1", 42)

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/approvals`)
          const refund = card(page, runId)
          await refund.waitFor({ timeout: 10_000 })
          assert.include(await refund.locator("pre").first().textContent(), `"order": "A-1"`)

          // Keyboard only: focus the note, type it, Tab to "Approve", press Enter.
          const note = refund.getByLabel("Note (optional)")
          await note.focus()
          await page.keyboard.type("ok by <b>ops</b>")
          await page.keyboard.press("Tab")
          assert.strictEqual(
            await page.evaluate(() => (globalThis as any).document.activeElement?.textContent),
            "Approve"
          )
          await page.keyboard.press("Enter")
          await refund.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
          await page.locator("#announcer", { hasText: "Approved run" }).waitFor({ state: "attached", timeout: 5_000 })
        })

        yield* eventually(
          "the approved refund completes",
          Effect.map(readRun(stores, runId), (run) => run.state === "completed" && run.fence === 2),
          "30 seconds",
          whereItStands(stores, runId, events)
        )

        // The holder of fence 1 comes back and writes: refused, with both fences, and recorded.
        const stale = yield* Effect.flip(stores.a.checkpoint({ runId, fence: 1 }, { step: "late write" }))
        assert.deepInclude(stale, { _tag: "FenceRejected", presentedFence: 1, storedFence: 2 })

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/runs/${runId}`)
          const state = page.locator(".summary .badge")
          await page.waitForFunction(
            () => (globalThis as any).document.querySelector(".summary .badge")?.textContent === "completed",
            undefined,
            { timeout: 15_000 }
          )
          assert.strictEqual(await state.textContent(), "completed")
          assert.strictEqual(await page.locator(".summary .fence").textContent(), "2")

          // Attempts: fence 1 suspended for approval, fence 2 completed.
          const attempts = page.locator("section[aria-labelledby=attempts] tbody tr")
          assert.strictEqual(await attempts.count(), 2)
          const cells = async (row: number) =>
            (await attempts.nth(row).locator("td").allTextContents()).map((t) => t.trim())
          const [first, second] = [await cells(0), await cells(1)]
          assert.strictEqual(first[0], "1")
          assert.strictEqual(first[6], "suspended")
          assert.strictEqual(second[0], "2")
          assert.strictEqual(second[6], "completed")
          assert.notStrictEqual(second[1], "—", "the fence 2 attempt names its owner")

          // The suspension, resumed with the decision; the note shows as the characters typed.
          const suspension = (
            await page.locator("section[aria-labelledby=suspensions] tbody tr td").allTextContents()
          ).map((t) => t.trim())
          assert.strictEqual(suspension[0], "1")
          assert.strictEqual(suspension[1], "approval")
          assert.strictEqual(suspension[5], "resumed")
          assert.include(suspension[6], `"approved":true`)
          assert.include(suspension[6], `"note":"ok by <b>ops</b>"`)
          assert.strictEqual(await page.locator("main b").count(), 0)

          // The stale write, with the fence it presented and the one stored.
          const refused = (await page.locator("section[aria-labelledby=stale] tbody tr td").allTextContents()).map(
            (t) => t.trim()
          )
          assert.deepStrictEqual(refused.slice(1), ["checkpoint", "1", "2"])

          // The result says it was decided under fence 2.
          assert.include(
            await page.locator("section[aria-labelledby=result] pre").textContent(),
            `"decidedUnderFence": 2`
          )

          await page.evaluate(() => (globalThis as any).document.activeElement?.blur())
          await page.screenshot({ path: screenshotPath, fullPage: true })
        })
        assert.deepStrictEqual(problems, [], problems.join("\n"))
      })
  )

  it.live("a hash with broken percent-encoding shows a page instead of throwing URI malformed", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems } = yield* consoleSetup
      for (const hash of ["#%E0%A4%A", "#/runs/%E0%A4%A", "#/runs/%", "#/runs?kind=%E0%A4%A"]) {
        yield* promise(async () => {
          await page.goto(`${baseUrl}/${hash}`)
          await page.locator("#page-title").waitFor({ timeout: 10_000 })
          assert.notStrictEqual(((await page.locator("#page-title").textContent()) ?? "").trim(), "", hash)
        })
      }
      // The broken run id is shown as typed, as text.
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs/%E0%A4%A`)
        await page.waitForFunction(() => (globalThis as any).document.title.startsWith("Run %E0%A4%A"), undefined, {
          timeout: 10_000
        })
      })
      assert.deepStrictEqual(problems.filter((p) => /URI malformed/.test(p)), [], problems.join("\n"))
    }))

  it.live("a hostile payload shows as text and executes nothing", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      const hostile = `<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = 'img'; alert(1)">`
      const runId = yield* enqueueRefund(stores, hostile, 1)

      // The page is served under a CSP that allows no inline script.
      yield* promise(async () => {
        const response = await page.goto(`${baseUrl}/`)
        const csp = response?.headers()["content-security-policy"] ?? ""
        assert.match(csp, /script-src 'self'/)
        assert.notMatch(csp, /unsafe-inline|unsafe-eval/)
        assert.strictEqual(response?.headers()["x-content-type-options"], "nosniff")
      })

      for (const route of [`#/approvals`, `#/runs/${runId}`, `#/runs?kind=approve-refund`]) {
        yield* promise(async () => {
          await page.goto(`${baseUrl}/${route}`)
          await page.locator(`main pre, main table`).first().waitFor({ timeout: 10_000 })
          await page.waitForTimeout(300)
          const text = (await page.locator("main").textContent()) ?? ""
          if (route !== `#/runs?kind=approve-refund`) {
            assert.include(
              text,
              `<script>window.__pwned = \\"script\\"</script>`,
              `${route} shows the payload's characters`
            )
            assert.include(text, `<img src=x onerror=\\"window.__pwned = 'img'; alert(1)\\">`)
          }
          assert.strictEqual(
            await page.locator("main script, main img, main [onerror]").count(),
            0,
            `${route} made no element of it`
          )
          assert.strictEqual(await page.locator("script").count(), 1, "only the console's own module")
          assert.strictEqual(await page.evaluate(() => (globalThis as any).__pwned), undefined)
        })
      }
      // The signal token (refund-<order>) is shown as text in the inbox too.
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/approvals`)
        await card(page, runId).waitFor({ timeout: 10_000 })
        assert.include(await card(page, runId).locator("code").first().textContent(), `refund-<script>`)
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live(
    "overview, runs filtered by a payload field and workers show the store's state; navigation works from the keyboard",
    () =>
      Effect.gen(function*() {
        const { baseUrl, page, problems, stores } = yield* consoleSetup
        const a7 = yield* enqueueRefund(stores, "A-7", 7)
        yield* enqueueRefund(stores, "B-8", 8)
        // A lease held by someone other than the worker (its queue is not the worker's), for a minute.
        yield* stores.b.enqueue([{ kind: "resize-image", queue: "manual", payload: { image: "held.png", width: 1 } }])
        const [held] = yield* stores.b.claim({
          owner: "operator-laptop",
          queues: ["manual"],
          kinds: ["resize-image"],
          limit: 1,
          ttl: Duration.seconds(60)
        })
        assert.isDefined(held)
        // Three short jobs finish: the throughput chart counts them.
        const jobs = yield* stores.b.enqueue(
          [1, 2, 3].map((width) => ({ kind: "resize-image", payload: { image: "a.png", width } }))
        )
        yield* eventually(
          "the three jobs complete",
          Effect.map(
            Effect.forEach(jobs, (job) => readRun(stores, job.id)),
            (runs) => runs.every((run) => run.state === "completed")
          )
        )

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/`)
          const card = (label: string) => page.locator(".card", { hasText: label }).locator(".card-value")
          await page.waitForFunction(
            () => (globalThis as any).document.querySelectorAll(".card").length > 0,
            undefined,
            { timeout: 10_000 }
          )
          assert.strictEqual(await card("suspended").textContent(), "2")
          assert.strictEqual(await card("running").textContent(), "1")
          assert.strictEqual(await card("live leases").textContent(), "1")
          assert.strictEqual(await page.locator("#approvals-count").textContent(), "2")
          assert.strictEqual(await card("completed").textContent(), "3")
          // The history kept (ADR 0028), by the catalog's estimate: a line, not a count.
          assert.match(
            (await page.locator("dd[data-fact=history]").textContent()) ?? "",
            /^about [\d,]+ runs, \d+\.\d MB, since \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/
          )
          assert.include(await page.locator("section[aria-labelledby=by-queue] tbody").textContent(), "manual")
          const live = await page.locator("section[aria-labelledby=live-leases] tbody tr td").allTextContents()
          assert.deepStrictEqual(live.slice(0, 5).map((t) => t.trim()), [
            `#${held!.id}`,
            "operator-laptop",
            "resize-image",
            "manual",
            "1"
          ])
          assert.strictEqual(
            await page.locator("svg[data-chart=finished]").getAttribute("aria-label"),
            "3 runs finished in the last 60 minutes"
          )

          // From the keyboard: the Workers link, then Enter; focus lands on the new page's heading.
          await page.getByRole("link", { name: "Workers", exact: true }).focus()
          await page.keyboard.press("Enter")
          await page.locator("section.worker", { hasText: "operator-laptop" }).waitFor({ timeout: 10_000 })
          assert.strictEqual(
            await page.evaluate(() => (globalThis as any).document.activeElement?.textContent),
            "Workers"
          )
          const lease = (
            await page.locator("section.worker", { hasText: "operator-laptop" }).locator("tbody td").allTextContents()
          ).map((t) => t.trim())
          assert.strictEqual(lease[0], `#${held!.id}`)
          assert.strictEqual(lease[3], "1")
          const left = Number(/^(\d+) s$/.exec(lease[5] ?? "")?.[1])
          assert.isTrue(left > 40 && left <= 60, `time left ${lease[5]}`)

          // Runs filtered by a payload field: only the A-7 refund.
          await page.goto(`${baseUrl}/#/runs`)
          await page.getByLabel("Payload field", { exact: true }).fill("order")
          await page.getByLabel("Payload value", { exact: true }).fill("A-7")
          await page.getByLabel("Payload value", { exact: true }).press("Enter")
          await page.waitForFunction(() => (globalThis as any).location.hash.includes("value=A-7"), undefined, {
            timeout: 5_000
          })
          await page.locator(`tr[data-run-id="${a7}"]`).waitFor({ timeout: 10_000 })
          // The filtered page replaces the unfiltered one when its answer arrives: wait for it.
          await page.waitForFunction(
            () => (globalThis as any).document.querySelectorAll("main tbody tr").length === 1,
            undefined,
            {
              timeout: 10_000
            }
          ).catch(() => undefined)
          assert.strictEqual(await page.locator("main tbody tr").count(), 1)

          // Two payload fields, both required: A-7 with amount 7 matches, with amount 8 nothing does.
          await page.getByLabel("Second payload field").fill("amount")
          await page.getByLabel("Second payload value").fill("8")
          await page.getByLabel("Second payload value").press("Enter")
          await page.getByText("No runs match.").waitFor({ timeout: 10_000 })
          await page.getByLabel("Second payload value").fill("7")
          await page.getByLabel("Second payload value").press("Enter")
          await page.locator(`tr[data-run-id="${a7}"]`).waitFor({ timeout: 10_000 })
          assert.strictEqual(await page.locator("main tbody tr").count(), 1)
        })
        assert.deepStrictEqual(problems, [], problems.join("\n"))
      })
  )

  it.live(
    "a refund rejected with a note, and a run cancelled from its page after an in-page confirmation; tab order starts at the skip link",
    () =>
      Effect.gen(function*() {
        const { baseUrl, events, page, problems, stores } = yield* consoleSetup
        const rejected = yield* enqueueRefund(stores, "R-1", 10)
        const cancelled = yield* enqueueRefund(stores, "R-2", 20)

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/approvals`)
          const refund = card(page, rejected)
          await refund.waitFor({ timeout: 10_000 })
          await refund.getByLabel("Note (optional)").fill("not eligible")
          await refund.getByRole("button", { name: "Reject" }).click()
          await refund.getByText("Rejected: the run is resuming with the rejection.").waitFor({ timeout: 10_000 })
        })
        const done = yield* eventually(
          "the rejected refund completes with the rejection",
          Effect.map(readRun(stores, rejected), (run) => run.state === "completed" && run),
          "30 seconds",
          whereItStands(stores, rejected, events)
        )
        assert.deepInclude(done.result as object, {
          decision: { _tag: "Signalled", payload: { approved: false, note: "not eligible" } },
          decidedUnderFence: 2
        })

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/runs/${cancelled}`)
          const cancel = page.getByRole("button", { name: "Cancel run" })
          await cancel.waitFor({ timeout: 10_000 })
          // Keyboard: Enter asks; Escape keeps the run and gives focus back; Enter, Enter cancels.
          await cancel.focus()
          await page.keyboard.press("Enter")
          const activeText = () => page.evaluate(() => (globalThis as any).document.activeElement?.textContent)
          // Each key's render (and the focus it moves) follows the key's event: wait for it.
          const focusOn = (text: string) =>
            page.waitForFunction((t) => (globalThis as any).document.activeElement?.textContent === t, text, {
              timeout: 10_000
            })
              .catch(() => undefined)
          await focusOn("Yes, cancel run")
          assert.strictEqual(await activeText(), "Yes, cancel run")
          await page.keyboard.press("Escape")
          await focusOn("Cancel run")
          assert.strictEqual(await activeText(), "Cancel run")
          await page.keyboard.press("Enter")
          await focusOn("Yes, cancel run")
          await page.keyboard.press("Enter")
          await page.getByRole("button", { name: "Retry run" }).waitFor({ timeout: 10_000 })
          assert.strictEqual(await page.locator(".summary .badge").textContent(), "cancelled")
          assert.include(await page.locator("section[aria-labelledby=admin] tbody").textContent(), "cancelled")
        })
        assert.strictEqual((yield* readRun(stores, cancelled)).state, "cancelled")

        yield* promise(async () => {
          await page.goto(`${baseUrl}/?fresh#/`)
          await page.locator(".card").first().waitFor({ timeout: 10_000 })
          const order: Array<string> = []
          for (let i = 0; i < 5; i++) {
            await page.keyboard.press("Tab")
            order.push(await page.evaluate(() => (globalThis as any).document.activeElement?.textContent?.trim()))
          }
          assert.deepStrictEqual(order, ["Skip to content", "Overview", "Queues", "Runs", "Schedules"])
          // The skip link moves focus to the content.
          await page.keyboard.press("Shift+Tab")
          await page.keyboard.press("Shift+Tab")
          await page.keyboard.press("Shift+Tab")
          await page.keyboard.press("Shift+Tab")
          await page.keyboard.press("Enter")
          assert.strictEqual(await page.evaluate(() => (globalThis as any).document.activeElement?.id), "main")
        })
        assert.deepStrictEqual(problems, [], problems.join("\n"))
      })
  )

  it.live(
    "with an admin token, the console is served only to a browser that has it (basic auth), and works with it",
    () =>
      Effect.gen(function*() {
        const token = "console-admin-token-0123456789abcdef"
        const { baseUrl, events, page, problems, stores } = yield* consoleSetupWith({ token })
        const runId = yield* enqueueRefund(stores, "T-1", 5)

        // Without the token: 401 with a basic-auth challenge for the page, its module and the API.
        yield* promise(async () => {
          for (const path of ["/", "/console.js", "/api/runs"]) {
            const refused = await fetch(`${baseUrl}${path}`)
            assert.strictEqual(refused.status, 401, path)
            assert.match(refused.headers.get("www-authenticate") ?? "", /^Basic /)
          }
        })

        yield* promise(async () => {
          await page.goto(`${baseUrl}/#/approvals`)
          const refund = card(page, runId)
          await refund.waitFor({ timeout: 10_000 })
          await page.getByText("Live", { exact: true }).waitFor({ timeout: 10_000 })
          await refund.getByRole("button", { name: "Approve" }).click()
          await refund.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
        })
        yield* eventually(
          "the approved refund completes",
          Effect.map(readRun(stores, runId), (run) => run.state === "completed" && run.fence === 2),
          "30 seconds",
          whereItStands(stores, runId, events)
        )
        assert.deepStrictEqual(problems, [], problems.join("\n"))
      })
  )

  it.live("the runs page lists newest first by number and pages by cursor: Next shows the older runs, Previous the newer ones", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // A kind no worker takes, so the runs stay where they are: 60 of them, past a page of 50.
      const enqueued = yield* stores.b.enqueue(
        Array.from({ length: 60 }, (_, i) => ({ kind: "paged-kind", payload: { i } }))
      )
      const newestFirst = enqueued.map((e) => e.id).sort((a, b) => Number(b) - Number(a))
      const shownIds = () =>
        page.locator("tr[data-run-id]").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-run-id")!))
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs?kind=paged-kind`)
        await page.locator(`tr[data-run-id="${newestFirst[0]}"]`).waitFor({ timeout: 10_000 })
        assert.deepStrictEqual(await shownIds(), newestFirst.slice(0, 50))
        assert.strictEqual(await page.getByRole("link", { name: "Previous" }).count(), 0)
        await page.getByRole("link", { name: "Next" }).click()
        await page.locator(`tr[data-run-id="${newestFirst[59]}"]`).waitFor({ timeout: 10_000 })
        assert.deepStrictEqual(await shownIds(), newestFirst.slice(50))
        assert.strictEqual(await page.getByRole("link", { name: "Next" }).count(), 0)
        await page.getByRole("link", { name: "Previous" }).click()
        await page.locator(`tr[data-run-id="${newestFirst[0]}"]`).waitFor({ timeout: 10_000 })
        assert.deepStrictEqual(await shownIds(), newestFirst.slice(0, 50))
        assert.strictEqual(await page.getByRole("link", { name: "Previous" }).count(), 0)
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("a run enqueued after the page loaded appears without a reload", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs?kind=resize-image`)
        await page.getByText("No runs match.").waitFor({ timeout: 10_000 })
        await page.getByText("Live", { exact: true }).waitFor({ timeout: 10_000 })
        // Marks this document: a reload would lose it.
        await page.evaluate(() => ((globalThis as any).__sameDocument = true))
      })
      const eventsBefore = yield* promise(async () =>
        Number((await page.locator("#live").getAttribute("data-events")) ?? 0)
      )
      const [enqueued] = yield* stores.b.enqueue([{ kind: "resize-image", payload: { image: "late.png", width: 64 } }])
      const runId = enqueued!.id
      yield* promise(async () => {
        await page.locator(`tr[data-run-id="${runId}"]`).waitFor({ timeout: 10_000 })
        assert.strictEqual(await page.evaluate(() => (globalThis as any).__sameDocument), true)
        // The change came over the event stream (GET /api/events), not only the 5-second poll.
        assert.isAbove(Number(await page.locator("#live").getAttribute("data-events")), eventsBefore)
        // It goes on to complete, and the page follows it there too.
        await page.locator(`tr[data-run-id="${runId}"] .badge`, { hasText: "completed" }).waitFor({ timeout: 15_000 })
        assert.strictEqual(await page.evaluate(() => (globalThis as any).__sameDocument), true)
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))
})

/** A page's screenshot for the README (docs/console-<name>.png) on UPDATE_SCREENSHOTS=1, else into this run's folder. */
const shot = (page: Page, name: string) =>
  page.screenshot({
    path: process.env.UPDATE_SCREENSHOTS === "1"
      ? path.resolve(import.meta.dirname, "..", "docs", `console-${name}.png`)
      : path.join(shots, `console-${name}.png`),
    fullPage: true
  })

const rowCells = async (page: Page, selector: string) =>
  (await page.locator(selector).locator("td, th").allTextContents()).map((t) => t.trim())

/** A refund whose approval signal declares its schema: an amount (a number) and an optional reason. */
const payout = Handler.make({
  kind: "approve-payout",
  payload: Schema.Struct({ order: Schema.String }),
  signals: {
    approval: Schema.Struct({ approved: Schema.Boolean, amount: Schema.Number, reason: Schema.optional(Schema.String) })
  },
  handle: ({ order }) =>
    Effect.map(Run.awaitSignal("approval", { token: `payout-${order}` }), (decision) => ({ order, decision }))
})

/**
 * What of the open page does not fit: the page scrolling sideways, a table's box wider than the
 * page, and each word of a table cell or badge that the browser split across two lines (a word's
 * text range drawn as more than one line box), JSON shown in a cell aside.
 */
const layoutIssues = (page: Page) =>
  page.evaluate(() => {
    const doc = (globalThis as any).document
    const issues: Array<string> = []
    const root = doc.documentElement
    if (root.scrollWidth > root.clientWidth) {
      issues.push(`the page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth}`)
    }
    for (const wrap of doc.querySelectorAll(".table-wrap")) {
      if (wrap.getBoundingClientRect().right > root.clientWidth) issues.push("a table's box is wider than the page")
    }
    if (root.clientWidth >= 1280) {
      // At 1,280 px every table fits its box: none scrolls, so no column ("Updated", "Missed ticks", "Detail") is cut off.
      for (const wrap of doc.querySelectorAll(".table-wrap")) {
        if (wrap.scrollWidth > wrap.clientWidth + 1) {
          const columns = [...wrap.querySelectorAll("thead th")].map((th: any) =>
            `${th.textContent} ${Math.round(th.getBoundingClientRect().width)}`
          )
          issues.push(
            `table "${
              wrap.querySelector("caption")?.textContent
            }" is ${wrap.scrollWidth} px wide in a ${wrap.clientWidth} px box: ${columns.join(", ")}`
          )
        }
      }
      // Charts: tall enough to read, their labels inside the drawing and of a readable size, a y scale of several values.
      for (const svg of doc.querySelectorAll("svg.chart")) {
        const box = svg.getBoundingClientRect()
        const name = svg.getAttribute("data-chart")
        if (box.height < 150) issues.push(`chart ${name} is ${Math.round(box.height)} px tall`)
        for (const text of svg.querySelectorAll("text")) {
          const r = text.getBoundingClientRect()
          if (
            r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5
          ) {
            issues.push(`chart ${name}'s label "${text.textContent}" is clipped`)
          }
          if (r.height < 11) {
            issues.push(`chart ${name}'s label "${text.textContent}" is ${r.height.toFixed(1)} px tall`)
          }
        }
        if (svg.querySelectorAll("text.axis-y").length < 3) {
          issues.push(`chart ${name}'s y scale has ${svg.querySelectorAll("text.axis-y").length} labels`)
        }
      }
    }
    for (const cell of doc.querySelectorAll("td, th, .badge, .outcome")) {
      const walker = doc.createTreeWalker(cell, 4 /* NodeFilter.SHOW_TEXT */)
      for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {
        // JSON shown in a cell is data that wraps where it must (.inline-json), and free text (td.text:
        // an attempt's detail, a missed-tick policy) wraps as prose; the rest must not split.
        if (node.parentElement?.closest(".inline-json, pre, td.text") !== null) continue
        const text: string = node.textContent ?? ""
        for (const match of text.matchAll(/\S+/g)) {
          const range = doc.createRange()
          range.setStart(node, match.index)
          range.setEnd(node, match.index + match[0].length)
          const lines = new Set(
            [...range.getClientRects()].filter((r: any) => r.width > 0).map((r: any) => Math.round(r.top))
          )
          if (lines.size > 1) issues.push(`"${match[0]}" is split across ${lines.size} lines`)
        }
      }
    }
    return issues
  })

/** The queues table's box: whether its table is wider than it (then the box scrolls, not the page). */
const queuesTable = (page: Page) =>
  page.locator("main .table-wrap").first().evaluate((wrap: any) => ({
    fits: wrap.scrollWidth <= wrap.clientWidth,
    widths: `table ${wrap.scrollWidth} px in a ${wrap.clientWidth} px box; columns ` +
      [...wrap.querySelectorAll("thead th")].map((th: any) =>
        `${th.textContent} ${Math.round(th.getBoundingClientRect().width)}`
      ).join(", ") +
      "; rows " + [...wrap.querySelectorAll("tbody tr")].map((tr: any) =>
        [...tr.querySelectorAll("td")].map((td: any) => td.textContent).join(" | ")
      ).join(" / ")
  }))

describe("web console pages (chromium)", () => {
  it.live("layout at 1280 px: every page's tables fit their boxes, the charts are readable, nothing scrolls sideways, and no id, badge or word in a table is split across lines", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // Long queue names and every state's count, a paused queue, a run that failed and is retried.
      yield* stores.b.enqueue([
        ...[1, 2, 3].map((width) => ({
          kind: "resize-image",
          queue: "notifications-high-priority",
          payload: { image: "q.png", width }
        })),
        { kind: "resize-image", queue: "reports-nightly-eu-west", payload: { image: "r.png", width: 1 } }
      ])
      yield* stores.b.pauseQueue("reports-nightly-eu-west")
      // A run of a kind no worker takes, failed by hand with a retry due later ("retry scheduled").
      const [failing] = yield* stores.b.enqueue([{
        kind: "doomed",
        payload: { image: "missing-file.png" },
        maxAttempts: 3
      }])
      const [held] = yield* stores.b.claim({
        owner: "hand-held-owner-7f3c9a2e-long-identifier",
        queues: ["default"],
        kinds: ["doomed"],
        limit: 1,
        ttl: Duration.seconds(60)
      })
      yield* stores.b.fail({
        runId: held!.id,
        fence: held!.fence,
        error: { message: "image not found: the bucket answered 404 for missing-file.png after 3 tries" },
        retryDelayMs: 3_600_000
      })
      // Finished runs for the charts, a schedule with a policy for missed ticks, a key limit with its
      // keys, an approval waiting, and a worker gone (its heartbeat stopped: killed).
      const done = yield* stores.b.enqueue(
        [1, 2, 3].map((width) => ({ kind: "resize-image", payload: { image: "c.png", width } }))
      )
      yield* eventually(
        "the chart's runs complete",
        Effect.map(
          Effect.forEach(done, (d) => readRun(stores, d.id)),
          (runs) => runs.every((r) => r.state === "completed")
        )
      )
      yield* stores.b.registerSchedules([{
        name: "nightly-thumbnails-eu-west",
        cron: "0 3 * * *",
        kind: "resize-image",
        payload: { image: "n.png", width: 9 },
        missed: "all",
        maxBackfill: 24
      }])
      yield* stores.b.setKeyLimits([KeyLimits.perKind("export", 1)])
      yield* stores.b.enqueue(
        [1, 2].map((i) => ({
          kind: "export",
          queue: "exports",
          payload: { i },
          concurrencyKey: "tenant-with-a-long-name-0042"
        }))
      )
      yield* stores.b.claim({
        owner: "hand",
        queues: ["exports"],
        kinds: ["export"],
        limit: 1,
        ttl: Duration.seconds(60)
      })
      yield* enqueueRefund(stores, "A-1280", 12)
      yield* stores.b.announceWorker({
        owner: "killed-worker-3b9d0c1e-long-identifier",
        host: "build-host-07.internal",
        pid: 4242,
        version: "0.1.0",
        queues: ["default", "notifications-high-priority"],
        kinds: [],
        concurrency: 16,
        runsHeld: 3,
        startedAt: new Date(),
        ttl: Duration.seconds(30)
      })
      yield* stores.sql.unsafe(
        `UPDATE "${stores.schema}".workers SET expires_at = now() - interval '1 minute', last_heartbeat_at = now() - interval '90 seconds' WHERE owner LIKE 'killed-%'`
      )
      yield* promise(async () => {
        // Every page's issues, then one assertion: a failure names them all.
        const found: Record<string, ReadonlyArray<string>> = {}
        for (
          const [route, ready] of [
            ["#/", "svg[data-chart=finished]"],
            ["#/queues", `tr[data-queue="reports-nightly-eu-west"] .badge.paused`],
            ["#/workers", "tr[data-owner].gone"],
            ["#/runs", `tr[data-run-id="${failing!.id}"]`],
            [`#/runs/${failing!.id}`, "section[aria-labelledby=attempts] tbody tr"],
            ["#/schedules", "tr[data-schedule]"],
            ["#/limits", "tr[data-key]"],
            ["#/approvals", "article.approval"]
          ] as const
        ) {
          await page.goto(`${baseUrl}/${route}`)
          await page.locator(ready).first().waitFor({ timeout: 10_000 })
          const issues = await layoutIssues(page)
          if (issues.length > 0) found[route] = issues
          if (route === "#/queues") {
            const table = await queuesTable(page)
            assert.isTrue(table.fits, `the queues table fits its box at 1280 px: ${table.widths}`)
          }
        }
        assert.deepStrictEqual(found, {}, "at 1280 px")
        // Narrower than the table: its box scrolls, the page does not, and still no word splits.
        await page.setViewportSize({ width: 800, height: 900 })
        await page.goto(`${baseUrl}/#/queues`)
        await page.locator(`tr[data-queue="reports-nightly-eu-west"]`).waitFor({ timeout: 10_000 })
        assert.deepStrictEqual(await layoutIssues(page), [], "#/queues at 800 px")
        assert.isFalse((await queuesTable(page)).fits, "at 800 px the table's own box scrolls")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("queues: counts of the runs not ended by state and the oldest due run; pausing a queue marks it paused (and stores it) until it is resumed", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // A queue no worker serves: its runs stay pending.
      yield* stores.b.enqueue(
        [1, 2, 3].map((width) => ({ kind: "resize-image", queue: "mail", payload: { image: "m.png", width } }))
      )
      const paused = () =>
        Effect.map(
          stores.sql.unsafe<{ queue: string }>(`SELECT queue FROM "${stores.schema}".paused_queues`),
          (rows) => rows.map((r) => r.queue)
        )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/queues`)
        const row = page.locator(`tr[data-queue="mail"]`)
        await row.waitFor({ timeout: 10_000 })
        const cells = await rowCells(page, `tr[data-queue="mail"]`)
        assert.strictEqual(cells[0], "mail")
        assert.strictEqual(cells[1], "active")
        assert.strictEqual(cells[2], "3", "pending")
        // After the live states (ended runs are counted per minute: ADR 0030).
        assert.strictEqual(cells[5], "3", "due")
        await page.getByRole("button", { name: "Pause queue mail" }).click()
        await row.locator(".badge.paused").waitFor({ timeout: 10_000 })
        await page.getByRole("button", { name: "Resume queue mail" }).waitFor()
        await page.evaluate(() => (globalThis as any).document.activeElement?.blur())
        await shot(page, "queues")
      })
      assert.deepStrictEqual(yield* paused(), ["mail"])
      yield* promise(async () => {
        await page.getByRole("button", { name: "Resume queue mail" }).click()
        await page.locator(`tr[data-queue="mail"] .badge.active`).waitFor({ timeout: 10_000 })
      })
      assert.deepStrictEqual(yield* paused(), [])
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("schedules: next ticks, the last tick's run linked with its state, the missed-tick policy, and pause / resume", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      yield* stores.b.registerSchedules([{
        name: "nightly-thumbs",
        cron: "0 3 * * *",
        kind: "resize-image",
        payload: { image: "n.png", width: 9 },
        missed: "once"
      }])
      // Its next tick is made due now, and ticked: one run enqueued for that tick.
      yield* stores.sql.unsafe(`UPDATE "${stores.schema}".schedules SET next_tick = now() - interval '1 second'`)
      // This ticker or the worker's: either way one run for the tick.
      yield* stores.b.tickSchedules
      const [tickRun] = yield* eventually(
        "the tick's run",
        Effect.map(stores.b.list({ kind: "resize-image", limit: 1 }), (runs) => runs.length > 0 && runs)
      )
      const runId = tickRun!.id
      const isPaused = () =>
        Effect.map(
          stores.sql.unsafe<{ paused: boolean }>(`SELECT paused FROM "${stores.schema}".schedules`),
          (rows) => rows[0]!.paused
        )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/schedules`)
        const row = page.locator(`tr[data-schedule="nightly-thumbs"]`)
        await row.waitFor({ timeout: 10_000 })
        await row.locator(`a[href="#/runs/${runId}"]`).waitFor({ timeout: 10_000 })
        const cells = await rowCells(page, `tr[data-schedule="nightly-thumbs"]`)
        assert.strictEqual(cells[1], `0 3 * * * UTC`)
        assert.strictEqual(await row.locator("td").nth(3).locator("li").count(), 3, "the next three ticks")
        assert.match(cells[7]!, /^run once for missed ticks/)
        assert.strictEqual(cells[8], "active")
        await page.getByRole("button", { name: "Pause schedule nightly-thumbs" }).click()
        await row.locator(".badge.paused").waitFor({ timeout: 10_000 })
        await page.evaluate(() => (globalThis as any).document.activeElement?.blur())
        await shot(page, "schedules")
      })
      assert.isTrue(yield* isPaused())
      yield* promise(async () => {
        await page.getByRole("button", { name: "Resume schedule nightly-thumbs" }).click()
        await page.locator(`tr[data-schedule="nightly-thumbs"] .badge.active`).waitFor({ timeout: 10_000 })
      })
      assert.isFalse(yield* isPaused())
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("key limits: the limit, the slots each key holds and the key waiting longest first", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      yield* stores.b.setKeyLimits([KeyLimits.perKind("export", 1)])
      const keyed = (key: string, n: number) =>
        stores.b.enqueue(
          Array.from(
            { length: n },
            (_, i) => ({ kind: "export", queue: "exports", payload: { i }, concurrencyKey: key })
          )
        )
      yield* keyed("tenant-a", 3)
      yield* keyed("tenant-b", 1)
      // Claimed by hand (no worker serves "exports"): each key's first run holds its one slot.
      const claimed = yield* stores.b.claim({
        owner: "hand",
        queues: ["exports"],
        kinds: ["export"],
        limit: 10,
        ttl: Duration.seconds(60)
      })
      assert.strictEqual(claimed.length, 2)
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/limits`)
        const limit = page.locator(`section[data-limit="kind:export"]`)
        await limit.waitFor({ timeout: 10_000 })
        assert.include(await limit.locator("dl").textContent(), "Limit per key1")
        const keys = await limit.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key")))
        assert.deepStrictEqual(keys, ["tenant-a", "tenant-b"], "the key with runs waiting first")
        assert.deepStrictEqual(
          (await rowCells(page, `section[data-limit="kind:export"] tr[data-key="tenant-a"]`)).slice(1, 3),
          ["1 of 1", "2"]
        )
        assert.deepStrictEqual(
          (await rowCells(page, `section[data-limit="kind:export"] tr[data-key="tenant-b"]`)).slice(1, 4),
          ["1 of 1", "0", "—"]
        )
        await shot(page, "limits")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("workers: an idle worker is listed from the registry with its host, pid, version, queues, concurrency and heartbeat", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems } = yield* consoleSetup
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/workers`)
        const row = page.locator("tr[data-owner]").first()
        await row.waitFor({ timeout: 10_000 })
        const cells = (await row.locator("td").allTextContents()).map((t) => t.trim())
        assert.strictEqual(cells[1], os.hostname())
        assert.strictEqual(cells[2], String(process.pid))
        assert.match(cells[3]!, /^\d+\.\d+\.\d+/)
        assert.strictEqual(cells[4], "default")
        assert.strictEqual(cells[5], "4")
        assert.strictEqual(cells[6], "0 of 4", "idle: holds no run")
        assert.match(cells[7]!, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \(\d+ (ms|s) ago\)$/)
        assert.strictEqual(await page.locator("section.worker").count(), 0, "no lease to list")
        await shot(page, "workers")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("workers: a worker process killed with kill -9 is shown as gone, with when it was last seen, until the registry forgets it", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // A real `leasehold worker` process, heartbeating every 300 ms (its registry row lives three heartbeats).
      const worker = yield* background([
        "worker",
        "--queue",
        "killed-queue",
        "--heartbeat",
        "300 millis",
        "--ttl",
        "1 second",
        ...connection(stores.schema)
      ])
      const pid = worker.child.pid!
      const registryRow = Effect.map(
        stores.sql.unsafe<{ owner: string; last_heartbeat_at: Date; expired: boolean }>(
          `SELECT owner, last_heartbeat_at, expires_at <= now() AS expired FROM "${stores.schema}".workers WHERE pid = ${pid}`
        ),
        (rows) => rows[0]
      )
      const { owner } = yield* eventually("the worker process announces itself", registryRow, "30 seconds")
      const row = page.locator(`tr[data-owner="${owner}"]`)
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/workers`)
        await row.waitFor({ timeout: 10_000 })
        assert.strictEqual(await row.locator(".badge.gone").count(), 0, "alive: not gone")
      })
      worker.child.kill("SIGKILL")
      yield* promise(() => worker.exited)
      // No shutdown retired its row: it expires, by the database's clock.
      const dead = yield* eventually(
        "its registry row expires",
        Effect.map(registryRow, (r) => r?.expired === true && r),
        "30 seconds"
      )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/?dead#/workers`)
        await row.locator(".badge.gone").waitFor({ timeout: 10_000 })
        const cells = await rowCells(page, `tr[data-owner="${owner}"]`)
        assert.strictEqual(cells[2], String(pid))
        assert.match(cells[7]!, /^gone last seen \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \(\d+ (ms|s) ago\)$/)
        assert.strictEqual(
          await row.locator("td").nth(7).locator("time").getAttribute("datetime"),
          dead.last_heartbeat_at.toISOString(),
          "when it was last seen"
        )
        assert.deepStrictEqual(await layoutIssues(page), [])
      })
      // Ten minutes past its expiry (moved there through the database) the registry forgets it: so does the page.
      yield* stores.sql.unsafe(
        `UPDATE "${stores.schema}".workers SET expires_at = expires_at - interval '11 minutes' WHERE owner = '${owner}'`
      )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/?forgotten#/workers`)
        await page.locator("tr[data-owner]").first().waitFor({ timeout: 10_000 })
        assert.strictEqual(await row.count(), 0, "forgotten")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("runs: search by error text and by id, an error column, and a bulk retry of 100 failed runs confirmed with its count", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // 100 runs of a kind no worker takes, failed on their one attempt, and one failed otherwise.
      const enqueued = yield* stores.b.enqueue(
        Array.from({ length: 101 }, (_, i) => ({ kind: "doomed", payload: { i }, maxAttempts: 1 }))
      )
      const claimed = yield* stores.b.claim({
        owner: "hand",
        queues: ["default"],
        kinds: ["doomed"],
        limit: 101,
        ttl: Duration.seconds(60)
      })
      assert.strictEqual(claimed.length, 101)
      for (const [i, run] of claimed.entries()) {
        yield* stores.b.fail({
          runId: run.id,
          fence: run.fence,
          error: { message: i === 100 ? "quota exceeded" : `disk full on volume ${i}` },
          retryDelayMs: undefined
        })
      }
      const lone = claimed[100]!.id
      const count = (state: string) =>
        Effect.map(
          stores.sql.unsafe<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${stores.schema}".runs WHERE kind = 'doomed' AND state = '${state}'`
          ),
          (r) => r[0]!.n
        )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs?id=${lone}`)
        await page.locator(`tr[data-run-id="${lone}"]`).waitFor({ timeout: 10_000 })
        assert.strictEqual(await page.locator("main tbody tr").count(), 1)
        assert.strictEqual(
          (await page.locator(`tr[data-run-id="${lone}"] td.error-cell`).textContent())?.trim(),
          "quota exceeded"
        )

        await page.goto(`${baseUrl}/#/runs`)
        await page.getByLabel("State").selectOption("failed")
        await page.getByLabel("Error text").fill("DISK FULL")
        await page.getByLabel("Per page").selectOption("100")
        await page.getByRole("button", { name: "Search" }).click()
        // Choosing 100 per page lists the failed runs before the search is sent, the lone one among
        // them: the search's answer is the list of 100 that leaves it out.
        const searched = await page.waitForFunction(
          (id) => {
            const rows = (globalThis as any).document.querySelectorAll("tr[data-run-id]")
            return rows.length === 100 && (globalThis as any).document.querySelector(`tr[data-run-id="${id}"]`) === null
          },
          lone,
          { timeout: 10_000 }
        ).then(() => true, () => false)
        assert.isTrue(
          searched,
          "the search lists the 100 runs whose error says disk full, and not the run failed otherwise"
        )
        assert.strictEqual(
          await page.locator(`tr[data-run-id="${lone}"]`).count(),
          0,
          "the run failed otherwise is not found"
        )
        assert.match((await page.locator("td.error-cell").first().textContent()) ?? "", /^disk full on volume \d+$/)
        await page.getByLabel("Select every run on this page").check()
        assert.strictEqual(await page.locator(".bulk .muted").textContent(), "100 selected")
        await shot(page, "runs")
        await page.getByRole("button", { name: "Retry selected" }).click()
        // The confirmation's own element and its text; then focus on its "Yes", which moves there in
        // an effect after the render: read before it, the focused element is the body (the whole page).
        const confirm = page.getByRole("group", { name: "Confirm: Retry selected" })
        await confirm.getByText("Retry 100 runs?").waitFor({ timeout: 10_000 })
        const yes = confirm.getByRole("button", { name: "Yes, retry 100 runs", exact: true })
        await page.waitForFunction(
          (button) => (globalThis as any).document.activeElement === button,
          await yes.elementHandle(),
          { timeout: 10_000 }
        )
        await page.keyboard.press("Enter")
        await page.locator("main .form-message", { hasText: "Retried 100 runs." }).waitFor({ timeout: 10_000 })
      })
      assert.strictEqual(yield* count("pending"), 100)
      assert.strictEqual(yield* count("failed"), 1, "the run not selected stays failed")
      assert.deepStrictEqual(problems, [], problems.join("\n"))
      assert.strictEqual(enqueued.length, 101)
    }))

  it.live("runs: a reload's answer that arrives after a newer one's is not shown (a live reload held back past a bulk retry)", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // Two runs of a kind no worker takes, failed on their one attempt.
      yield* stores.b.enqueue([1, 2].map((i) => ({ kind: "doomed", payload: { i }, maxAttempts: 1 })))
      const claimed = yield* stores.b.claim({
        owner: "hand",
        queues: ["default"],
        kinds: ["doomed"],
        limit: 2,
        ttl: Duration.seconds(60)
      })
      for (const run of claimed) {
        yield* stores.b.fail({
          runId: run.id,
          fence: run.fence,
          error: { message: "disk full" },
          retryDelayMs: undefined
        })
      }
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs?state=failed`)
        await page.locator("main tbody tr[data-run-id]").nth(1).waitFor({ timeout: 10_000 })
        // The page's list requests: "pass" to the server; "hold" the first one, answered by the server
        // at once but handed to the page only when released; "freeze" every later one until the end,
        // so that the released answer is the last the page gets.
        let phase: "pass" | "hold" | "freeze" = "hold"
        let captured!: (release: () => Promise<void>) => void
        const held = new Promise<() => Promise<void>>((resolve) => (captured = resolve))
        const frozen: Array<() => Promise<void>> = []
        await page.route("**/api/runs?*", async (route) => {
          // The page's list only: the approvals count in the navigation reloads on each change too.
          if (phase === "pass" || !route.request().url().includes("state=failed")) return route.continue()
          if (phase === "freeze") return void frozen.push(() => route.continue())
          phase = "pass"
          const response = await route.fetch()
          captured(() => route.fulfill({ response }))
        })
        // A store notification (a run enqueued) makes the page reload its list: that request is held.
        await Effect.runPromise(stores.b.enqueue([{ kind: "other", payload: {} }]))
        const release = await held
        await page.getByLabel("Select every run on this page").check()
        await page.getByRole("button", { name: "Retry selected" }).click()
        await page.getByRole("button", { name: "Yes, retry 2 runs" }).click()
        await page.locator("main .form-message", { hasText: "Retried 2 runs." }).waitFor({ timeout: 10_000 })
        await page.getByText("No runs match.").waitFor({ timeout: 10_000 })
        // The retry's own notification reloads the list once more (debounced): let that one answer.
        await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 1_000)))
        phase = "freeze"
        // The held answer (both runs still failed) arrives now, after the newer answers.
        const late = page.waitForResponse((response) => response.url().includes("/api/runs?state=failed"))
        await release()
        await late
        await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 300)))
        assert.strictEqual(
          await page.locator("main tbody tr[data-run-id]").count(),
          0,
          "the page shows the newest answer (no failed runs), not the older one that arrived after it"
        )
        await page.getByText("No runs match.").waitFor({ timeout: 1_000 })
        phase = "pass"
        await Promise.all(frozen.map((answer) => answer()))
        await page.unroute("**/api/runs?*")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("runs: what an operator types and chooses in the search stays while the list reloads under it", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      const a7 = yield* enqueueRefund(stores, "A-7", 7)
      yield* enqueueRefund(stores, "B-8", 8)
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs`)
        await page.locator(`tr[data-run-id="${a7}"]`).waitFor({ timeout: 10_000 })
        await page.getByLabel("Payload field", { exact: true }).fill("order")
        await page.getByLabel("Payload value", { exact: true }).fill("A-7")
        await page.getByLabel("State").selectOption("suspended")
        await page.getByLabel("Per page").selectOption("100")
        // A store notification (a run enqueued) reloads the list and renders the page again.
        const reloaded = page.waitForResponse((response) => response.url().endsWith("/api/runs?limit=51"))
        await Effect.runPromise(stores.b.enqueue([{ kind: "other", payload: {} }]))
        await reloaded
        await page.locator("main tbody tr[data-run-id]").nth(2).waitFor({ timeout: 10_000 })
        assert.deepStrictEqual(
          [
            await page.getByLabel("Payload field", { exact: true }).inputValue(),
            await page.getByLabel("Payload value", { exact: true }).inputValue(),
            await page.getByLabel("State").inputValue(),
            await page.getByLabel("Per page").inputValue()
          ],
          ["order", "A-7", "suspended", "100"],
          "the reload leaves the fields as the operator left them"
        )
        // And the search sends them: only the A-7 refund.
        await page.getByRole("button", { name: "Search" }).click()
        await page.waitForFunction(() => (globalThis as any).location.hash.includes("field=order"), undefined, {
          timeout: 5_000
        })
        await page.waitForFunction(
          () => (globalThis as any).document.querySelectorAll("main tbody tr[data-run-id]").length === 1,
          undefined,
          {
            timeout: 10_000
          }
        )
        assert.strictEqual(await page.locator(`tr[data-run-id="${a7}"]`).count(), 1)
        // A page opened from a link shows its filter in the fields.
        assert.strictEqual(await page.getByLabel("Payload value", { exact: true }).inputValue(), "A-7")
        assert.strictEqual(await page.getByLabel("State").inputValue(), "suspended")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("run page: date, duration, wait and run time, and the trace id linked through the configured trace URL template", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({
        traceUrl: "http://tracing.example.test/trace/{traceId}?span={spanId}"
      })
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
      const spanId = "00f067aa0ba902b7"
      const [enqueued] = yield* stores.b.enqueue([{
        kind: "resize-image",
        payload: { image: "t.png", width: 5 },
        traceParent: `00-${traceId}-${spanId}-01`
      }])
      const runId = enqueued!.id
      yield* eventually(
        "the traced run completes",
        Effect.map(readRun(stores, runId), (run) => run.state === "completed")
      )
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs/${runId}`)
        await page.waitForFunction(
          () => (globalThis as any).document.querySelector(".summary .badge")?.textContent === "completed",
          undefined,
          { timeout: 10_000 }
        )
        const fact = async (term: string) =>
          (await page.locator(".summary > div", { has: page.locator(`dt:text-is("${term}")`) }).locator("dd")
            .textContent())?.trim() ?? ""
        const link = page.locator(".summary a", { hasText: traceId })
        assert.strictEqual(
          await link.getAttribute("href"),
          `http://tracing.example.test/trace/${traceId}?span=${spanId}`
        )
        assert.match(await fact("Created"), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \(/)
        assert.match(await fact("Finished"), /^\d{4}-\d{2}-\d{2} /)
        for (const term of ["Duration", "Wait time", "Run time"]) assert.match(await fact(term), /^\d+ (ms|s)$/, term)
        // The sample task sleeps 50 ms: its run time says so.
        assert.isAtLeast(Number(/^(\d+) ms$/.exec(await fact("Run time"))?.[1] ?? 1000), 50)
        await shot(page, "run")
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("run page: a run's attempt timeout and deadline as its enqueue set them, a dash for a run without", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({})
      // A kind no worker serves: the run stays pending with what its enqueue set.
      const [bounded, plain] = yield* stores.b.enqueue([
        { kind: "unserved", payload: {}, attemptTimeoutMs: 90_000, deadlineAfterMs: 3_600_000 },
        { kind: "unserved", payload: {} }
      ])
      const facts = (runId: string) =>
        promise(async () => {
          await page.goto(`${baseUrl}/#/runs/${runId}`)
          await page.waitForFunction(
            () => (globalThis as any).document.querySelector(".summary .badge")?.textContent === "pending",
            undefined,
            { timeout: 10_000 }
          )
          const fact = async (term: string) =>
            (await page.locator(".summary > div", { has: page.locator(`dt:text-is("${term}")`) }).locator("dd")
              .textContent())?.trim() ?? ""
          return { timeout: await fact("Attempt timeout"), deadline: await fact("Deadline") }
        })
      const shown = yield* facts(bounded!.id)
      assert.strictEqual(shown.timeout, "90 s")
      assert.match(shown.deadline, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \(/)
      assert.deepStrictEqual(yield* facts(plain!.id), { timeout: "—", deadline: "—" })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("run page: a failed attempt's log lines under its fence, as text: a line of markup executes nothing", () =>
    Effect.gen(function*() {
      const hostile = `<img src=x onerror="window.__pwned = 'log'; alert(1)">`
      const noisy = Handler.make({
        kind: "noisy",
        payload: Schema.Struct({ order: Schema.String }),
        handle: ({ order }) =>
          Effect.gen(function*() {
            yield* Effect.logInfo(`charging ${order}`)
            yield* Effect.logWarning(hostile)
            return yield* Effect.fail(new Error("card declined"))
          }).pipe(Effect.annotateLogs({ order }))
      })
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({ handlers: [noisy] })
      const [enqueued] = yield* stores.b.enqueue([{ kind: "noisy", payload: { order: "o-9" }, maxAttempts: 1 }])
      const runId = enqueued!.id
      yield* eventually("the run fails", Effect.map(readRun(stores, runId), (run) => run.state === "failed"))
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs/${runId}`)
        const log = page.locator(`.attempt-log[data-fence="1"]`)
        await log.waitFor({ timeout: 10_000 })
        assert.strictEqual(
          (await log.locator("h3").textContent())?.trim(),
          "Fence 1, attempt 1, failed: 2 lines"
        )
        const lines = ((await log.locator("pre.log").textContent()) ?? "").split("\n")
        assert.lengthOf(lines, 2)
        assert.match(lines[0]!, /^\d{4}-\d{2}-\d{2}T\S+Z INFO charging o-9 order=o-9$/)
        assert.match(lines[1]!, /^\S+ WARN <img src=x onerror="window.__pwned = 'log'; alert\(1\)"> order=o-9$/)
        assert.strictEqual(await page.locator("main img, main [onerror]").count(), 0, "no element made of a line")
        // The admin API's run JSON carries the same lines (what the page read).
        const detail = await (await page.request.get(`${baseUrl}/api/runs/${runId}`)).json()
        assert.deepStrictEqual(
          detail.attemptLogs.map((l: any) => [l.fence, l.attempt, l.outcome, l.lines.map((x: any) => x.message)]),
          [[1, 1, "failed", ["charging o-9", hostile]]]
        )
        assert.strictEqual(await page.evaluate(() => (globalThis as any).__pwned), undefined)
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))

  it.live("approvals: oldest first, and a form built from the signal's schema whose number field is checked in the page and sent as a number", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({ handlers: [payout] })
      const older = yield* enqueueRefund(stores, "O-1", 1)
      const [enqueued] = yield* stores.b.enqueue([{ kind: "approve-payout", payload: { order: "P-9" } }])
      const runId = enqueued!.id
      yield* eventually("the payout suspends", Effect.map(readRun(stores, runId), (run) => run.state === "suspended"))
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/approvals`)
        const card = page.locator(`article.approval[data-run-id="${runId}"]`)
        await card.waitFor({ timeout: 10_000 })
        const order = await page.locator("article.approval").evaluateAll((cards) =>
          cards.map((c) => c.getAttribute("data-run-id"))
        )
        assert.deepStrictEqual(order, [older, runId], "the one waiting longest first")
        const amount = card.getByLabel("Amount", { exact: true })
        assert.strictEqual(await amount.getAttribute("type"), "number")
        assert.strictEqual(await card.getByLabel("Reason (optional)").count(), 1)
        // A plain string of the schema is a one-line text field, not a textarea.
        assert.deepStrictEqual(
          await card.getByLabel("Reason (optional)").evaluate((
            field: any
          ) => [field.tagName, field.getAttribute("type")]),
          ["INPUT", "text"]
        )
        assert.strictEqual(
          await card.getByLabel("Note (optional)").count(),
          0,
          "the schema's fields, not the default form's"
        )
        // Nothing typed: refused in the page, nothing sent.
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Amount is required").waitFor({ timeout: 5_000 })
        assert.strictEqual(await amount.getAttribute("aria-invalid"), "true")
        assert.strictEqual(
          await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute("name")),
          "amount"
        )
        await shot(page, "approvals")
        await amount.fill("12.5")
        await card.getByLabel("Reason (optional)").fill("partial")
        await card.getByRole("button", { name: "Approve" }).click()
        await card.getByText("Approved: the run is resuming.").waitFor({ timeout: 10_000 })
      })
      const done = yield* eventually(
        "the payout completes",
        Effect.map(readRun(stores, runId), (run) => run.state === "completed" && run),
        "20 seconds"
      )
      assert.deepStrictEqual(done.result, {
        order: "P-9",
        decision: { _tag: "Signalled", payload: { approved: true, amount: 12.5, reason: "partial" } }
      })
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))
})

// One of the server's callback secrets (`startServer`'s default): the URLs this handler signs verify there.
const linkCallbacks = Effect.runSync(Callbacks.make(callbacksOptions({})))

/** A handler that keeps its signed callback URL in its checkpoint, as the HTTP guide's example once did. */
const payByLink = Handler.make({
  kind: "pay-by-link",
  payload: Schema.Struct({ order: Schema.String }),
  signals: { approval: Schema.Struct({ approved: Schema.Boolean }) },
  handle: ({ order }) =>
    Effect.gen(function*() {
      const url = yield* Callback.url("approval", { expiresIn: "1 hour" })
      yield* Run.checkpoint({ url, message: `ask the approver of ${order} to POST to ${url}` })
      return yield* Run.awaitSignal("approval")
    }).pipe(Effect.provideService(Callbacks.Callbacks, linkCallbacks))
})

describe("signed URLs on the console (chromium)", () => {
  it.live("a checkpointed signed URL is masked in read answers and on every console page, read-only included; a writer copies it whole and it resumes the run", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({ handlers: [payByLink] })
      const [enqueued] = yield* stores.b.enqueue([{ kind: "pay-by-link", payload: { order: "L-1" } }])
      const runId = enqueued!.id
      yield* eventually(
        "the run suspends with its URL checkpointed",
        Effect.map(readRun(stores, runId), (run) => run.state === "suspended"),
        "30 seconds"
      )
      const [row] = yield* stores.sql.unsafe<{ checkpoint: { url: string } }>(
        `SELECT checkpoint FROM "${stores.schema}".runs_now WHERE id = ${Number(runId)}`
      )
      const url = row!.checkpoint.url
      const sig = new URL(url).searchParams.get("sig") ?? ""
      assert.isAbove(sig.length, 20, `a signed URL: ${url}`)
      const noSignature = (text: string, where: string) => {
        assert.notInclude(text, sig, `${where} shows the signature`)
        assert.notInclude(text, url, `${where} shows the signed URL`)
      }

      // A read-only server over the same store: its answers and its console mask the URL, and refuse it whole.
      const readOnly = yield* startServer(stores, { handlers: [...SampleTasks.handlers, payByLink], readOnly: true })
      yield* promise(async () => {
        for (const path of [`/api/runs/${runId}`, "/api/runs?state=suspended", "/api/runs"]) {
          const answer = await fetch(`${readOnly.origin}${path}`)
          assert.strictEqual(answer.status, 200, path)
          const text = await answer.text()
          noSignature(text, `read-only ${path}`)
          assert.include(text, "sig=masked", path)
        }
        const refused = await fetch(`${readOnly.origin}/api/runs/${runId}/signed-urls`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}"
        })
        assert.strictEqual(refused.status, 403, "a read-only server never gives the URL whole")
        const other = await page.context().browser()!.newPage({ viewport: { width: 1280, height: 900 } })
        try {
          for (
            const [route, ready] of [[`#/runs/${runId}`, "section[aria-labelledby=signed-urls] li"], [
              "#/approvals",
              `article.approval[data-run-id="${runId}"]`
            ], ["#/runs", `tr[data-run-id="${runId}"]`]] as const
          ) {
            await other.goto(`${readOnly.origin}/${route}`)
            await other.locator(ready).first().waitFor({ timeout: 10_000 })
            noSignature(await other.content(), `the read-only console's ${route}`)
          }
          await other.goto(`${readOnly.origin}/#/runs/${runId}`)
          await other.locator("section[aria-labelledby=signed-urls] li").waitFor({ timeout: 10_000 })
          assert.strictEqual(
            await other.locator("section[aria-labelledby=signed-urls] button").count(),
            0,
            "no Copy when read-only"
          )
        } finally {
          await other.close()
        }
      })

      // With write access: masked on every page too, and "Copy" puts the whole URL on the clipboard only.
      const copied = yield* promise(async () => {
        await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl })
        for (
          const [route, ready] of [["#/approvals", `article.approval[data-run-id="${runId}"]`], [
            "#/runs",
            `tr[data-run-id="${runId}"]`
          ]] as const
        ) {
          await page.goto(`${baseUrl}/${route}`)
          await page.locator(ready).first().waitFor({ timeout: 10_000 })
          noSignature(await page.content(), `the console's ${route}`)
        }
        await page.goto(`${baseUrl}/#/runs/${runId}`)
        const item = page.locator("section[aria-labelledby=signed-urls] li")
        await item.waitFor({ timeout: 10_000 })
        assert.include(await item.locator("code").textContent(), "sig=masked")
        await item.getByRole("button", { name: "Copy" }).click()
        await page.locator("#announcer", { hasText: "Copied the signed URL" }).waitFor({
          state: "attached",
          timeout: 10_000
        })
        noSignature(await page.content(), "the run page after Copy")
        return await page.evaluate(() => (globalThis as any).navigator.clipboard.readText() as Promise<string>)
      })
      assert.strictEqual(copied, url, "Copy gives the URL whole")

      // The copied URL does what it is for: it resumes the run, which completes.
      const resumed = yield* promise(() =>
        fetch(at(baseUrl, copied), {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: `{"approved":true}`
        })
      )
      assert.strictEqual(resumed.status, 200)
      yield* eventually(
        "the run resumed by the copied URL completes",
        Effect.map(readRun(stores, runId), (run) => run.state === "completed" && run.fence === 2),
        "30 seconds"
      )
      assert.deepStrictEqual(problems, [], problems.join("\n"))
    }))
})

describe("operators in the console (chromium)", () => {
  it.live("operators: the selected runs deleted after a confirmation with their count (a running one left), a cancel and a delete on a run page and a queue paused recorded under the credential's name, the audit page", () =>
    Effect.gen(function*() {
      const secret = "alice-console-secret-0123456789"
      const { baseUrl, page, problems, stores } = yield* consoleSetupWith({
        credentials: { spec: `alice:rw:${secret}`, secret }
      })
      // Three runs of a kind no worker takes; one of them claimed by hand, so running.
      const runs = yield* stores.b.enqueue([1, 2, 3].map((i) => ({ kind: "nobody", payload: { i }, queue: "erase" })))
      // A queue with a run in it (the queues page lists those), to be paused.
      yield* stores.b.enqueue([{ kind: "nobody", payload: {}, queue: "mail" }])
      const [held] = yield* stores.b.claim({
        owner: "by-hand",
        queues: ["erase"],
        kinds: ["nobody"],
        limit: 1,
        ttl: Duration.minutes(5)
      })
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs?queue=erase`)
        await page.locator("main tbody tr[data-run-id]").nth(2).waitFor({ timeout: 10_000 })
        await page.getByLabel("Select every run on this page").check()
        await page.getByRole("button", { name: "Delete selected" }).click()
        const confirm = page.getByRole("group", { name: "Confirm: Delete selected" })
        await confirm.getByText("Delete 2 runs for good?").waitFor({ timeout: 10_000 })
        await confirm.getByRole("button", { name: "Yes, delete 2 runs", exact: true }).click()
        await page.locator("main .form-message", { hasText: "Deleted 2 runs." }).waitFor({ timeout: 10_000 })
      })
      const left = yield* stores.b.list({ queue: "erase", limit: 10 })
      assert.deepStrictEqual(left.map((r) => r.id), [held!.id], "the running run is left")
      for (const r of runs.filter((r) => r.id !== held!.id)) {
        assert.deepInclude(yield* Effect.flip(stores.b.get(r.id)), { _tag: "RunNotFound" })
      }
      yield* promise(async () => {
        await page.goto(`${baseUrl}/#/runs/${held!.id}`)
        await page.getByRole("button", { name: "Cancel run" }).click()
        await page.getByRole("button", { name: "Yes, cancel run" }).click()
        const row = page.locator("section[aria-labelledby=admin] tbody tr").first()
        await row.waitFor({ timeout: 10_000 })
        assert.strictEqual(await row.locator("td.actor").textContent(), "alice")
        assert.include(await row.textContent() ?? "", "console")
        // Cancelled, it can be deleted from its page; the console goes back to the runs.
        await page.getByRole("button", { name: "Delete run" }).click()
        await page.getByRole("button", { name: "Yes, delete run" }).click()
        await page.waitForURL(/#\/runs$/, { timeout: 10_000 })
        await page.goto(`${baseUrl}/#/queues`)
        await page.getByRole("button", { name: "Pause queue mail" }).click()
        await page.getByRole("button", { name: "Resume queue mail" }).waitFor({ timeout: 10_000 })
        await page.goto(`${baseUrl}/#/audit`)
        const lines = page.locator("main tbody tr[data-action-id]")
        await lines.nth(2).waitFor({ timeout: 10_000 })
        const texts = await lines.allTextContents()
        assert.match(texts[0]!, /alice.*console.*queue\.pause.*mail/)
        assert.match(texts[1]!, /alice.*console.*runs\.delete.*"count":1/)
        assert.include(texts[1]!, `"ids":["${held!.id}"]`)
        assert.match(texts[2]!, /alice.*console.*runs\.delete.*"count":2/)
        assert.notInclude(texts.join("\n"), secret)
      })
      assert.deepInclude(yield* Effect.flip(stores.b.get(held!.id)), { _tag: "RunNotFound" })
      // A live reload of the run's page already in flight when its delete committed answers 404:
      // expected for that run only, with the browser's own line about it.
      const reloadOfDeleted = `404 for ${baseUrl}/api/runs/${held!.id}`
      const expected = problems.includes(reloadOfDeleted)
        ? [reloadOfDeleted, "console: Failed to load resource: the server responded with a status of 404 (Not Found)"]
        : []
      assert.deepStrictEqual(problems.filter((p) => !expected.includes(p)), [], problems.join("\n"))
    }))
})
