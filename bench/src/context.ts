/** What every measure needs to know about the run. */
export interface BenchContext {
  /** URL of the server's maintenance database (`postgres`). */
  readonly serverUrl: string
  /** pg_stat_statements is preloaded on the server. */
  readonly statements: boolean
  /** Worker processes per system. */
  readonly workers: number
  /** A drain that has not finished after this long is stopped and reported as capped. */
  readonly capSeconds: number
  readonly keepDatabases: boolean
  /** Cores of this machine (shared by the server and the workers). */
  readonly cores: number
}
