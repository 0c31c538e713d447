// `vendor/hooks.js`: `preact/hooks` from the installed package, its one import of "preact" pointed
// at `./preact.js` at build time (scripts/console-assets.mjs); its types are the package's own.
export * from "preact/hooks"
