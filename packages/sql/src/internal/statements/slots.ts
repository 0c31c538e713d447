/**
 * Key slots (migrations 0010, 0013 and 0025): the lookups the claim and admission share.
 */
import type { StoreSchema } from "../../StoreSchema.js"

/**
 * The slots a key holds in the scope that governs it (`scope`, an expression: 'kind' or 'queue'),
 * as an array of slot numbers: one probe of key_holds' primary key (migration 0025: every held
 * slot is a row there, a row run's mirrored from its `key_slot`, a ledger run's written by the
 * ledger's statements). The key is named by SQL expressions for its queue, kind and concurrency
 * key.
 */
export const heldSlots = (
  s: StoreSchema,
  scope: string,
  key: { readonly queue: string; readonly kind: string; readonly concurrencyKey: string }
) =>
  `ARRAY(SELECT h.slot FROM "${s.schema}".key_holds h WHERE h.scope = ${scope}
      AND h.name = CASE ${scope} WHEN 'kind' THEN ${key.kind} ELSE ${key.queue} END AND h.key = ${key.concurrencyKey})`

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
