// Audit: the operators' actions not about one run (queues, schedules, limits) and deletes, newest
// first, with who made them and from where (`GET /api/actions`). A run's own resume, cancel and
// retry are on its page.
import { get, type OperatorAction } from "../api.js"
import { Loading, PageHeading, Table, Time, useLoad } from "../ui.js"
import { Fragment, h } from "../vendor/preact.js"

const detailText = (detail: unknown): string => detail === null || detail === undefined ? "" : JSON.stringify(detail)

export const Audit = () => {
  const loaded = useLoad(
    async () => (await get<{ actions: ReadonlyArray<OperatorAction> }>("/api/actions?limit=200")).actions,
    "audit"
  )
  return (
    <Fragment>
      <PageHeading title="Audit" />
      <Loading loaded={loaded}>
        {(actions) => (
          <Table
            caption="Operators' actions, newest first (the latest 200)"
            count={actions.length}
            empty="No operator action recorded yet."
            headers={["At", "By", "From", "Action", "Target", "Detail"]}
          >
            {actions.map((a) => (
              <tr key={a.id} data-action-id={a.id}>
                <td>
                  <Time at={a.at} />
                </td>
                <td class="actor">{a.by}</td>
                <td>{a.via}</td>
                <td class="mono">{a.action}</td>
                <td class="mono">{a.target}</td>
                <td class="mono detail-cell" title={detailText(a.detail)}>{detailText(a.detail)}</td>
              </tr>
            ))}
          </Table>
        )}
      </Loading>
    </Fragment>
  )
}
