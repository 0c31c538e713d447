/**
 * The web console in a real browser: Debian's `chromium`, driven by `playwright-core` (no browser
 * download), against a real server on an ephemeral port, a real worker running the sample tasks and
 * a real PostgreSQL. Chromium missing is a failure that says how to install it, never a skip.
 */
import { assert, describe, it } from "@effect/vitest"
import { SampleTasks } from "@leasehold/cli"
import { Duration, Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { startServer } from "./support/http.js"
import { type Stores, twoStores } from "./support/stores.js"
import { eventually, startWorker } from "./support/workers.js"

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
  Effect.promise(() =>
    chromium.launch({ executablePath: chromiumPath(), args: chromiumFlags })
  ),
  (browser: Browser) => Effect.promise(() => browser.close())
)

// The README's screenshot is refreshed on request (UPDATE_SCREENSHOTS=1); otherwise the test still
// takes it, into the temporary folder, so a plain run leaves the tree as it was.
const screenshotPath = process.env.UPDATE_SCREENSHOTS === "1"
  ? path.resolve(import.meta.dirname, "..", "docs", "console.png")
  : path.join(os.tmpdir(), "leasehold-console.png")

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
}) =>
  Effect.gen(function*() {
    const stores = yield* twoStores
    yield* startWorker(stores.a, stores.sql, {
      handlers: SampleTasks.handlers,
      concurrency: 4,
      ttl: "10 seconds",
      pollInterval: "100 millis"
    })
    // `leasehold serve`'s server (admin API, callbacks, console) on a free loopback port.
    const { origin: baseUrl } = yield* startServer(stores, { handlers: SampleTasks.handlers, token: options.token })
    const browser = yield* launch
    const page = yield* Effect.promise(() =>
      browser.newPage({
        viewport: { width: 1280, height: 900 },
        ...(options.token === undefined ? {} : { httpCredentials: { username: "admin", password: options.token } })
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
    return { stores, baseUrl, page, problems }
  })

const consoleSetup = consoleSetupWith({})

const enqueueRefund = (stores: Stores, order: string, amount: number) =>
  Effect.gen(function*() {
    const [enqueued] = yield* stores.b.enqueue([{ kind: "approve-refund", payload: { order, amount } }])
    const id = enqueued!.id
    yield* eventually(
      `run ${id} suspends for approval`,
      Effect.map(readRun(stores, id), (run) => run.state === "suspended")
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
        const { baseUrl, page, problems, stores } = yield* consoleSetup
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
          "20 seconds"
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
          assert.strictEqual(first[5], "suspended")
          assert.strictEqual(second[0], "2")
          assert.strictEqual(second[5], "completed")
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
        await page.waitForFunction(() => (globalThis as any).document.title.startsWith("Run %E0%A4%A"), undefined, { timeout: 10_000 })
      })
      assert.deepStrictEqual(problems.filter((p) => /URI malformed/.test(p)), [], problems.join("\n"))
    })
  )

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
    })
  )

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
          assert.include(await page.locator("section[aria-labelledby=by-queue] tbody").textContent(), "manual")
        const live = await page.locator("section[aria-labelledby=live-leases] tbody tr td").allTextContents()
        assert.deepStrictEqual(live.slice(0, 5).map((t) => t.trim()), [`#${held!.id}`, "operator-laptop", "resize-image", "manual", "1"])
          assert.strictEqual(
            await page.locator("svg.chart").getAttribute("aria-label"),
            "3 runs finished in the last 10 minutes"
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
          await page.getByLabel("Payload field").fill("order")
          await page.getByLabel("Payload value").fill("A-7")
          await page.getByLabel("Payload value").press("Enter")
          await page.waitForFunction(() => (globalThis as any).location.hash.includes("value=A-7"), undefined, {
            timeout: 5_000
          })
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
        const { baseUrl, page, problems, stores } = yield* consoleSetup
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
          Effect.map(readRun(stores, rejected), (run) => run.state === "completed" && run)
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
          assert.strictEqual(await activeText(), "Yes, cancel run")
          await page.keyboard.press("Escape")
          assert.strictEqual(await activeText(), "Cancel run")
          await page.keyboard.press("Enter")
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
          assert.deepStrictEqual(order, ["Skip to content", "Overview", "Runs", "Approvals", "Workers"])
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
        const { baseUrl, page, problems, stores } = yield* consoleSetupWith({ token })
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
          Effect.map(readRun(stores, runId), (run) => run.state === "completed" && run.fence === 2)
        )
        assert.deepStrictEqual(problems, [], problems.join("\n"))
      })
  )

  it.live("the runs page lists newest first by number and pages by cursor: Next shows the older runs, Previous the newer ones", () =>
    Effect.gen(function*() {
      const { baseUrl, page, problems, stores } = yield* consoleSetup
      // A kind no worker takes, so the runs stay where they are: 60 of them, past a page of 50.
      const enqueued = yield* stores.b.enqueue(Array.from({ length: 60 }, (_, i) => ({ kind: "paged-kind", payload: { i } })))
      const newestFirst = enqueued.map((e) => e.id).sort((a, b) => Number(b) - Number(a))
      const shownIds = () => page.locator("tr[data-run-id]").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-run-id")!))
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
    })
  )

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
    })
  )
})
