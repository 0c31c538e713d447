/**
 * A seeded pseudo-random source (mulberry32): the same seed replays the same fault schedule and
 * the same mix of runs.
 *
 * @since 0.1.0
 */
export interface Random {
  readonly seed: number
  /** In [0, 1). */
  readonly next: () => number
  /** An integer in [min, max]. */
  readonly int: (min: number, max: number) => number
  readonly pick: <A>(weighted: ReadonlyArray<readonly [A, number]>) => A
}

export const make = (seed: number): Random => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  const pick = <A>(weighted: ReadonlyArray<readonly [A, number]>): A => {
    const total = weighted.reduce((sum, [, w]) => sum + w, 0)
    let roll = next() * total
    for (const [value, weight] of weighted) {
      roll -= weight
      if (roll < 0) return value
    }
    return weighted[weighted.length - 1]![0]
  }
  return { seed, next, int, pick }
}

export const freshSeed = (): number => Math.floor(Math.random() * 2 ** 31)
