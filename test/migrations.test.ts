/**
 * Migrations are files, append-only and applied in number order. Each released file's digest is
 * held here: editing one fails this test (a store that ran it would never see the change), and a
 * new step is a new file with its digest added below.
 */
import { Migrations, StoreSchema } from "@leasehold/sql"
import { createHash } from "node:crypto"
import { assert, describe, it } from "vitest"

const released: ReadonlyArray<readonly [name: string, sha256: string]> = [
  ["0001_init", "fe0dc635872d3ed5b67fda32140d42080ede0657d9cfdb925cbc52aa3d8c5c55"],
  ["0002_partial_unique_keys", "077618d3ff967158549ba15e5e0c1ba19d0fb5dbea8f7392a1b11258de3ffeda"],
  ["0003_lazy_claim_history", "4f4472bff8c64f7e56c1298108d4cd99f95c4c6fd61755cdf89630177763b349"],
  ["0004_runs_fillfactor", "08e187590265abb415bcd99fdaf7fce70f33ce96a7d3d778505261b3db3c5207"],
  ["0005_signal_delivery", "6f0ab35ab29d0f09bcc0d864e9d3ab9ad4bf07b69392d07ec1e79ac1213f40a2"],
  ["0006_trace_context", "06d3eff031716c97af8ec8041ff4d05a9bc668796ebe2f710e4e405c521b1b7e"],
  ["0007_hot_lease_renewal", "e630b314618b6ee57c4a1f49577635ad7d6e15e52f2a5e27114d416c5ac9c07e"],
  ["0008_paused_queues", "a07bbce083096684f4ed3a9f155598b66f28e8af0585f58f1d3037ff0d02074e"],
  ["0009_schedules", "7806f1003803252b7786e7a60c7547e78cd2ca44372603645b03c8d49ed893be"],
  ["0010_key_concurrency", "83fc913e81744c7b2838e92b9539c161340da46f85866ca9e9dd560896a6b8a7"],
  ["0011_workflows", "96cfc9de805e00c6eaaef9c4c28f01fde9cc5fdecc0efa0313df4f08eaec0063"],
  ["0012_fence_epoch", "021a3f8db6c2325f6fe08ccfc7a36c636f276cb87b6573bec7342899f697114d"],
  ["0013_key_admission", "3d868e1b3b51e3a44895513d6076e1c0fab1d8ae18442fbdb8c65f6c9ec3c3d9"],
  ["0014_key_hot_path", "357f5edf928cdf9b0142c1ae4eac344357228492e06704d97cbe857ff5f84eef"],
  ["0015_key_limit_peaks", "85371271508065152be7955ddf72f60e5b59987d85736edfb4a93af6ebfed12d"],
  ["0016_runs_listed", "f22fff1ebd3f2579dc31e58ea18492a4ddf8d3e33b87dfbdd3683c5af7230221"],
  ["0017_workflow_awaits", "b7ec666c4e0a72b5c6695d5e2b26b10f503317a603d0473cd5623991dae35f21"],
  ["0018_batch_ledger", "6a4e70965f23e10145a459a733825a4cd7c5f6dbdfe6f4415dfe3cdab559319c"],
  ["0019_worker_registry", "78b44f216b7e891419c225e3f88807acfeed1889c62a10ed037a14acec381a4d"],
  ["0020_activity_window", "1ab1b70ac35eeaad6cb0bcd4172457498e3a4106193e7b2fbaaa373f2b609205"],
  ["0021_enqueue_function", "36af38fd3792d2408dd62d0875a490f6e3fddc13cdabea5f3b78200960cdd952"],
  ["0022_unique_windows", "efadda1cee80af835755c43ef3da5c16848992aa0616074a5e821d7641deca69"],
  ["0023_rate_limits", "9c275dbf2d0f26ad4db04c7196ab4733d18e567edc9660b646800015449216bb"],
  ["0024_unique_hold_order_and_retention", "ac39782b5f5953a877aba02e52a07ad970b5a05cb28d65cef4a636a87cf22603"],
  ["0025_keyed_ledger", "931fd2c5d9d7f4d209d0d9356fdc99c4b08beccf336db9936d44e36b812a0d72"],
  ["0026_ledger_settlement", "8edd2fa32910a8a85f37f84e9e51b754ab53ce29d7ed28bf859398ff6392e229"],
  ["0027_timeouts", "1157ab59ae67dff801e7cd1d4e36bb2a575fefcff4e206b48933fc1c54459cbe"],
  ["0028_operator_actions", "caceec608dc2752f091530a8e1f0d721f370be156be987aa48ae37287a7b73ff"],
  ["0029_attempt_logs", "3f134f92d1223794218aded92058afa792d3a3fe8a2a1e83c463baacfd5c7074"],
  ["0030_ledger_lock_in_statement", "5a2c6df7139fe4cab41f8b978dd829ae108d1a5371639899d12cf5aae4fe84c9"],
  ["0031_unique_ledger", "340174c86dd1d28c152c5f1b42c69c2f12efcd087ff9ba7acde49bb0ed8dd6a7"],
  ["0032_runs_now_by_span", "9733feca8e0679c0784a4c3a05237ac94c404ded31559f7c242fd6532f59484d"],
  ["0033_history_partitions", "d4a4984ca29c2dfd037af294ae8563976864644e97ce4495efa59e6cb03cdb5b"],
  ["0034_idempotent_ledger", "d19263b1e8ef0de87fcc8f1990f85281da6959c4ce4587f3730a89ceea5ab94e"]
]

const digest = (text: string) => createHash("sha256").update(text).digest("hex")
const store = StoreSchema.make("tenant_a")

describe("migrations", () => {
  it("no released migration has changed: each file's text is the one released", () => {
    const files = new Map(Migrations.files().map((file) => [file.name, file.text]))
    for (const [name, sha256] of released) {
      const text = files.get(name)
      assert.isDefined(text, `migration ${name} was removed: released migrations stay`)
      assert.strictEqual(
        digest(text!),
        sha256,
        `migration ${name} was edited: migrations are append-only; add a new file instead`
      )
    }
  })

  it("every file is released here, numbered from 0001 with no gap and no number twice", () => {
    const names = Migrations.files().map((file) => file.name)
    assert.deepStrictEqual(
      names,
      released.map(([name]) => name),
      "a migration file without its digest here, or one missing"
    )
    names.forEach((name, i) => assert.strictEqual(name.slice(0, 4), String(i + 1).padStart(4, "0"), name))
  })

  it("a file is rendered for its store: placeholders filled, nothing of them left", () => {
    for (const { name, text } of Migrations.files()) {
      const statements = Migrations.render(text, store)
      assert.isAbove(statements.length, 0, name)
      for (const statement of statements) {
        assert.notMatch(statement, /\{\{|\}\}/, `${name}: a placeholder left unfilled`)
        assert.notMatch(statement, /;\s*$/, `${name}: a statement keeps its semicolon`)
      }
    }
    const ledger = Migrations.files().find((file) => file.name === "0018_batch_ledger")!
    assert.isTrue(Migrations.render(ledger.text, store).some((s) => s.includes(`CREATE FUNCTION "tenant_a".hold(`)))
  })

  it("statements end at semicolons outside quotes, quoted names, dollar-quoted bodies and comments", () => {
    const script = [
      "-- a comment; not a statement",
      "CREATE TABLE \"{{schema}}\".\"odd;name\" (note text DEFAULT 'it''s; fine');",
      "/* a block; comment */",
      "CREATE FUNCTION \"{{schema}}\".f() RETURNS int LANGUAGE plpgsql AS $fn$ BEGIN PERFORM 1; RETURN $$;$$::text::int; END $fn$;",
      "SELECT a$b FROM t WHERE x = $1;",
      "NOTIFY x, '{{channel}}'"
    ].join("\n")
    assert.deepStrictEqual(Migrations.render(script, store), [
      "-- a comment; not a statement\nCREATE TABLE \"tenant_a\".\"odd;name\" (note text DEFAULT 'it''s; fine')",
      "/* a block; comment */\nCREATE FUNCTION \"tenant_a\".f() RETURNS int LANGUAGE plpgsql AS $fn$ BEGIN PERFORM 1; RETURN $$;$$::text::int; END $fn$",
      "SELECT a$b FROM t WHERE x = $1",
      "NOTIFY x, 'leasehold_tenant_a'"
    ])
  })

  it("a quote or body left open is an error naming where it opened, not a statement cut short", () => {
    assert.throws(() => Migrations.render("SELECT 'open;", store), /' opened at offset 7 is never closed/)
    assert.throws(() => Migrations.render("DO $fn$ BEGIN; END", store), /\$fn\$ opened at offset 3 is never closed/)
  })
})
