// The browser loads `vendor/preact.js`, copied from the installed `preact` package at build time
// (scripts/console-assets.mjs); its types are the package's own.
export * from "preact"
