/**
 * Key slots (migrations 0010 and 0013): the lookups the claim and admission share.
 */
import type { StoreSchema } from "../../StoreSchema.js"

/**
 * The slots a key holds in the scope that governs it (`scope`, an expression: 'kind' or 'queue'),
 * as an array of slot numbers: one probe of that scope's slot index. The key is
 * named by SQL expressions for its queue, kind and concurrency key, which must be in the columns'
 * own collation for the index to answer.
 */
export const heldSlots = (
  s: StoreSchema,
  scope: string,
  key: { readonly queue: string; readonly kind: string; readonly concurrencyKey: string }
) => {
  const of = (column: "kind" | "queue", value: string) =>
    `ARRAY(SELECT o.key_slot FROM "${s.schema}".runs o WHERE o.key_scope = '${column}'
      AND o.${column} = ${value} AND o.concurrency_key = ${key.concurrencyKey} AND o.key_slot IS NOT NULL)`
  return `CASE ${scope} WHEN 'kind' THEN ${of("kind", key.kind)} ELSE ${of("queue", key.queue)} END`
}

/**
 * The limit that governs runs of `kind` in `queue` (expressions): its kind's if the kind declares
 * one, else its queue's. `joins` reads the two candidate rows of key_limits as `kl` and `ql`;
 * `scope` and `perKey` are what they decide (`perKey` NULL when neither declares a limit).
 */
export const governing = (s: StoreSchema, queue: string, kind: string) => ({
  joins: `LEFT JOIN "${s.schema}".key_limits kl ON kl.scope = 'kind' AND kl.name = ${kind}
        LEFT JOIN "${s.schema}".key_limits ql ON ql.scope = 'queue' AND ql.name = ${queue}`,
  scope: "CASE WHEN kl.per_key IS NOT NULL THEN 'kind' ELSE 'queue' END",
  perKey: "coalesce(kl.per_key, ql.per_key)"
})

